"""Across the ranks of one run: THE cross-rank statistics (summary.json's ``ranks``, ``perf``'s straggler table) and
the rank the others wait for, from what each rank's monitor measured on the host.

**Rates** (:func:`rank_rates`): min / median / max of the ranks' median steps/sec, the slowest rank, and each rank
relative to the median (under :data:`SLOW_RANK` = flagged). Ranks that collectives keep in lockstep (DDP, FSDP) run
at one rate, so there a slow rank slows all and none stands out: hence the second question.

**Waits** (:func:`rank_waits`): each rank's ``rank{R}/metrics.jsonl`` records, per log window, the host seconds spent
in the loader's ``next`` and in ``backward()`` (``host_s``, :mod:`ascend_tune.runtime.host_times`). Under lockstep every
rank's step takes as long as the slowest one's: the slow rank's extra work (in its data, its forward) shows as time the
others spend blocked in the collective, which on CPU / gloo is inside ``backward()``. So per rank, *busy* = step time
minus time in backward; the rank the others wait for waits least: its median time in backward is a low outlier
among the ranks' (Dixon's Q at 99.5%, :mod:`..stats`) or it waited least in more windows than equal ranks do
with a chance of 0.5%; it waited least in most log windows; and its busy time
exceeds the others' by more than :data:`BUSIER_BY` of the step (msprof-analyze: "max more than 5% above min suggests
a slow rank"). On CUDA / NPU the collective wait is on the device, outside backward's host time: a slow
rank still shows in its data time, but the trace of every rank (``analysis.traces.ranks``) is the sure answer.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from typing import Optional

import numpy as np

from ...formats.run_dir import METRICS_JSONL, rank_of_dir
from ..stats import CONFIDENCE, most_extreme, tally_chance
from .read import window_records

SLOW_RANK = 0.9  # a rank below 90% of the ranks' median steps/sec is flagged, as msprof-analyze's slow-rank check
BUSIER_BY = 0.05  # the slow rank's busy time exceeds the others' median by more than 5% of the step


@dataclass(frozen=True)
class RankRates:
    """The ranks' median steps/sec side by side."""

    ranks: tuple  # rank numbers, in the order given
    medians: tuple  # each rank's median steps/sec (None when unknown)
    min: Optional[float]
    median: Optional[float]
    max: Optional[float]
    slowest: Optional[int]

    def relative(self, rank: int) -> Optional[float]:
        """A rank's median over the ranks' median."""
        value = self.medians[self.ranks.index(rank)]
        return value / self.median if value is not None and self.median else None

    def slow(self, rank: int) -> bool:
        relative = self.relative(rank)
        return relative is not None and relative < SLOW_RANK


def rank_rates(medians: dict) -> RankRates:
    """Cross-rank statistics of ``{rank: median steps/sec or None}``."""
    ranks = tuple(medians)
    known = [(r, v) for r, v in medians.items() if v is not None]
    if not known:
        return RankRates(ranks, tuple(medians.values()), None, None, None, None)
    rates = np.array([v for _, v in known], dtype=float)
    slowest = known[int(rates.argmin())][0]
    return RankRates(ranks, tuple(medians.values()), float(rates.min()), float(np.median(rates)), float(rates.max()),
                     slowest)


def across_ranks(per_rank: list) -> dict:
    """summary.json's ``ranks``: each rank's figures (dicts with ``rank`` and ``median_steps_per_sec``), the min /
    median / max of the medians and the slowest rank."""
    rates = rank_rates({r["rank"]: r.get("median_steps_per_sec") for r in per_rank})
    out: dict = {"per_rank": per_rank, "steps_per_sec": None, "slowest_rank": rates.slowest}
    if rates.median is not None:
        out["steps_per_sec"] = {"min": rates.min, "median": rates.median, "max": rates.max}
    return out


@dataclass(frozen=True)
class RankWait:
    """One rank's host time per step (medians over its steady log windows), in seconds."""

    rank: int
    windows: int
    step: float
    data: float
    backward: float

    @property
    def busy(self) -> float:
        """Time not blocked in backward (data + own work)."""
        return self.step - self.backward


