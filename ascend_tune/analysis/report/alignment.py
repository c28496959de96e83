"""The alignment of a target run with its reference: the three facts a port is judged on, gathered once.

1. **Loss**: the mean relative gap of the two loss curves against the 5% threshold (:mod:`..logs.compare`).
2. **First divergence**: the precision dumps of one step both runs dumped (the first such step, the lowest rank),
   compared op by op (:mod:`..dumps.compare`); its first diverging op, with the user's frames.
3. **Speed**: the target's median steps/sec over the reference's, each over its own steps past warm-up (the rule
   of :mod:`..logs.rates`, the one summary.json and ``ascend-tune perf`` use), with the 95% interval their
   windows' scatter leaves (:func:`..logs.rates.speed_ratio`).

:func:`verdict_lines` says the three in three lines (the demo prints them; the page opens with them).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Optional

from ...errors import InputError
from ...formats.run_dir import DUMP_DIR
from ..logs.compare import LossComparison
from ..logs.model import LossLog
from ..logs.rates import SpeedRatio, speed_ratio
from ..logs.throughput import RunThroughput, run_throughput, steps_warmup


@dataclass(frozen=True)
class DumpPair:
    """The two dumps of one step compared, or why no pair could be compared (``comparison`` None, ``note``)."""

    step: Optional[int]
    rank: Optional[int]
    base_path: Optional[str]
    target_path: Optional[str]
    comparison: Any  # analysis.dumps.compare.DumpComparison, or None
    note: str = ""


@dataclass(frozen=True)
class Alignment:
    """The reference's side of an alignment page: its log, throughput, and what was compared with the target."""

    baseline: str
    log: LossLog
    throughput: RunThroughput
    speed: Optional[SpeedRatio]  # target median steps/sec / reference median steps/sec, with its interval
    dumps: Optional[DumpPair]  # None when neither run has a dump folder

    @property
    def speed_ratio(self) -> Optional[float]:
        return self.speed.ratio if self.speed is not None else None


def align(run: str, baseline: str, baseline_log: LossLog, target_throughput: RunThroughput) -> Alignment:
    """The reference side of ``run``'s page: ``baseline`` (a run folder or a log file in one) and its log.

    Parameters:
        run: the target's run folder.
        baseline: the reference run (folder, or a log file in its folder).
        baseline_log: the reference's log, already read.
        target_throughput: the target's throughput statistics (for the speed ratio).
    """
    rates = run_throughput_of(baseline_log)
    ratio = None
    if rates.steps_per_sec and target_throughput.steps_per_sec:
        ratio = speed_ratio(rates.steps_per_sec, target_throughput.steps_per_sec)
    base_dir = baseline if os.path.isdir(baseline) else os.path.dirname(os.path.abspath(baseline))
    return Alignment(baseline, baseline_log, rates, ratio, compare_step_dumps(base_dir, run))


def run_throughput_of(log: LossLog) -> RunThroughput:
    """A run's throughput over its steps past warm-up (its summary.json's), or over every line of a short run."""
    rates = run_throughput(log, log.warmup, "summary.json") if log.warmup is not None else None
    if rates is None or rates.excluded >= log.lines:
        rates = run_throughput(log, steps_warmup(log, 0))
    return rates


def compare_step_dumps(base_run: str, target_run: str) -> Optional[DumpPair]:
    """Compare the dumps of the first step (lowest rank) both run folders dumped; None when neither dumped."""
    from ..dumps.compare import compare_dumps
    from ..dumps.read import read_dump
    from ..dumps.sources import find_dumps

    found = []
    for run in (base_run, target_run):
        folder = os.path.join(run, DUMP_DIR)
        found.append({(r.step, r.rank): r for r in find_dumps(folder)} if os.path.isdir(folder) else {})
    base, target = found
    if not base and not target:
        return None
    common = sorted(set(base) & set(target), key=lambda k: (k[0] is None, k[0] or 0, k[1] is None, k[1] or 0))
    if not common:
        lacking = "the reference" if not base else "this run" if not target else "the two runs"
        note = (f"no step dumped in both runs ({lacking} has no dump of a step the other has); dump the same "
                "step in both, e.g. precision=dict(task='statistics', steps=[0])")
        return DumpPair(None, None, None, None, None, note)
    step, rank = common[0]
    b, t = base[(step, rank)], target[(step, rank)]
    try:
        result = compare_dumps(read_dump(b.path), read_dump(t.path))
    except InputError as exc:
        return DumpPair(step, rank, b.path, t.path, None, f"the dumps of step {step} could not be compared: {exc}")
    return DumpPair(step, rank, b.path, t.path, result)


def frame_text(frame: str) -> str:
    """A stack.json frame as ``file.py:12 (the code)``."""
    from ..dumps.model import parse_frame

    parsed = parse_frame(frame)
    if not parsed.file:
        return parsed.code
    return f"{os.path.basename(parsed.file)}:{parsed.line} ({parsed.code})"


def noise_clause(comparison: LossComparison) -> str:
    """``; beyond / within the runs' own noise (...)``: the noise rule beside the 5% rule, or "" without it."""
    n = comparison.noise
    if n is None or not n.steps:
        return ""
    return (f"; {'beyond' if n.beyond else 'within'} the runs' own noise (smoothed gap {n.smoothed_gap:+.2%}, "
            f"band ±{n.band:.2%}, {n.sureness()})")


def verdict_lines(comparison: Optional[LossComparison], alignment: Optional[Alignment]) -> tuple:
    """Loss gap vs the threshold, first diverging op, speed ratio: one line each."""
    if comparison is None:
        loss = "loss: no reference to compare with"
    else:
        verdict = "aligned" if comparison.agrees else "NOT aligned"
        loss = (f"loss: {verdict}, mean relative gap {comparison.mean_rel_gap:.2%} "
                f"(threshold {comparison.threshold:.0%})")
        if comparison.max_rel_gap_step is not None:
            loss += f", largest {comparison.max_rel_gap:.2%} at step {comparison.max_rel_gap_step}"
        loss += noise_clause(comparison)
    dumps = alignment.dumps if alignment is not None else None
    if dumps is None:
        first = "first divergence: no precision dumps (dump one step in both runs to find it)"
    elif dumps.comparison is None:
        first = f"first divergence: {dumps.note}"
    elif dumps.comparison.first is None:
        first = f"first divergence: none at step {dumps.step}; {dumps.comparison.closeness()}"
    else:
        f = dumps.comparison.first
        where = f", called at {frame_text(f.stack[0])}" if f.stack else ""
        first = f"first divergence at step {dumps.step}: {f.op} ({f.kind}: {f.reason}){where}"
    if alignment is None or alignment.speed is None:
        speed = "speed: no steps/sec to compare"
    else:
        s = alignment.speed
        base = alignment.throughput.steps_per_sec.median
        speed = (f"speed: {s.text()} the reference, {s.verdict()} (median {s.ratio * base:.2f} vs {base:.2f} "
                 "steps/sec)")
    return loss, first, speed
