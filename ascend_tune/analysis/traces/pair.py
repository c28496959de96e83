"""``compare_traces(base, target)``: pick one trace on each side, compare them, name the top contributor and the
next action.

Either side may be a trace file (``.pt.trace.json[.gz]``, torch_npu's ``trace_view.json``), a torch_npu
``*_ascend_pt`` folder, a profile folder or a TrainingMonitor run folder (its ``profile/``); a folder with traces
of several ranks needs ``rank``, several traces of one rank give the newest. The next action comes from the
advisor's rule for the top contributor's kind (fused optimizer, host syncs, DataLoader, dispatch-bound small ops,
dynamic shapes) run on the target's trace; where none applies, how to look closer at that module or op.
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Optional, Union

from ...errors import InputError
from ..advisor.rules import RULE_OF_KIND, first_fix
from .compare import NOISE_FLOOR, TraceComparison, compare_sides, side_of
from .find import TRACE_PATTERNS, find_traces, trace_rank
from .model import Trace
from .read import cyclic_gc_paused, read_trace

PathLike = Union[str, os.PathLike]


def compare_traces(base: PathLike, target: PathLike, step: Optional[int] = None,
                   rank: Optional[int] = None, noise_floor: float = NOISE_FLOOR) -> TraceComparison:
    """Compare the target's trace with the base's; bad input raises ``InputError``.

    Parameters:
        base, target: a trace file, a ``*_ascend_pt`` folder, a profile folder or a run folder.
        step: compare this ``ProfilerStep#N`` on both sides instead of each side's median step.
        rank: the rank to take from a folder holding several ranks' traces.
        noise_floor: the least share of the base step counted as noise (how far two runs of identical code
            differ on the machine; default 5%).
    """
    notes: list = []
    paths = [pick_trace(path, rank, notes) for path in (base, target)]
    with cyclic_gc_paused():
        base_side = side_of(read_trace(paths[0]), step)  # one trace in memory at a time: the base's goes here
        target_trace = read_trace(paths[1])
        sides = [base_side, side_of(target_trace, step)]
    for side in sides:
        if side.scopes == "none":
            notes.append(f"{side.path}: no module scopes, so no module rows; profile under TrainingMonitor"
                         "(model, ..., profile=...) (it records them), or torch.profiler with_stack=True, "
                         "with_modules=True")
    comparison = compare_sides(*sides, notes=tuple(notes), noise_floor=noise_floor)
    top = choose_top(comparison)
    return replace(comparison, top=top, next_action=next_action(comparison, top, target_trace))


def pick_trace(path: PathLike, rank: Optional[int], notes: list) -> str:
    """The one trace file ``path`` names (see the module's docstring); bad input raises ``InputError``."""
    path = os.fspath(path)
    found = list(find_traces(path))
    if not found:
        raise InputError(f"{path}: no {', '.join(TRACE_PATTERNS)} here; point at a trace file, a torch_npu "
                         "*_ascend_pt folder or a run folder with a profile/ folder")
    if rank is not None:
        found = [p for p in found if trace_rank(p) == rank]
        if not found:
            raise InputError(f"{path}: no trace of rank {rank}; run `ascend-tune trace {path}` to see the ranks")
    ranks = {trace_rank(p) for p in found}
    if len(ranks) > 1:
        listed = ", ".join(str(r) for r in sorted(ranks, key=lambda r: -1 if r is None else r))
        raise InputError(f"{path}: traces of several ranks ({listed}); choose one with --rank")
    if len(found) > 1:
        found.sort(key=os.path.getmtime)
        notes.append(f"{path}: {len(found)} traces, the newest compared: {found[-1]}")
    return found[-1]


def choose_top(comparison: TraceComparison):
    """The one row to act on: a context kind (optimizer, data, host sync) when that is what grew most, else the
    module that grew most, else the op, else the kind; only rows beyond noise."""
    if not comparison.slower:
        return None
    tops = {level: comparison.top_of(level) for level in ("kind", "module", "op")}
    tops = {level: row for level, row in tops.items() if row is not None and row.beyond_noise}
    kind = tops.get("kind")
    if kind is not None and kind.name in RULE_OF_KIND:
        return kind
    module = tops.get("module")
    if module is not None and not module.name.startswith("("):
        return module
    return tops.get("op") or kind or module


def next_action(comparison: TraceComparison, top, target: Trace) -> str:
    """What to do about ``top``: the fix of the advisor rule that applies on the target's trace, else how to look
    closer."""
    if top is None:
        if comparison.slower:
            return "the gap is spread thin: compare the kind rows, and profile more steps to lower the noise"
        return "nothing to do for speed; compare more steps (--step N) if a single step matters"
    found = first_fix(target, top.name if top.level == "kind" else None)
    if found is not None:
        return f"{found.title} ({found.rule}): {found.fix.splitlines()[0]}"
    where = {"module": f"module {top.name}", "op": f"op {top.name}", "kind": f"the {top.name} kind"}[top.level]
    return (f"profile {where} on the target with torch.profiler(record_shapes=True, with_stack=True) and compare "
            "its ops' shapes and counts with the base's (`ascend-tune compare-trace --step N`)")
