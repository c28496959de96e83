"""The report's "Ranks" section of a multi-rank run: one row per rank, and the cross-rank answers.

Per rank: its median steps/sec, its host time per step (data, backward, busy; :mod:`..logs.ranks`), the collectives
at which its traces show it arrived last (:mod:`..traces.ranks`) and its first inf/NaN (:mod:`..dumps.ranks`), the
dumps read by worker processes. Then the one line a user acts on: the rank the run first went wrong on, else the
rank the others wait for, else that the ranks agree. ``ascend-tune report`` and the pytest plugin show it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Optional

from ...errors import InputError
from ...formats.run_dir import DUMP_DIR, rank_of_dir
from ..logs.ranks import WaitVerdict, rank_waits
from ..logs.throughput import rank_throughput

HEADER = ("rank", "steps/sec", "step ms", "data ms", "backward ms", "busy ms", "arrived last", "first inf/NaN")


@dataclass(frozen=True)
class RanksReport:
    """Every rank of one run side by side."""

    run: str
    rows: tuple  # one tuple of cells (HEADER) per rank
    waits: Optional[WaitVerdict]
    traces: Any  # analysis.traces.ranks.SlowRank or None
    overflows: Any  # analysis.dumps.ranks.RunFindings or None

    def answers(self) -> list:
        """The cross-rank answers, one line each."""
        lines = []
        first = self.overflows.first if self.overflows is not None else None
        if first is not None:
            lines.append(f"first inf/NaN of the run: rank {first.rank}, step {first.step}, {first.op} ({first.kind}; "
                         "the other ranks' inf/NaN follows from it through the collectives)")
        if self.waits is not None and self.waits.ranks:
            lines.append(self.waits.answer())
        if self.traces is not None:
            lines.append(self.traces.answer())
        return lines

    def next_step(self) -> str:
        """What to do next."""
        first = self.overflows.first if self.overflows is not None else None
        if first is not None:
            return (f"look at rank {first.rank}'s {first.op} at step {first.step} (ascend-tune overflow "
                    f"{os.path.join(self.run, DUMP_DIR)} --rank {first.rank} --step {first.step})")
        slow = self.waits.waited_for if self.waits is not None else None
        slow = slow if slow is not None else (self.traces.slow if self.traces is not None else None)
        if slow is not None:
            return f"the others wait for rank {slow}: fix its {self.waits.where if self.waits else 'work'} first"
        return "the ranks keep pace with each other: nothing to fix across ranks"


def ranks_report(run: str, jobs: Optional[int] = None) -> Optional[RanksReport]:
    """The ranks of a run folder side by side; None for a one-rank run."""
    rates = rank_throughput(run)
    dumps = os.path.join(run, DUMP_DIR)
    ranks = {r.rank for r in rates} | set(_dump_ranks(dumps))
    if len(ranks) < 2:
        return None
    from ..dumps.ranks import overflow_runs
    from ..traces.ranks import slow_rank

    waits = rank_waits(run)
    traces = slow_rank(run, jobs)
    overflows = None
    if os.path.isdir(dumps):
        try:
            overflows = overflow_runs(dumps, jobs)
        except InputError:
            overflows = None
    rows = []
    for rank in sorted(ranks):
        rate = next((r for r in rates if r.rank == rank), None)
        wait = next((w for w in (waits.ranks if waits else ()) if w.rank == rank), None)
        found = [f for f in (overflows.ranks if overflows else ()) if f.rank == rank and f.found]
        first = min(found, key=lambda f: f.order()) if found else None
        rows.append((
            str(rank),
            "-" if rate is None or rate.steps_per_sec is None else f"{rate.steps_per_sec.median:.2f}",
            *(("-",) * 4 if wait is None else
              tuple(f"{v * 1e3:.1f}" for v in (wait.step, wait.data, wait.backward, wait.busy))),
            "-" if traces is None else str(traces.last.get(rank, 0)),
            "-" if first is None else f"step {first.step} {first.op}",
        ))
    return RanksReport(run, tuple(rows), waits, traces, overflows)


def _dump_ranks(dumps: str) -> list:
    if not os.path.isdir(dumps):
        return []
    return [rank for step in os.listdir(dumps) if os.path.isdir(os.path.join(dumps, step))
            for rank in (rank_of_dir(n) for n in os.listdir(os.path.join(dumps, step))) if rank is not None]
