"""The overflow rule: which ops of a dump overflow, and which one is where the inf/NaN started.

An op (an API or module call, forward or backward; not a ``parameters_grad`` entry) **overflows** when the Max or
Min of one of its outputs is inf or NaN (a forward's results; a backward's outputs are the gradients it produced).
It **produced** the overflow when every tensor it received is finite: its arguments and parameters; for a backward,
the gradient it received and the tensors of its forward call (which the gradient is computed from: the backward of
an ``exp`` whose output is inf received the inf). Otherwise it **received** inf/NaN and passed it on. An op whose
inputs hold inf/NaN but whose outputs are finite (a mask, ``nan_to_num``) does not overflow.

Overflows are ranked so that the first one answers "where did it start":

1. ops that produced it, in execution order; a module that produced it through an op recorded inside it (its
   construct.json descendant, which produced it too) comes after them, the inner op being the precise answer;
2. then the ops that received it, in execution order. When no op produced it, the first of these is the answer:
   the value came from something the dump does not record (the data, an unrecorded op, a parameter the optimizer
   broke in an earlier step).

``first_only=True`` keeps only that first op of each dump. The monitor's ``overflow.json`` and warning, ``ascend-tune
overflow`` and ``ascend-tune report`` all apply this one rule, so they name the same op. Statistics are needed: a
step rebuilt from a journal, or an md5-only dump, reports nothing. msprobe 26 dropped its online overflow check;
the same scan runs on any statistics dump, built-in or msprobe's, during training or afterwards.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Optional

from ...errors import InputError
from ...formats.dump_layout import format_frame
from ...formats.run_dir import OVERFLOW_JSON, rank_of_dir
from .model import Dump, Op, forward_name, is_call, parse_frame
from .read import read_index
from .sources import DumpFiles, find_dumps, open_location, select_dump


@dataclass(frozen=True)
class Overflow:
    """One overflowing op: where (step, rank, name, its first inf/NaN output), whether it produced the value, and
    the user's call stack (frame strings; :attr:`stack` parses them)."""

    step: Optional[int]
    rank: Optional[int]
    name: str
    tensor: str  # the first output slot holding inf/NaN
    max: float
    min: float
    produced_here: bool
    inputs: tuple = ()  # input slots holding inf/NaN
    outputs: tuple = ()  # output slots holding inf/NaN
    parent: Optional[str] = None
    stack_text: tuple = ()

    @property
    def stack(self) -> tuple:
        """The user's frames as :class:`~.model.Frame` objects, innermost first."""
        return tuple(parse_frame(f) for f in self.stack_text)

    def as_dict(self) -> dict:
        """A JSON-ready dict (overflow.json's entries)."""
        return {
            "step": self.step, "rank": self.rank, "name": self.name, "tensor": self.tensor, "max": self.max,
            "min": self.min, "produced_here": self.produced_here, "inputs": list(self.inputs),
            "outputs": list(self.outputs), "parent": self.parent, "stack": [f.as_dict() for f in self.stack],
        }

    @classmethod
    def from_dict(cls, entry: dict) -> Overflow:
        """An entry of overflow.json read back (entries written before ``produced_here`` existed count as
        produced)."""
        frames = tuple(format_frame(f.get("file", ""), f.get("line", 0), f.get("function", ""), f.get("code", ""))
                       for f in entry.get("stack") or () if isinstance(f, dict))
        return cls(
            entry.get("step"), entry.get("rank"), str(entry.get("name")), str(entry.get("tensor", "")),
            entry.get("max"), entry.get("min"), bool(entry.get("produced_here", True)),
            tuple(entry.get("inputs") or ()), tuple(entry.get("outputs") or (entry.get("tensor", ""),)),
            entry.get("parent"), frames,
        )


@dataclass(frozen=True)
class OverflowReport:
    """The overflow check of one dump (or one overflow.json)."""

    dump: str
    ops: Optional[int]  # ops checked; None when read from overflow.json
    overflowing_ops: int
    overflows: tuple  # ranked, see the module docstring
    steps_checked: Optional[tuple] = None  # from overflow.json

    @property
    def first(self) -> Optional[Overflow]:
        """Where the inf/NaN started, or None when nothing overflowed."""
        return self.overflows[0] if self.overflows else None

    @property
    def checked(self) -> str:
        """What was checked, in words."""
        if self.ops is not None:
            return f"{self.ops} op(s) checked"
        steps = ", ".join(str(s) for s in self.steps_checked or ()) or "none"
        return f"step(s) {steps} checked during training"


