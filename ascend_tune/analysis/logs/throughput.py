"""Throughput statistics of runs: what the seed's steps/sec median script printed, for several runs at once.

Per run, over its log lines after the first ``exclude_first`` (warm-up: compilation, cache fills, the first data
loads): median, mean, 10th and 90th percentile of steps/sec, and of samples/sec when metrics.jsonl records it.
Speed-up is each run's median steps/sec over the first run's.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional

import numpy as np

from ...errors import InputError
from ...formats.run_dir import METRICS_JSONL
from .read import read_log_file


@dataclass(frozen=True)
class RateStats:
    """Summary of one rate over a run's steady log lines."""

    median: float
    mean: float
    p10: float
    p90: float
    lines: int

    @classmethod
    def of(cls, values: np.ndarray) -> Optional[RateStats]:
        finite = values[np.isfinite(values) & (values > 0)]
        if not finite.size:
            return None
        p10, median, p90 = np.percentile(finite, [10, 50, 90])
        return cls(float(median), float(finite.mean()), float(p10), float(p90), int(finite.size))


@dataclass(frozen=True)
class RunThroughput:
    """One run's throughput."""

    source: str
    lines: int
    excluded: int
    steps_per_sec: Optional[RateStats]
    samples_per_sec: Optional[RateStats]
    speedup: Optional[float]  # median steps/sec over the first run's
    notes: tuple


@dataclass(frozen=True)
class ThroughputReport:
    """Throughput of several runs, the first one being the reference of the speed-ups."""

    runs: tuple
    exclude_first: int

    def as_dict(self) -> dict:
        def stats(s: Optional[RateStats]) -> Optional[dict]:
            return None if s is None else dict(s.__dict__)

        return {
            "exclude_first": self.exclude_first,
            "runs": [
                {
                    "source": r.source, "lines": r.lines, "excluded": r.excluded,
                    "steps_per_sec": stats(r.steps_per_sec), "samples_per_sec": stats(r.samples_per_sec),
                    "speedup": r.speedup, "notes": list(r.notes),
                }
                for r in self.runs
            ],
        }


def throughput(logs: list, exclude_first: int = 10) -> ThroughputReport:
    """Throughput statistics of each run in ``logs`` (:class:`~.logs.LossLog` objects).

    Parameters:
        logs: the runs, the first being the reference of the speed-ups.
        exclude_first: log lines left out at the start of each run (warm-up).
    """
    if exclude_first < 0:
        raise InputError(f"--exclude-first must be >= 0, got {exclude_first}")
    if not logs:
        raise InputError("give at least one run")
    runs = []
    reference: Optional[float] = None
    for i, log in enumerate(logs):
        skip = min(exclude_first, log.lines)
        steps = RateStats.of(log.steps_per_sec[skip:])
        samples = RateStats.of(log.samples_per_sec[skip:])
        notes = list(log.notes())
        if steps is None:
            notes.append(
                f"no steps/sec left after excluding the first {skip} of {log.lines} line(s); lower --exclude-first"
            )
        if i == 0:
            reference = steps.median if steps else None
        speedup = steps.median / reference if steps and reference else None
        runs.append(RunThroughput(log.source, log.lines, skip, steps, samples, speedup, tuple(notes)))
    if all(r.steps_per_sec is None for r in runs):
        raise InputError(
            f"no run has steps/sec past its first {exclude_first} line(s); lower --exclude-first or run longer"
        )
    return ThroughputReport(tuple(runs), exclude_first)


SLOW_RANK = 0.9  # a rank below 90% of the ranks' median steps/sec is flagged, as msprof-analyze's slow-rank check


@dataclass(frozen=True)
class RankThroughput:
    """One rank of a multi-rank run: its median steps/sec and whether it lags the others."""

    rank: int
    steps_per_sec: Optional[RateStats]
    relative: Optional[float]  # its median over the median of the ranks' medians
    slow: bool


def rank_throughput(run_dir: str, exclude_first: int = 10) -> tuple:
    """Per-rank throughput of a multi-rank run folder (its ``rank{R}/metrics.jsonl``); empty for a one-rank run.

    A straggler shows as a rank whose median steps/sec is under ``SLOW_RANK`` of the ranks' median. Ranks kept in
    lockstep by collectives (DDP) run at the same rate: there a slow rank slows all and none stands out.
    """
    if not os.path.isdir(run_dir):
        return ()
    found = sorted(
        (int(name[4:]), os.path.join(run_dir, name, METRICS_JSONL))
        for name in os.listdir(run_dir)
        if name.startswith("rank") and name[4:].isdigit() and os.path.isfile(os.path.join(run_dir, name, METRICS_JSONL))
    )
    if len(found) < 2:
        return ()
    stats = []
    for rank, path in found:
        log = read_log_file(path)
        stats.append((rank, RateStats.of(log.steps_per_sec[min(exclude_first, log.lines):])))
    medians = [s.median for _, s in stats if s is not None]
    middle = float(np.median(medians)) if medians else None
    out = []
    for rank, s in stats:
        relative = s.median / middle if s is not None and middle else None
        out.append(RankThroughput(rank, s, relative, relative is not None and relative < SLOW_RANK))
    return tuple(out)
