"""Throughput statistics of runs: what the guide's steps/sec median script printed, for several runs at once.

Per run, over its log lines past the warm-up (compilation, cache fills, the first data loads), the statistics of
:mod:`.rates` (the same numbers as the run's ``summary.json``): median, mean, 10th and 90th percentile of steps/sec,
and of samples/sec when metrics.jsonl records it. The warm-up is counted in optimizer steps: the run's own
(``start_step`` + ``warmup_steps`` from the ``summary.json`` beside its log) when it has one, else ``exclude_first``
steps from the log's first step. Speed-up is each run's median steps/sec over the first run's.

Where a format records no rate, the rates come from what it has: the lines' wall times (TensorBoard events, a
``time`` column; see :func:`.rates.rates_from_wall_times`), else a rate of the whole run only (a Hugging Face
Trainer's ``train_steps_per_second``, warm-up included: one number, so median = mean = p10 = p90). A run with
neither says what it lacks.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Optional

import numpy as np

from ...errors import InputError
from ...formats.run_dir import METRICS_JSONL, rank_of_dir
from .formats import BY_NAME
from .model import LossLog
from .ranks import rank_rates
from .rates import RateStats, WarmUp, rates_from_wall_times
from .read import read_log_file, summary_warmup


@dataclass(frozen=True)
class RunThroughput:
    """One run's throughput."""

    source: str
    lines: int
    excluded: int  # log lines left out as warm-up
    steps_per_sec: Optional[RateStats]
    samples_per_sec: Optional[RateStats]
    speedup: Optional[float]  # median steps/sec over the first run's
    notes: tuple
    warmup: Optional[WarmUp] = None
    warmup_from: str = "exclude_first"  # or "summary.json"
    rates_from: str = "log"  # "log" (recorded rates), "wall times", "whole run" or "none"
    lacks: Optional[str] = None  # what the log would need for steps/sec, when it has no timing at all


@dataclass(frozen=True)
class ThroughputReport:
    """Throughput of several runs, the first one being the reference of the speed-ups."""

    runs: tuple
    exclude_first: int  # warm-up steps of a run without a summary.json

    def as_dict(self) -> dict:
        """The report, JSON-ready."""

        def stats(s: Optional[RateStats]) -> Optional[dict]:
            if s is None:
                return None
            return {"median": s.median, "mean": s.mean, "p10": s.p10, "p90": s.p90, "lines": s.lines}

        return {
            "exclude_first": self.exclude_first,
            "runs": [
                {
                    "source": r.source, "lines": r.lines, "excluded": r.excluded,
                    "warmup": None if r.warmup is None else {
                        "start_step": r.warmup.start_step, "steps": r.warmup.steps, "from": r.warmup_from},
                    "steps_per_sec": stats(r.steps_per_sec), "samples_per_sec": stats(r.samples_per_sec),
                    "speedup": r.speedup, "rates_from": r.rates_from, "notes": list(r.notes),
                }
                for r in self.runs
            ],
        }


def steps_warmup(log: LossLog, steps: int) -> WarmUp:
    """``steps`` warm-up steps from the first step of ``log``."""
    first = log.first_steps
    return WarmUp(int(first[0]) if first.size else 0, steps)


def run_throughput(log: LossLog, warmup: WarmUp, source: str = "exclude_first") -> RunThroughput:
    """One run's throughput over its log lines past ``warmup`` (no speed-up: that needs the other runs).

    Parameters:
        log: the run's log.
        warmup: the steps left out (see :mod:`.rates`).
        source: where the warm-up comes from, ``"summary.json"`` or ``"exclude_first"`` (for the notes).
    """
    rates, rates_from = log.steps_per_sec, "log"
    if not np.isfinite(rates).any() and log.wall_times is not None and np.isfinite(log.wall_times).any():
        rates, rates_from = rates_from_wall_times(log.steps, log.wall_times)[0], "wall times"
    steady = warmup.steady(log.first_steps)
    steps = RateStats.of(rates[steady])
    samples = RateStats.of(log.samples_per_sec[steady])
    excluded = int(log.lines - steady.sum())
    notes = list(log.notes())
    lacks = None
    if source == "summary.json":
        notes.append(f"warm-up from summary.json: steps before {warmup.end} (start_step {warmup.start_step} + "
                     f"warmup_steps {warmup.steps}), {excluded} log line(s) left out")
    if rates_from == "wall times":
        notes.append(f"{log.source}: steps/sec from the wall times of consecutive records (the log records no "
                     "rate)")
    if steps is None and not np.isfinite(rates).any() and log.run_rate is not None:
        steps, samples = _whole(log.run_rate.steps_per_sec), _whole(log.run_rate.samples_per_sec)
        if steps is not None:
            rates_from, excluded = "whole run", 0
            notes.append(f"{log.source} records only the whole run's rate (train_steps_per_second over "
                         f"train_runtime {log.run_rate.seconds} s, warm-up included): one number, not a median")
    if steps is None and not np.isfinite(rates).any():
        rates_from, lacks = "none", _lacks(log)
        notes.append(lacks)
    elif steps is None:
        fix = "run longer or lower warmup_steps" if source == "summary.json" else "lower --exclude-first"
        notes.append(f"no steps/sec left after excluding {excluded} of {log.lines} line(s) (steps before "
                     f"{warmup.end}); {fix}")
    return RunThroughput(log.source, log.lines, excluded, steps, samples, None, tuple(notes), warmup, source,
                         rates_from, lacks)


