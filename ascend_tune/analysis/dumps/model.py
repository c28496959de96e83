"""The dump model every reader fills and every tool reads: a :class:`Dump` of :class:`Op` calls in execution order,
each with its arguments and results as :class:`Leaf` values.

Slot names follow msprobe's compare rows: ``input.0``, ``input.<kwarg>``, ``parameters.weight``, ``output.0``
(nested arguments add ``.1``...), and a parameter-gradient entry's ``weight`` / ``bias``. A backward entry's
``input`` is the gradient it received and its ``output`` the gradients it produced. Stack frames are kept as the
strings stack.json holds (:attr:`Op.stack`); :class:`Frame` is their parsed form.

No torch import: loading a saved ``.pt`` tensor imports torch inside :meth:`Dump.load_tensor` only.
"""

from __future__ import annotations

import difflib
import functools
import io
import math
import re
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Optional

from ...errors import InputError
from ...formats.dump_layout import BUILTIN_WRITER, DUMP_JSON, FRAME, OWN_USER_FOLDERS

_NAN = float("nan")
_LIBRARY_PARTS = ("site-packages", "dist-packages", "/torch/", "/msprobe/", "/ptdbg_ascend/", "/ascend_tune/")
_USER_PARTS = tuple(f"/ascend_tune/{folder}/" for folder in OWN_USER_FOLDERS)  # the models under test: the user's


class Stats(NamedTuple):
    """A tensor's summary statistics as dumped; NaN where unknown."""

    max: float
    min: float
    mean: float
    norm: float


NO_STATS = Stats(_NAN, _NAN, _NAN, _NAN)


@dataclass(frozen=True)
class Frame:
    """One frame of a call stack: where an op was called from."""

    file: str
    line: int
    function: str
    code: str

    def as_dict(self) -> dict:
        """A JSON-ready dict."""
        return {"file": self.file, "line": self.line, "function": self.function, "code": self.code}


def parse_frame(text: str) -> Frame:
    """A stack.json frame string (``File f, line n, in fn, \\n code``) as a :class:`Frame`."""
    match = FRAME.match(text)
    if match is None:
        return Frame(file="", line=0, function="", code=text.strip())
    return Frame(match["file"], int(match["line"]), match["function"], (match["code"] or "").strip())


def forward_name(name: str) -> str:
    """``Functional.linear.0.backward`` -> ``...forward``; ``Module.fc.Linear.backward.0`` -> ``...forward.0``."""
    if name.startswith("Module.") and ".backward." in name:
        head, _, tail = name.rpartition(".backward.")
        return f"{head}.forward.{tail}"
    if name.endswith(".backward"):
        return name[: -len("backward")] + "forward"
    return name


def is_call(name: str) -> bool:
    """API and module calls (``X.0.forward``, ``Module.m.C.backward.0``), not ``parameters_grad`` entries."""
    if name.endswith((".forward", ".backward")):
        return True
    return name.startswith("Module.") and (".forward." in name or ".backward." in name)


def as_float(value: Any) -> float:
    """A dumped statistic as a float (``"inf"`` / ``"nan"`` strings too; a bool tensor's ``true`` / ``false`` as 1 /
    0, so a comparison's result is no inf/NaN); NaN for anything else."""
    if not isinstance(value, (int, float, str)):  # bool is an int
        return _NAN
    try:
        return float(value)
    except ValueError:
        return _NAN


@dataclass(frozen=True)
class Leaf:
    """One argument or result of an op: a tensor's statistics, a scalar, or nothing."""

    slot: str
    role: str  # "input" (arguments, parameters) or "output" (results, parameter gradients)
    kind: str  # "tensor", "scalar", "none" or "other"
    dtype: str
    shape: Optional[tuple]
    stats: Stats
    requires_grad: Optional[bool] = None
    md5: Optional[str] = None
    data_name: Optional[str] = None
    value: Any = None
    has_stats: bool = True  # False when the dump gave no max/min (an empty tensor, an md5-only dump, a journal)

    @property
    def overflow(self) -> bool:
        """Whether this is a tensor whose max or min is inf or NaN."""
        return self.kind == "tensor" and self.has_stats and not (
            math.isfinite(self.stats.max) and math.isfinite(self.stats.min))


