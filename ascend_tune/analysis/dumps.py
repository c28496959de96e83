"""Precision dumps read into one model: ops in execution order, each with its input and output tensors.

Layouts read (see :mod:`.dump_sources` for where they live):

- **msprobe** and ascend_tune's built-in engine: ``dump.json`` = ``{task, level, framework, dump_data_dir,
  data: {op name: {input_args, input_kwargs, output[, parameters]} | {input, output} | {param: [tensor]}}}``, each
  tensor ``{type, dtype, shape, Max, Min, Mean, Norm, requires_grad[, md5][, data_name]}``, scalars
  ``{type, value}``; ``stack.json`` = ``{i: [[op names], [frames]]}`` (8.x: ``{op name: [frames]}``);
  ``construct.json`` = ``{op name: parent module}``; tensors in ``dump_tensor_data/<data_name>`` (``.pt``).
- **ptdbg_ascend**: ``*.pkl`` JSON lines ``[name_input.0, step, [], dtype, shape, [max, min, mean(, norm)]]`` and
  ``[name_stack_info, [[file, line, func, code], ...]]``; tensors in ``<pkl stem>/<name>.npy``. Read as JSON, never
  unpickled.

Slot names follow msprobe's compare rows: ``input.0``, ``input.<kwarg>``, ``parameters.weight``, ``output.0``
(nested arguments add ``.1``...), and a parameter-gradient entry's ``weight`` / ``bias``. Ops are in the order the
index lists them, which is the order they finished in.
"""

from __future__ import annotations

import difflib
import io
import json
import math
import re
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from ..errors import InputError
from .dump_sources import DumpFiles, DumpRef

_NAN = float("nan")
_TENSOR_TYPES = ("torch.Tensor", "mindspore.Tensor", "numpy.ndarray", "torch.nn.parameter.Parameter")
_PTDBG_DATA = re.compile(r"^(?P<op>.+)_(?P<dir>input|output)(?P<sub>(?:\.[^.]+)*)$")
_FRAME = re.compile(r"^File (?P<file>.*?), line (?P<line>\d+), in (?P<func>.*?),")
_KEY_ORDER = ("input_args", "input_kwargs", "parameters", "input")  # msprobe's row order: inputs, then outputs
_LIBRARY_PARTS = ("site-packages", "dist-packages", "/torch/", "/msprobe/", "/ptdbg_ascend/", "/ascend_tune/")


@dataclass(frozen=True)
class Leaf:
    """One argument or result of an op: a tensor's statistics, a scalar, or nothing."""

    slot: str
    role: str  # "input" (arguments, parameters) or "output" (results, parameter gradients)
    kind: str  # "tensor", "scalar", "none" or "other"
    dtype: str
    shape: Optional[tuple]
    stats: tuple  # (max, min, mean, norm); NaN where unknown
    requires_grad: Optional[bool] = None
    md5: Optional[str] = None
    data_name: Optional[str] = None
    value: Any = None
    has_stats: bool = True  # False when the dump gave no max/min (an empty tensor, an md5-only dump)

    @property
    def overflow(self) -> bool:
        """Whether this is a tensor whose max or min is inf or NaN."""
        return self.kind == "tensor" and self.has_stats and not all(math.isfinite(v) for v in self.stats[:2])


@dataclass(frozen=True)
class Op:
    """One dumped API call or module call."""

    name: str
    leaves: tuple
    parent: Optional[str] = None
    stack: tuple = ()

    @property
    def inputs(self) -> tuple:
        return tuple(leaf for leaf in self.leaves if leaf.role == "input")

    @property
    def outputs(self) -> tuple:
        return tuple(leaf for leaf in self.leaves if leaf.role == "output")

    def user_frames(self) -> tuple:
        """The stack frames in the user's code (library frames of torch, msprobe, ascend_tune left out)."""
        return tuple(f for f in self.stack if not any(part in f.split(", line")[0] for part in _LIBRARY_PARTS))


