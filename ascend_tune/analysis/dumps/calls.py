"""One call model for both engines' dumps: which parameter an argument slot is, what a missing one stands for, and
which op names are one API.

- **Argument roles.** msprobe (and the builtin engine since call model 2, see :mod:`ascend_tune.formats.dump_layout`)
  record an API's arguments as its caller passed them: ``F.layer_norm(x, shape, w, b, 1e-5)`` gives ``input.0`` ...
  ``input.4``; the same call with ``eps=1e-5`` gives ``input.eps``; older builtin dumps recorded the keywords a
  Python-level function forwards (``input.weight``) and left out those at their defaults. :func:`argument` names
  the parameter behind a slot (``input.4`` of ``Functional.layer_norm`` -> ``eps``), so both pair as one argument,
  and :func:`default` gives the value an argument one dump lacks stands for (``eps`` -> ``1e-05``).
- **API families.** A reflected operator on a Python number (``2 * x``) is ``Tensor.__rmul__`` in msprobe and
  ``Tensor.__mul__`` in the builtin engine (its torch function mode cannot tell them apart); :func:`family` folds
  them into one API, paired by call order.

Parameter names and defaults come from ``api_signatures.json`` beside this module, read from torch by
:mod:`ascend_tune.precision.signatures` (no torch import here). Its entries: ``name``, ``name=<JSON default>``,
``name=?`` (a default it cannot spell), ``?`` (a position whose name differs between overloads), ``*name``
(variadic), ``*`` (keyword-only parameters follow). An API it does not list keeps its slots as they are.
"""

from __future__ import annotations

import functools
import json
import os
import re
from typing import Any, NamedTuple, Optional

TABLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "api_signatures.json")
_API_CALL = re.compile(r"^(?P<api>[A-Za-z]+\.[\w.]+?)\.(?P<count>\d+)\.(?P<dir>forward|backward)$")
_NO_DEFAULT = object()
_REFLECTED = {f"Tensor.__r{op}__": f"Tensor.__{op}__" for op in ("add", "mul", "and", "or", "xor")}
FOLDED = frozenset(_REFLECTED) | frozenset(_REFLECTED.values())
"""API names paired by call order within their family rather than by the count in their name."""


class Parameter(NamedTuple):
    """One parameter of an API: its name, whether it has a default, and the default (None when unknown)."""

    name: str
    has_default: bool
    default: Any
    known_default: bool  # False for ``name=?``: a default the table cannot spell


class Signature(NamedTuple):
    """An API's parameters: the positional ones in order (None where overloads disagree), and all by name."""

    positional: tuple  # Parameter or None, in order; stops before a variadic one
    by_name: dict


@functools.lru_cache(maxsize=1)
def _table() -> dict:
    try:
        with open(TABLE, encoding="utf-8") as fh:
            return json.load(fh).get("apis", {})
    except (OSError, ValueError):  # a broken install: slots stay as recorded
        return {}


@functools.lru_cache(maxsize=4096)
def signature(api: str) -> Optional[Signature]:
    """The parameters of ``api`` (``Functional.layer_norm``), or None when the table does not list it."""
    entries = _table().get(api)
    if not isinstance(entries, list):
        return None
    positional: list = []
    by_name: dict = {}
    keyword_only = variadic = False
    for entry in entries:
        if entry == "*":
            keyword_only = True
            continue
        if entry.startswith("*"):
            variadic = True
            continue
        if entry == "?":
            if not (keyword_only or variadic):
                positional.append(None)
            continue
        name, has_default, text = entry.partition("=")
        known = bool(has_default) and text != "?"
        param = Parameter(name, bool(has_default), json.loads(text) if known else None, known)
        by_name[name] = param
        if not (keyword_only or variadic):
            positional.append(param)
    return Signature(tuple(positional), by_name)


def api_of(op_name: str, backward: bool = False) -> Optional[str]:
    """The API of a forward API call (``Functional.layer_norm.0.forward`` -> ``Functional.layer_norm``), with
    ``backward`` of its backward too, else None."""
    m = _API_CALL.match(op_name)
    wanted = ("forward", "backward") if backward else ("forward",)
    return m["api"] if m and m["dir"] in wanted and not op_name.startswith("Module.") else None


def argument(api: Optional[str], slot: str) -> tuple:
    """``(key, parameter)`` of an argument slot: the key both dumps pair it by, and the parameter it fills.

    ``input.4`` and ``input.eps`` of ``Functional.layer_norm`` are both ``("arg.eps", eps)``; a nested slot keeps its
    tail (``input.1.0`` -> ``arg.normalized_shape.0``). Slots of unknown APIs, positions overloads name
    differently, results and parameters keep their slot as key, with no parameter.
    """
    head, _, rest = slot.partition(".")
    sig = signature(api) if api and head == "input" and rest else None
    if sig is None:
        return slot, None
    first, _, tail = rest.partition(".")
    if first.isdigit():
        index = int(first)
        param = sig.positional[index] if index < len(sig.positional) else None
    else:
        param = sig.by_name.get(first)
    if param is None:
        return slot, None
    return f"arg.{param.name}" + (f".{tail}" if tail else ""), param


def default(param: Optional[Parameter], key: str) -> Any:
    """What an argument one dump does not record stands for: its default, or :data:`NO_DEFAULT` when unknown
    (no parameter, a nested slot, a default the table cannot spell)."""
    if param is None or not param.known_default or key.count(".") > 1:
        return _NO_DEFAULT
    return param.default


def has(value: Any) -> bool:
    """Whether :func:`default` found a default (None is a default)."""
    return value is not _NO_DEFAULT


def family(api: str) -> str:
    """The API an op name belongs to for pairing: reflected operators fold into their plain form."""
    return _REFLECTED.get(api, api)


@functools.cache
def mutated_slots(api: Optional[str]) -> tuple:
    """The argument slots an API writes into (``Tensor.add_`` -> ``("input.0",)``), read from its name once per API.

    torch's convention, the one its schemas follow: a Tensor method or torch function whose name ends in one
    underscore works in place on its first argument (``Tensor.addcdiv_``, ``Torch._foreach_lerp_``, the augmented
    operators ``Tensor.__iadd__``); a collective writes into its first argument; ``out=`` is written by any API
    (:func:`mutates`). A slot's own elements (``input.0.3`` of a foreach list) count with it.
    """
    if not api:
        return ()
    prefix, _, name = api.partition(".")
    inplace_name = name.endswith("_") and not name.endswith("__") or name.startswith("__i") and name.endswith("__")
    if prefix in ("Tensor", "Torch", "NPU") and inplace_name or prefix == "Distributed":
        return ("input.0",)
    return ()


def mutates(api: Optional[str], slot: str) -> bool:
    """Whether ``slot`` of a call to ``api`` is an argument the call writes into (see :func:`mutated_slots`)."""
    if slot == "input.out" or slot.startswith("input.out."):
        return True
    return any(slot == s or slot.startswith(s + ".") for s in mutated_slots(api))