def _whole(rate: Optional[float]) -> Optional[RateStats]:
    """A whole-run rate as statistics of one window."""
    if rate is None or not np.isfinite(rate) or rate < 0:
        return None
    return RateStats(rate, rate, rate, rate, 1, rate)


def _lacks(log: LossLog) -> str:
    """What ``log`` would need for steps/sec, in a sentence that says where to get it."""
    fmt = BY_NAME.get(log.kind)
    text = fmt.lacks_rate if fmt is not None else "{source} records no steps/sec"
    return text.format(source=log.source, loss=log.loss_key.name if log.loss_key else "loss")


DEFAULT_WARMUP_STEPS = 10  # the monitor's own default warmup_steps


def throughput(logs: list, exclude_first: Optional[int] = None) -> ThroughputReport:
    """Throughput statistics of each run in ``logs`` (:class:`~.read.LossLog` objects).

    Parameters:
        logs: the runs, the first being the reference of the speed-ups.
        exclude_first: warm-up steps left out at the start of each run; None (not given): the warm-up of the
            summary.json beside a run's log, else :data:`DEFAULT_WARMUP_STEPS`. A number given wins over summary.json.
    """
    if exclude_first is not None and exclude_first < 0:
        raise InputError(f"--exclude-first must be >= 0, got {exclude_first}")
    if not logs:
        raise InputError("give at least one run")
    fallback = DEFAULT_WARMUP_STEPS if exclude_first is None else exclude_first
    runs = [
        run_throughput(log, log.warmup, "summary.json") if log.warmup is not None and exclude_first is None
        else run_throughput(log, steps_warmup(log, fallback))
        for log in logs
    ]
    reference = runs[0].steps_per_sec.median if runs[0].steps_per_sec else None
    runs = [
        dataclasses.replace(r, speedup=r.steps_per_sec.median / reference) if r.steps_per_sec and reference else r
        for r in runs
    ]
    if all(r.steps_per_sec is None for r in runs):
        lacking = [r.lacks for r in runs if r.lacks]
        if len(lacking) == len(runs):
            raise InputError(lacking[0] if len(runs) == 1 else f"no run records steps/sec or wall times ({lacking[0]})")
        raise InputError(
            f"no run has steps/sec past its warm-up ({fallback} step(s) unless its summary.json says); "
            "lower --exclude-first or run longer"
        )
    return ThroughputReport(tuple(runs), fallback)


@dataclass(frozen=True)
class RankThroughput:
    """One rank of a multi-rank run: its median steps/sec and whether it lags the others."""

    rank: int
    steps_per_sec: Optional[RateStats]
    relative: Optional[float]  # its median over the median of the ranks' medians
    slow: bool


def rank_throughput(run_dir: str, exclude_first: Optional[int] = None) -> tuple:
    """Per-rank throughput of a multi-rank run folder (its ``rank{R}/metrics.jsonl``); empty for a one-rank run.

    The warm-up is ``exclude_first`` steps from each rank's first step when given, else the run's (its
    summary.json), else :data:`DEFAULT_WARMUP_STEPS`.

    A straggler shows as a rank whose median steps/sec is under ``SLOW_RANK`` of the ranks' median
    (:func:`.ranks.rank_rates`). Ranks kept in lockstep by collectives (DDP) run at the same rate: there
    :func:`.ranks.rank_waits` names the rank the others wait for.
    """
    if not os.path.isdir(run_dir):
        return ()
    found = sorted(
        (rank_of_dir(name), os.path.join(run_dir, name, METRICS_JSONL))
        for name in os.listdir(run_dir)
        if rank_of_dir(name) is not None and os.path.isfile(os.path.join(run_dir, name, METRICS_JSONL))
    )
    if len(found) < 2:
        return ()
    warmup = summary_warmup(run_dir)[0] if exclude_first is None else None
    steps = DEFAULT_WARMUP_STEPS if exclude_first is None else exclude_first
    stats = []
    for rank, path in found:
        log = read_log_file(path)
        steady = (warmup or steps_warmup(log, steps)).steady(log.first_steps)
        stats.append((rank, RateStats.of(log.steps_per_sec[steady])))
    rates = rank_rates({rank: None if s is None else s.median for rank, s in stats})
    return tuple(RankThroughput(rank, s, rates.relative(rank), rates.slow(rank)) for rank, s in stats)
