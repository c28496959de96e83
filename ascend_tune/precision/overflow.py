"""Overflow check: the first ops whose outputs hold inf or nan, in execution order.

An op overflows when the Max or Min of one of its outputs is inf or nan (a tensor with a nan has a nan max):
forward entries are judged on their ``output``, backward entries on the gradients they produced (their
``output``). Inputs are not judged, so the first report is the op that produced the first non-finite value, not the
ops that merely received it. msprobe 26 dropped its online ``overflow_check`` task; the same scan runs here on any
statistics dump, built-in or msprobe's, during training or afterwards (:func:`find_overflows`).

Pure Python (no torch): the ``ascend-tune overflow`` command can call :func:`find_overflows` cheaply.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Optional

from .reader import find_dumps, read_dump

_STAT_KEYS = ("Max", "Min")


@dataclass(frozen=True)
class Overflow:
    """One overflowing op: where (step, rank, entry name, which output) and the user's call stack."""

    step: Optional[int]
    rank: Optional[int]
    name: str
    tensor: str
    max: Any
    min: Any
    stack: tuple

    def as_dict(self) -> dict:
        """A JSON-ready dict (overflow.json's entries)."""
        out = asdict(self)
        out["stack"] = [asdict(frame) for frame in self.stack]
        return out


def find_overflows(dump_dir: str) -> list:
    """The overflowing ops of a finished dump, by step, rank and execution order.

    Parameters:
        dump_dir: a dump root (``dump_path``), one ``step<N>`` folder, or one rank folder; built-in or msprobe.
    Steps rebuilt from a journal carry no statistics and report nothing.
    """
    found = []
    for location in find_dumps(dump_dir):
        dump = read_dump(location.path)
        found.extend(scan_entries(dump.data, dump.stack_of, dump.step, dump.rank))
    return found


def scan_entries(data: dict, stack_of: Any, step: Optional[int], rank: Optional[int], limit: int = -1) -> list:
    """The overflowing ops of one step's entries (``stack_of(name)`` gives an entry's frames); at most ``limit``."""
    found: list = []
    for name, entry in data.items():
        if limit != -1 and len(found) >= limit:
            break
        if not _is_op(name) or not isinstance(entry, dict):
            continue
        hit = _first_nonfinite(entry.get("output"), "output")
        if hit is not None:
            where, record = hit
            found.append(
                Overflow(step, rank, name, where, record.get("Max"), record.get("Min"), tuple(stack_of(name)))
            )
    return found


def _is_op(name: str) -> bool:
    """API and module calls (``X.0.forward``, ``Module.m.C.backward.0``), not ``parameters_grad`` entries."""
    if name.endswith((".forward", ".backward")):
        return True
    return name.startswith("Module.") and (".forward." in name or ".backward." in name)


def _first_nonfinite(value: Any, where: str, depth: int = 0) -> Optional[tuple]:
    if depth > 32:
        return None
    if isinstance(value, dict):
        if "dtype" in value and "shape" in value:
            if any(_nonfinite(value.get(key)) for key in _STAT_KEYS):
                return where, value
            return None
        items = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    else:
        return None
    for key, item in items:
        hit = _first_nonfinite(item, f"{where}.{key}", depth + 1)
        if hit is not None:
            return hit
    return None


def _nonfinite(value: Any) -> bool:
    if isinstance(value, float):
        return not math.isfinite(value)
    return isinstance(value, str) and value.lower() in ("nan", "inf", "-inf", "infinity", "-infinity")