@dataclass(frozen=True, eq=False)
class Dump:
    """A dump read into memory: ops in execution order, and where its tensor files are."""

    label: str
    layout: str
    task: str
    level: Optional[str]
    ops: tuple
    sequence: tuple  # every op name construct.json lists (also ops run without data), in execution order
    malformed: int
    files: DumpFiles
    data_folder: Optional[str]  # POSIX path of the tensor files inside ``files``

    @property
    def has_tensors(self) -> bool:
        return self.data_folder is not None and any(leaf.data_name for op in self.ops for leaf in op.leaves)

    def load_tensor(self, leaf: Leaf) -> Optional[np.ndarray]:
        """The saved values of ``leaf`` as a float64/int/bool array, or None when the dump holds none."""
        if not leaf.data_name or self.data_folder is None:
            return None
        name = f"{self.data_folder}/{leaf.data_name}" if self.data_folder else leaf.data_name
        if not self.files.exists(name):
            return None
        data = self.files.read(name)
        if name.endswith(".npy"):
            try:
                return np.load(io.BytesIO(data), allow_pickle=False)
            except ValueError:
                raise InputError(f"{self.label}: {name} is not a plain .npy array") from None
        return _torch_array(self.label, name, data)

    def find(self, name: str) -> list:
        """Ops named ``name``; else ops whose names start with it; else ops whose names contain it."""
        for test in (lambda n: n == name, lambda n: n.startswith(name), lambda n: name in n):
            found = [op for op in self.ops if test(op.name)]
            if found:
                return found
        close = difflib.get_close_matches(name, [op.name for op in self.ops], n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else "; names look like Functional.linear.0.forward"
        raise InputError(f"{self.label} has no op {name!r}{hint}")


def read_dump(files: DumpFiles, ref: DumpRef) -> Dump:
    """Read the dump ``ref`` of a location into a :class:`Dump`."""
    label = files.label if not ref.folder else f"{files.label}:{ref.folder}"
    if ref.layout == "ptdbg":
        return _read_ptdbg(files, ref, label)
    return _read_msprobe(files, ref, label)


def _json(files: DumpFiles, name: str, label: str) -> Any:
    raw = files.read(name)
    if b"\x00" in raw[:4096]:
        raise InputError(f"{label}: {name} is a binary file, not a dump index")
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise InputError(f"{label}: {name} is not valid JSON ({exc}); is the dump complete?") from None


def _read_msprobe(files: DumpFiles, ref: DumpRef, label: str) -> Dump:
    index = _json(files, ref.index, label)
    if not isinstance(index, dict) or not isinstance(index.get("data"), dict):
        raise InputError(
            f"{label}: {ref.index} is not a dump index (no 'data' object); pass msprobe's or ascend_tune's dump.json"
        )
    folder = ref.folder
    prefix = f"{folder}/" if folder else ""
    stacks = _stacks(files, prefix + "stack.json", label)
    parents = _optional_json(files, prefix + "construct.json", label)
    ops, malformed = [], 0
    for name, entry in index["data"].items():
        if not isinstance(entry, dict):
            malformed += 1
            continue
        leaves: list = []
        keys = [k for k in _KEY_ORDER if k in entry] + [k for k in entry if k not in _KEY_ORDER and k != "output"]
        for key in keys + (["output"] if "output" in entry else []):
            value = entry[key]
            if key == "input_args":
                _flatten(value, "input", "input", leaves)
            elif key == "input_kwargs" and isinstance(value, dict):
                for kw, item in value.items():
                    _flatten(item, f"input.{kw}", "input", leaves)
            elif key in ("input", "output"):
                _flatten(value, key, key, leaves)
            elif key == "parameters" and isinstance(value, dict):
                for pname, item in value.items():
                    _flatten(item, f"parameters.{pname}", "input", leaves, unwrap=True)
            elif isinstance(value, (list, dict)):  # a parameter-gradient entry: {"weight": [tensor], ...}
                _flatten(value, key, "output", leaves, unwrap=True)
        parent = parents.get(name) if isinstance(parents, dict) else None
        ops.append(Op(name, tuple(leaves), parent if isinstance(parent, str) else None, stacks.get(name, ())))
    sequence = tuple(parents) if isinstance(parents, dict) else ()
    has_data = files.exists(prefix + "dump_tensor_data/" + _first_data_name(ops)) if ops else False
    return Dump(
        label, "msprobe", str(index.get("task") or "statistics"), index.get("level"), tuple(ops), sequence,
        malformed, files, prefix + "dump_tensor_data" if has_data else None,
    )


def _first_data_name(ops: list) -> str:
    return next((leaf.data_name for op in ops for leaf in op.leaves if leaf.data_name), "\0")


def _optional_json(files: DumpFiles, name: str, label: str) -> Any:
    return _json(files, name, label) if files.exists(name) else {}


def _stacks(files: DumpFiles, name: str, label: str) -> dict:
    raw = _optional_json(files, name, label)
    out: dict = {}
    if not isinstance(raw, dict):
        return out
    for key, value in raw.items():
        if (isinstance(value, list) and len(value) == 2 and isinstance(value[0], list)
                and all(isinstance(n, str) for n in value[0])):
            for op_name in value[0]:
                out[op_name] = tuple(str(f) for f in value[1])
        elif isinstance(value, list):
            out[key] = tuple(str(f) for f in value)
    return out


def _flatten(value: Any, slot: str, role: str, out: list, unwrap: bool = False) -> None:
    if isinstance(value, dict) and "type" in value:
        out.append(_leaf(value, slot, role))
    elif value is None:
        out.append(Leaf(slot, role, "none", "N/A", None, (_NAN,) * 4))
    elif isinstance(value, (list, tuple)):
        if unwrap and len(value) == 1:
            _flatten(value[0], slot, role, out)
        else:
            for i, item in enumerate(value):
                _flatten(item, f"{slot}.{i}", role, out)
    elif isinstance(value, dict):
        for key, item in value.items():
            _flatten(item, f"{slot}.{key}", role, out)


def _leaf(entry: dict, slot: str, role: str) -> Leaf:
    kind_of = entry.get("type")
    if kind_of in _TENSOR_TYPES or "Max" in entry:
        shape = entry.get("shape")
        data_name = entry.get("data_name")
        return Leaf(
            slot, role, "tensor", str(entry.get("dtype")), tuple(shape) if isinstance(shape, list) else None,
            tuple(_number(entry.get(k)) for k in ("Max", "Min", "Mean", "Norm")),
            entry.get("requires_grad") if isinstance(entry.get("requires_grad"), bool) else None,
            entry.get("md5"), data_name if isinstance(data_name, str) and data_name != "-1" else None,
            has_stats=entry.get("Max") is not None and entry.get("Min") is not None,
        )
    value = entry.get("value")
    dtype = f"<class '{kind_of}'>"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return Leaf(slot, role, "scalar", dtype, (), (float(value),) * 4, value=value)
    return Leaf(slot, role, "other", dtype, (), (_NAN,) * 4, value=value)


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return _NAN
    try:
        return float(value)
    except ValueError:
        return _NAN


def _read_ptdbg(files: DumpFiles, ref: DumpRef, label: str) -> Dump:
    raw = files.read(ref.index)
    if b"\x00" in raw[:4096]:
        raise InputError(f"{label}: {ref.index} is binary; a ptdbg .pkl is JSON lines (it is never unpickled)")
    by_op: dict = {}
    stacks: dict = {}
    malformed = lines = 0
    for line in raw.decode("utf-8", errors="replace").splitlines():
        if not line.strip():
            continue
        lines += 1
        try:
            item = json.loads(line)
        except ValueError:
            malformed += 1
            continue
        if isinstance(item, list) and len(item) == 2 and isinstance(item[0], str) and item[0].endswith("_stack_info"):
            stacks[item[0][: -len("_stack_info")]] = tuple(_ptdbg_frame(f) for f in item[1] or [])
            continue
        match = _PTDBG_DATA.match(item[0]) if isinstance(item, list) and len(item) >= 6 and isinstance(
            item[0], str) else None
        if match is None:
            malformed += 1
            continue
        role = match.group("dir")
        by_op.setdefault(match.group("op"), []).append(_ptdbg_leaf(item, role + match.group("sub"), role))
    if not by_op:
        raise InputError(
            f"{label}: {ref.index} holds no ptdbg records ({lines} line(s), {malformed} unreadable); "
            "pass a ptdbg_ascend *_dump.pkl"
        )
    ops = tuple(Op(name, tuple(leaves), None, stacks.get(name, ())) for name, leaves in by_op.items())
    stem = ref.index[: -len(".pkl")]
    has_data = any(files.exists(f"{stem}/{leaf.data_name}") for leaf in ops[0].leaves if leaf.data_name)
    return Dump(label, "ptdbg", "tensor" if has_data else "statistics", None, ops, (), malformed, files,
                stem if has_data else None)


def _ptdbg_leaf(item: list, slot: str, role: str) -> Leaf:
    name, _, _, dtype, shape, summary = item[:6]
    given = [v for v in (summary or [])][:4]
    stats = [(_number(v) if not isinstance(v, list) else _NAN) for v in given] + [_NAN] * (4 - len(given))
    has_stats = len(given) >= 2 and not any(isinstance(v, list) for v in given[:2])
    dtype = str(dtype)
    if dtype.startswith("<class"):
        value = summary[0] if summary else None
        kind = "scalar" if isinstance(value, (int, float)) and not isinstance(value, bool) else "other"
        return Leaf(slot, role, kind, dtype, (), tuple(stats), value=value)
    return Leaf(slot, role, "tensor", dtype, tuple(shape) if isinstance(shape, list) else None, tuple(stats),
                data_name=f"{name}.npy", has_stats=has_stats)


def _ptdbg_frame(frame: Any) -> str:
    if isinstance(frame, list) and len(frame) == 4:
        path, line, func, code = frame
        return f"File {path}, line {line}, in {func}, \n {code}"
    return str(frame)


def _torch_array(label: str, name: str, data: bytes) -> np.ndarray:
    import torch

    try:
        value = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises many types for a bad file
        raise InputError(f"{label}: cannot load {name} ({type(exc).__name__}); is the dump complete?") from None
    if not isinstance(value, torch.Tensor):
        raise InputError(f"{label}: {name} holds a {type(value).__name__}, not a tensor")
    value = value.detach()
    if value.dtype in (torch.bfloat16, torch.float16) or value.dtype.is_complex:
        value = value.to(torch.float32 if not value.dtype.is_complex else torch.complex64)
    return value.numpy()
