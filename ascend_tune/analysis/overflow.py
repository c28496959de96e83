"""Offline overflow check of a finished dump: the first op, in execution order, that sees inf or NaN.

An op overflows when the max or min of one of its tensors is inf or NaN (msprobe's inf/nan rule). When the first
such op already *receives* inf/NaN, the value was produced before it by code the dump does not record; when only
its outputs hold them, the op produced them itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from .dumps import Dump, Op


@dataclass(frozen=True)
class Overflow:
    """The first overflowing op."""

    op: str
    inputs: tuple  # slots of its inputs holding inf/NaN
    outputs: tuple  # slots of its outputs holding inf/NaN
    parent: Optional[str]
    stack: tuple  # user frames

    @property
    def produced_here(self) -> bool:
        return not self.inputs


@dataclass(frozen=True)
class OverflowReport:
    """The result of checking one dump."""

    dump: str
    ops: int
    overflowing_ops: int
    first: Optional[Overflow]


def find_overflow(dump: Dump) -> OverflowReport:
    """Check every op of ``dump`` for inf/NaN and name the first one."""
    first: Optional[Overflow] = None
    count = 0
    for op in dump.ops:
        bad_in, bad_out = _bad(op, "input"), _bad(op, "output")
        if not bad_in and not bad_out:
            continue
        count += 1
        if first is None:
            first = Overflow(op.name, bad_in, bad_out, op.parent, op.user_frames())
    return OverflowReport(dump.label, len(dump.ops), count, first)


def _bad(op: Op, role: str) -> tuple:
    return tuple(leaf.slot for leaf in op.leaves if leaf.role == role and leaf.overflow)