@dataclass(frozen=True)
class Op:
    """One dumped API call or module call (or a module's parameter gradients)."""

    name: str
    leaves: tuple
    parent: Optional[str] = None
    stack: tuple = ()  # stack.json's frame strings, innermost first

    @property
    def inputs(self) -> tuple:
        """The leaves the call received."""
        return tuple(leaf for leaf in self.leaves if leaf.role == "input")

    @property
    def outputs(self) -> tuple:
        """The leaves the call produced."""
        return tuple(leaf for leaf in self.leaves if leaf.role == "output")

    @property
    def frames(self) -> tuple:
        """:attr:`stack` parsed into :class:`Frame` objects."""
        return tuple(parse_frame(f) for f in self.stack)

    def user_frames(self) -> tuple:
        """The stack frames in the user's code (library frames of torch, msprobe, ascend_tune left out)."""
        return tuple(f for f in self.stack if _is_user_file(f.split(", line")[0]))


@dataclass(frozen=True, eq=False)
class Dump:
    """One step of one rank read into memory: ops in execution order, and where its tensor files are.

    label: how messages name it; layout: ``msprobe`` (also the builtin engine's) or ``ptdbg``; sequence: every op
    name construct.json lists (also ops run without data), in execution order; malformed: index entries that could
    not be read; files / data_folder: where the saved tensors are (``data_folder`` None without tensors); path: the
    rank folder on disk (None inside an archive); data: the index's raw entries (msprobe layout; empty for ptdbg);
    construct: op -> parent module; complete: False when rebuilt from the journal of a step that never ended
    (names, dtypes, shapes, stacks, no statistics); source: the index file read; writer: dump.json's ``writer``
    header (the builtin engine's name, version and call model; None for msprobe, ptdbg and older builtin dumps).
    """

    label: str
    layout: str
    task: str
    level: Optional[str]
    ops: tuple
    sequence: tuple = ()
    malformed: int = 0
    files: Any = field(default=None, repr=False)  # sources.DumpFiles
    data_folder: Optional[str] = None
    step: Optional[int] = None
    rank: Optional[int] = None
    path: Optional[str] = None
    framework: Optional[str] = None
    dump_data_dir: Optional[str] = None
    data: dict = field(default_factory=dict, repr=False)
    construct: dict = field(default_factory=dict, repr=False)
    complete: bool = True
    source: str = DUMP_JSON
    writer: Optional[dict] = field(default=None, repr=False)

    @property
    def engine(self) -> str:
        """Which tool wrote the dump: ``ascend_tune <version> (builtin engine)``, ``msprobe`` or ``ptdbg_ascend``.

        A builtin dump from before the ``writer`` header reads as msprobe: the layouts are the same."""
        if self.layout == "ptdbg":
            return "ptdbg_ascend"
        if isinstance(self.writer, dict) and self.writer.get("name") == BUILTIN_WRITER:
            return f"ascend_tune {self.writer.get('version', '')} (builtin engine)".replace("  ", " ")
        return "msprobe"

    @property
    def inputs_as_received(self) -> bool:
        """Whether every argument is recorded as the op received it (msprobe, ptdbg, builtin call model 3 and later);
        the builtin engine up to call model 2 read a 0-d argument back at the step's end, after an in-place op
        changed it (see :mod:`ascend_tune.formats.dump_layout`). A builtin dump of call model 1 wrote no header
        and reads as msprobe's."""
        if not isinstance(self.writer, dict):
            return True
        return self.writer.get("name") != BUILTIN_WRITER or int(self.writer.get("call_model") or 0) >= 3

    @property
    def names(self) -> list:
        """Op names in execution order."""
        return [op.name for op in self.ops]

    @functools.cached_property
    def by_name(self) -> dict:
        """Op name -> :class:`Op`."""
        return {op.name: op for op in self.ops}

    def stack_of(self, name: str) -> tuple:
        """The :class:`Frame` objects of ``name``; a backward entry gets its forward's (msprobe keeps only those)."""
        op = self.by_name.get(name)
        if op is None or not op.stack:
            op = self.by_name.get(forward_name(name), op)
        return op.frames if op is not None else ()

    def parents_of(self, name: str) -> list:
        """The modules ``name`` ran in, innermost first (from construct.json)."""
        chain, seen = [], {name}
        parent = self.by_name[name].parent if name in self.by_name else self.construct.get(name)
        while isinstance(parent, str) and parent not in seen:
            chain.append(parent)
            seen.add(parent)
            op = self.by_name.get(parent)
            parent = op.parent if op is not None else self.construct.get(parent)
        return chain

    @property
    def has_tensors(self) -> bool:
        """Whether the dump holds saved tensors (task ``tensor``)."""
        return self.data_folder is not None and any(leaf.data_name for op in self.ops for leaf in op.leaves)

    def load_tensor(self, leaf: Leaf) -> Any:
        """The saved values of ``leaf`` as a numpy array (float64/int/bool), or None when the dump holds none."""
        if not leaf.data_name or self.data_folder is None or self.files is None:
            return None
        name = f"{self.data_folder}/{leaf.data_name}" if self.data_folder else leaf.data_name
        if not self.files.exists(name):
            return None
        data = self.files.read(name)
        if name.endswith(".npy"):
            import numpy as np

            try:
                return np.load(io.BytesIO(data), allow_pickle=False)
            except ValueError:
                raise InputError(f"{self.label}: {name} is not a plain .npy array") from None
        return _torch_array(self.label, name, data)

    def find(self, name: str) -> list:
        """Ops named ``name``; else ops whose names start with it; else ops whose names contain it.

        Nothing found: an InputError that names the calls the dump holds of the same API (the count differs between
        runs and engines: ``Functional.linear.12.forward`` -> ``Functional.linear.8.forward``, the last of 9), else
        close names, else a name this dump does hold.
        """
        for test in (lambda n: n == name, lambda n: n.startswith(name), lambda n: name in n):
            found = [op for op in self.ops if test(op.name)]
            if found:
                return found
        raise InputError(f"{self.label} has no op {name!r}; {self._suggest(name)}")

    def _suggest(self, name: str) -> str:
        names = [op.name for op in self.ops]
        if not names:
            return "the dump holds no op"
        wanted = call_parts(name)
        if wanted is not None:
            head, count, direction = wanted
            heads = {head, *_SPELLINGS.get(head, ())}
            calls = sorted((parts[1], n) for n in names for parts in [call_parts(n)]
                           if parts is not None and parts[0] in heads and parts[2] == direction)
            if calls:
                nearest = min(calls, key=lambda c: (abs(c[0] - count), c[0]))[1]
                counts = f"{calls[0][0]}-{calls[-1][0]}" if len(calls) > 1 else str(calls[0][0])
                return f"did you mean {nearest}? (this dump holds {len(calls)} such call(s), counts {counts})"
        close = difflib.get_close_matches(name, names, n=3)
        if close:
            return f"did you mean {', '.join(close)}?"
        return f"names in this dump look like {names[0]}"