def overflows_of(dump: Dump, first_only: bool = False) -> tuple:
    """The overflowing ops of one dump, ranked (see the module docstring); only the first with ``first_only``."""
    hits = []
    for index, op in enumerate(dump.ops):
        if not is_call(op.name):
            continue
        bad_out = tuple(leaf for leaf in op.outputs if leaf.overflow)
        if bad_out:
            hits.append((index, op, _bad_inputs(dump, op), bad_out))
    producers = [op.name for _, op, bad_in, _ in hits if not bad_in]
    around_producers = {parent for name in producers for parent in dump.parents_of(name)}

    def rank(hit: tuple) -> tuple:
        index, op, bad_in, _ = hit
        if bad_in:
            return 2, index
        return (1 if op.name in around_producers else 0), index

    hits.sort(key=rank)
    found = tuple(_overflow(dump, op, bad_in, bad_out) for _, op, bad_in, bad_out in hits)
    return found[:1] if first_only else found


def find_overflow(dump: Dump, first_only: bool = False) -> OverflowReport:
    """Check every op of ``dump`` for inf/NaN (see the module docstring)."""
    calls = sum(1 for op in dump.ops if is_call(op.name))
    found = overflows_of(dump)
    return OverflowReport(dump.label, calls, len(found), found[:1] if first_only else found)


def find_overflows(path: str, first_only: bool = False) -> list:
    """The overflowing ops of every dump under ``path``, by step and rank, each dump's ranked.

    Parameters:
        path: a dump root (``dump_path``), one ``step<N>`` folder, one rank folder, a dump.json or an archive;
            built-in, msprobe or ptdbg.
        first_only: only the first overflow of each dump (where it started).
    """
    path = os.fspath(path)
    if os.path.isdir(path):  # a folder without dumps has no overflows
        files, refs = DumpFiles(path, root=path), find_dumps(path)
    else:
        files, refs = open_location(path)
    try:
        found: list = []
        for ref in refs:
            found.extend(overflows_of(read_index(files, ref), first_only))
        return found
    finally:
        files.close()


def overflow_report(path: str, step: Optional[int] = None, rank: Optional[int] = None) -> OverflowReport:
    """The overflow check ``ascend-tune overflow`` prints: of the dump ``path`` selects, or of the overflow.json the
    monitor wrote during an ``overflow_check`` run (given itself, its ``rank<R>`` folder, or a dump folder that kept
    no step)."""
    path = os.fspath(path)
    recorded = _recorded(path, rank)
    if recorded is not None:
        return read_overflow_json(recorded)
    files, refs = open_location(path)
    try:
        return find_overflow(read_index(files, select_dump(refs, path, step, rank)))
    finally:
        files.close()


def read_overflow_json(path: str) -> OverflowReport:
    """An overflow.json written by the monitor, as the report it recorded."""
    try:
        with open(path, encoding="utf-8") as fh:
            payload = json.load(fh)
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot read {path} ({exc}); was the run interrupted while writing it?") from None
    entries = payload.get("overflows") if isinstance(payload, dict) else None
    if not isinstance(entries, list):
        raise InputError(f"{path} is not an overflow.json (no 'overflows' list); pass the monitor's overflow.json")
    found = tuple(Overflow.from_dict(e) for e in entries if isinstance(e, dict))
    steps = payload.get("steps_checked")
    return OverflowReport(path, None, len(found), found, tuple(steps) if isinstance(steps, list) else ())


def _recorded(path: str, rank: Optional[int]) -> Optional[str]:
    """The overflow.json ``path`` stands for, or None when ``path`` is (or holds) a dump to check."""
    if os.path.isfile(path):
        return path if os.path.basename(path) == OVERFLOW_JSON else None
    if not os.path.isdir(path):
        return None
    if os.path.isfile(os.path.join(path, OVERFLOW_JSON)):
        return os.path.join(path, OVERFLOW_JSON)
    if find_dumps(path):
        return None
    ranks = {rank_of_dir(name): os.path.join(path, name, OVERFLOW_JSON) for name in sorted(os.listdir(path))
             if rank_of_dir(name) is not None and os.path.isfile(os.path.join(path, name, OVERFLOW_JSON))}
    if rank is not None and rank in ranks:
        return ranks[rank]
    if len(ranks) == 1 and rank is None:
        return next(iter(ranks.values()))
    if ranks:
        raise InputError(f"{path} holds the overflow.json of ranks {sorted(ranks)}; pick one with --rank")
    return None


def _bad_inputs(dump: Dump, op: Op) -> tuple:
    """The slots of what ``op`` received that hold inf/NaN; a backward's forward call counts (``forward.<slot>``)."""
    bad = [leaf.slot for leaf in op.inputs if leaf.overflow]
    forward = dump.by_name.get(forward_name(op.name))
    if forward is not None and forward is not op:
        bad += [f"forward.{leaf.slot}" for leaf in forward.leaves if leaf.overflow]
    return tuple(bad)


def _overflow(dump: Dump, op: Op, bad_in: tuple, bad_out: tuple) -> Overflow:
    first = bad_out[0]
    source = op if op.stack else dump.by_name.get(forward_name(op.name), op)  # msprobe keeps forward stacks only
    frames = source.user_frames() or source.stack
    return Overflow(dump.step, dump.rank, op.name, first.slot, first.stats.max, first.stats.min, not bad_in,
                    bad_in, tuple(leaf.slot for leaf in bad_out), op.parent, tuple(frames))