@dataclass(frozen=True)
class WaitVerdict:
    """Which rank the others wait for, with the evidence."""

    run: str
    ranks: tuple  # RankWait, by rank
    waited_for: Optional[int]
    windows: int  # log windows every rank recorded (past the warm-up)
    last: dict  # rank -> windows in which it waited least
    test: str  # Dixon's Q on the ranks' median backward time, in words
    excess: Optional[float]  # the candidate's busy time over the others' median, as a share of the step
    where: str  # where the candidate spends its extra time

    def as_dict(self) -> dict:
        """JSON-ready (perf --json's ``waits`` of one run)."""
        return {"waited_for": self.waited_for, "answer": self.answer(), "excess": self.excess,
                "windows": self.windows, "waited_least": {str(r): n for r, n in self.last.items()},
                "test": self.test, "ranks": [dict(asdict(r), busy=r.busy) for r in self.ranks]}

    def answer(self) -> str:
        """The one line a user acts on."""
        if len(self.ranks) < 2:
            return f"{self.run}: fewer than two ranks recorded host times (run it under this version's TrainingMonitor)"
        tally = ", ".join(f"rank {r}: {n}" for r, n in sorted(self.last.items())) or "none"
        if self.waited_for is None:
            return (f"no rank is waited for: none waits least in backward by a margin ({self.test}), in most of "
                    f"the {self.windows} window(s) and {BUSIER_BY:.0%} of a step busier than the others "
                    f"(windows in which each rank waited least: {tally})")
        c = next(r for r in self.ranks if r.rank == self.waited_for)
        return (f"the others wait for rank {self.waited_for}: it waits least in backward (the all-reduce; "
                f"{self.test}) and is busy "
                f"{self.excess:.0%} of a step longer than the others (median step {c.step * 1e3:.1f} ms, "
                f"{c.data * 1e3:.1f} ms in its data loading against the others' "
                f"{_others(self.ranks, c.rank, 'data') * 1e3:.1f} ms); look at its {self.where}")


def _others(ranks: tuple, rank: int, field: str) -> float:
    return float(np.median([getattr(r, field) for r in ranks if r.rank != rank]))


def read_host_times(path: str) -> dict:
    """The steady windows of one rank's metrics.jsonl: ``{last step: (steps, seconds, data, backward)}``."""
    rows: dict = {}
    for record in window_records(path):
        host = record.get("host_s")
        if not isinstance(host, dict) or record.get("warmup") or not record.get("seconds"):
            continue
        steps = record.get("window_steps") or 1
        rows[record.get("step")] = (steps, float(record["seconds"]), float(host.get("data") or 0),
                                    float(host.get("backward") or 0))
    return rows


def rank_waits(run_dir: str) -> WaitVerdict:
    """The rank the others wait for in a multi-rank run folder (see the module docstring)."""
    per_rank = {}
    for name in sorted(os.listdir(run_dir)) if os.path.isdir(run_dir) else ():
        rank = rank_of_dir(name)
        rows = read_host_times(os.path.join(run_dir, name, METRICS_JSONL)) if rank is not None else {}
        if rows:
            per_rank[rank] = rows
    ranks = sorted(per_rank)
    shared = sorted(set.intersection(*(set(per_rank[r]) for r in ranks)), key=str) if ranks else []
    if len(ranks) < 2 or not shared:
        return WaitVerdict(run_dir, (), None, 0, {}, "", None, "")
    # per window and rank: (step, data, backward) seconds per step
    table = np.array([[[v / per_rank[r][w][0] for v in per_rank[r][w][1:]] for r in ranks] for w in shared])
    waits = tuple(RankWait(r, len(shared), *(float(v) for v in np.median(table[:, i, :], axis=0)))
                  for i, r in enumerate(ranks))
    last: dict = {}
    for window in table:  # which rank waited least in each window
        rank = ranks[int(np.argmin(window[:, 2]))]
        last[rank] = last.get(rank, 0) + 1
    low = most_extreme([w.backward for w in waits], high=False)
    candidate = waits[low.index].rank if low is not None else min(waits, key=lambda w: w.backward).rank
    c = next(w for w in waits if w.rank == candidate)
    step = float(np.median([w.step for w in waits]))
    excess = (c.busy - _others(waits, candidate, "busy")) / step if step > 0 else 0.0
    test = low.text() if low is not None else "two ranks: no test, the spread alone"
    chance = tally_chance(last.get(candidate, 0), len(shared), len(ranks))
    test += f"; waiting least in {last.get(candidate, 0)} of {len(shared)} window(s) by chance: p = {chance:.2g}"
    sure = (low is not None and low.significant) or chance < 1 - CONFIDENCE
    named = sure and last.get(candidate, 0) * 2 > len(shared) and excess > BUSIER_BY
    where = "data loading" if c.data - _others(waits, candidate, "data") > excess * step / 2 \
        else "step's own work (forward, optimizer, host code)"
    return WaitVerdict(run_dir, waits, candidate if named else None, len(shared), last, test, excess, where)