_API_CALL = re.compile(r"^(?P<head>.+?)\.(?P<count>\d+)\.(?P<dir>forward|backward)$")
_MODULE_CALL = re.compile(r"^(?P<head>Module\..+)\.(?P<dir>forward|backward)\.(?P<count>\d+)$")
# the other engine's spelling of a reflected operator (msprobe's Tensor.__rmul__ is the builtin's Tensor.__mul__)
_SPELLINGS = {f"Tensor.__{op}__": (f"Tensor.__r{op}__",) for op in ("add", "mul", "and", "or", "xor")}
_SPELLINGS.update({f"Tensor.__r{op}__": (f"Tensor.__{op}__",) for op in ("add", "mul", "and", "or", "xor")})


def call_parts(name: str) -> Optional[tuple]:
    """``(head, count, direction)`` of an API or module call name, else None.

    ``Functional.linear.3.forward`` -> ``("Functional.linear", 3, "forward")``; ``Module.fc.Linear.backward.0`` ->
    ``("Module.fc.Linear", 0, "backward")``.
    """
    m = _MODULE_CALL.match(name) if name.startswith("Module.") else None
    m = m or _API_CALL.match(name)
    return (m["head"], int(m["count"]), m["dir"]) if m else None


def _is_user_file(head: str) -> bool:
    if head.startswith("File <") or head.startswith("<"):  # <frozen runpy>, <string>: the interpreter's, not the user's
        return False
    return any(part in head for part in _USER_PARTS) or not any(part in head for part in _LIBRARY_PARTS)


def _torch_array(label: str, name: str, data: bytes) -> Any:
    import torch

    try:
        # weights_only (torch 1.13, the default from 2.6): a dump's .pt holds one tensor, never code to run
        value = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises many types for a bad file
        raise InputError(f"{label}: cannot load {name} ({type(exc).__name__}); is the dump complete?") from None
    if not isinstance(value, torch.Tensor):
        raise InputError(f"{label}: {name} holds a {type(value).__name__}, not a tensor")
    value = value.detach()
    if value.dtype in (torch.bfloat16, torch.float16) or value.dtype.is_complex:
        value = value.to(torch.float32 if not value.dtype.is_complex else torch.complex64)
    return value.numpy()
