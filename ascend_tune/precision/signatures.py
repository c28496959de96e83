"""The parameter lists of the catalog's APIs, read from torch, as the table the offline compare reads.

The compare (:mod:`ascend_tune.analysis.dumps.calls`) pairs an op's arguments by parameter name (``input.4`` of
``F.layer_norm`` and a keyword ``input.eps`` are both ``eps``) and stands an argument one dump lacks in by its
default. It imports no torch, so the names and defaults come from ``analysis/dumps/api_signatures.json``, written
here: ``python -m ascend_tune.precision.signatures`` rewrites it from the installed torch, and a test checks it
matches the torch the tests run on.

Sources: a Python-level function's ``inspect.signature``; a C-level one's native schemas
(``torch._C._jit_get_schemas_for_operator("aten::<name>")``), merged over its overloads (``out=`` overloads and
those on plain Python numbers left out): a position whose name differs between overloads is ``?``, a default that
differs between them (or is not a JSON scalar) is unknown. Entries, one string per parameter: ``name`` (no
default), ``name=<JSON>`` (its default), ``name=?`` (a default this table cannot spell, e.g. a list or
``torch.contiguous_format``), ``?`` (a position with no one name), ``*name`` (variadic positional), ``*``
(keyword-only parameters follow).
"""

from __future__ import annotations

import inspect
import json
import math
import os
import sys
from typing import Any, Optional

import torch

from ..recording import catalog

TABLE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "analysis", "dumps",
                     "api_signatures.json")
_LITERALS = (type(None), bool, int, float, str)
_BINARY_DUNDER = ["self", "other"]


def build() -> dict:
    """The table for the installed torch: ``{"torch": version, "apis": {"Functional.layer_norm": [...], ...}}``."""
    apis: dict = {}
    for prefix, name, func in catalog.listed_apis():
        params = _python_params(func) if inspect.isfunction(func) else None
        # F.max_pool2d and the like are boolean_dispatch's `fn(*args, **kwargs)`: their native schema says more
        dispatcher = inspect.isfunction(func) and func.__code__.co_name != func.__name__ and params == ["*args"]
        if params is None or dispatcher:
            if name.startswith("__") and name.endswith("__"):
                params = ["self", "indices", "value"] if name == "__setitem__" else list(_BINARY_DUNDER)
            else:
                params = _native_params(getattr(func, "__name__", name), prefix)
        if params:
            apis[f"{prefix}.{name}"] = params
    return {"torch": torch.__version__.split("+")[0], "apis": dict(sorted(apis.items()))}


def render(table: dict) -> str:
    """The table as the JSON file holds it: one API a line, so a torch upgrade reads as a short diff."""
    lines = [f"  {json.dumps(name)}: {json.dumps(params)}" for name, params in table["apis"].items()]
    return '{\n "torch": ' + json.dumps(table["torch"]) + ',\n "apis": {\n' + ",\n".join(lines) + "\n }\n}\n"


def _default(value: Any) -> str:
    if isinstance(value, _LITERALS) and not (isinstance(value, float) and not math.isfinite(value)):
        return "=" + json.dumps(value)
    return "=?"  # a list (stride=[1, 1]), a dtype, a memory format: compared only when both dumps record it


def _python_params(func: Any) -> Optional[list]:
    try:
        parameters = inspect.signature(func).parameters.values()
    except (TypeError, ValueError):
        return None
    out: list = []
    starred = False
    for p in parameters:
        if p.kind is p.VAR_POSITIONAL:
            out.append("*" + p.name)
            starred = True
        elif p.kind is p.VAR_KEYWORD:
            continue
        else:
            if p.kind is p.KEYWORD_ONLY and not starred:
                out.append("*")
                starred = True
            out.append(p.name + ("" if p.default is p.empty else _default(p.default)))
    return out


def _native_params(name: str, prefix: str) -> Optional[list]:
    try:
        schemas = torch._C._jit_get_schemas_for_operator(f"aten::{name}")
    except RuntimeError:
        return None
    kept = [s for s in schemas if s.arguments and not s.overload_name.endswith("out")
            and not any(a.is_out for a in s.arguments) and "Tensor" in str(s.arguments[0].type)]
    if not kept:
        return None
    positions: dict = {}
    keywords: dict = {}
    for schema in kept:
        index = 0
        for arg in schema.arguments:
            default = _default(arg.default_value) if arg.has_default_value() else ""
            if arg.kwarg_only:
                keywords.setdefault(arg.name, []).append(default)
            else:
                positions.setdefault(index, []).append((arg.name, default))
                index += 1
    out: list = []
    for index in sorted(positions):
        names = {n for n, _ in positions[index]}
        if len(names) != 1:
            out.append("?")
            continue
        param = names.pop()
        if index == 0 and param == "self" and prefix != "Tensor":
            param = "input"  # torch.add(input=x): the Python binding's name for a function's self
        defaults = {d for _, d in positions[index]}
        out.append(param + (defaults.pop() if len(defaults) == 1 else ("" if "" in defaults else "=?")))
    named = {p.partition("=")[0] for p in out}
    only = [k for k in keywords if k not in named]
    if only:
        out.append("*")
        for key in only:
            defaults = set(keywords[key])
            out.append(key + (defaults.pop() if len(defaults) == 1 else ("" if "" in defaults else "=?")))
    return out


def main(argv: Optional[list] = None) -> int:
    """Write the table for the installed torch (``--check``: exit 1 when the shipped one differs)."""
    args = sys.argv[1:] if argv is None else argv
    text = render(build())
    if "--check" in args:
        with open(TABLE, encoding="utf-8") as fh:
            same = fh.read() == text
        print(f"{TABLE}: {'up to date' if same else 'differs from the installed torch; rewrite it'}")
        return 0 if same else 1
    with open(TABLE, "w", encoding="utf-8") as fh:
        fh.write(text)
    print(f"wrote {TABLE} ({text.count(chr(10)) - 4} APIs, torch {torch.__version__})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
