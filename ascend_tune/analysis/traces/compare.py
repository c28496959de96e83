"""Where the target loses time: two traces' steps compared row by row at the module, op and kind levels.

Like with like: each side's step is its median step (the middle one by wall time; the mean of the two middle
ones for an even count), or ``step=N`` on both. Its rows (:mod:`.attribute`) add up to that step's wall time, so
the rows' deltas add up to the measured gap, the difference of the two median steps; an explicit
``unattributed`` row at each level holds what is left (host threads that overlap, events that run past a step).

Noise is read from the traces themselves. A loaded machine stretches steps by a factor (the scheduler's slices
land in proportion to a step's length), so a step's noise is relative: each side's spread is that of its log step
times (1.4826 x the median absolute deviation, a standard deviation robust to one slow step); the gap is real when
the ratio of the two median steps is beyond ``NOISE_SIGMAS`` of the two spreads combined, and the noise in ms is
what that ratio adds to the base step, never under ``noise_floor`` of it (default ``NOISE_FLOOR``: two runs
of identical code drift apart by more than their steps scatter within each run; on a shared machine by far more,
so a user there raises it). Not the standard error of the medians, which holds only the scatter within the runs.
A row is a contributor only when the gap is real and the row's delta is beyond its own noise (``NOISE_SIGMAS`` of
the spreads of the row's per-step ms, at most the step's noise: a row may be zero in some steps, so no logarithm).
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from dataclasses import dataclass
from typing import Optional

from ...errors import InputError
from ..defaults import TRACE_NOISE_FLOOR, TRACE_THRESHOLD
from ..stats import robust_spread
from .attribute import LEVELS, OUTSIDE_LABEL, label_events, step_rows
from .model import Trace

NOISE_SIGMAS = 3.0
# of the base's median step: what two runs of identical code differ by on a quiet machine, where the steps within one
# run scatter less than the runs drift apart; on a shared one they drift far more (measured on the loaded 2-core test
# machine: identical code run side by side, medians up to 57% apart), and ``noise_floor`` raises it
NOISE_FLOOR = TRACE_NOISE_FLOOR
DEFAULT_THRESHOLD = TRACE_THRESHOLD
UNATTRIBUTED = "unattributed"


@dataclass(frozen=True)
class RunSide:
    """One side of the comparison: its trace, its steps and the median step's rows (ms) per level."""

    path: str
    device: str
    trace_kind: str
    steps: tuple  # the step numbers compared
    step_ms: tuple  # each step's wall time, same order
    median_ms: float
    spread_ms: float  # 1.4826 x MAD of step_ms (0 for fewer than 3 steps)
    scopes: str  # where module rows come from: "monitor" | "with_modules" | "none"
    rows: dict  # level -> {label: ms} of the median step
    per_step: dict  # level -> {label: tuple of ms per step}, for each row's noise


@dataclass(frozen=True)
class Row:
    """One row of the comparison: a module, op or kind, its ms per step on each side and its share of the gap."""

    level: str
    name: str
    base_ms: float
    target_ms: float
    delta_ms: float
    share: Optional[float]  # delta / measured gap (None when the gap is 0)
    only_in: str  # "" | "base" | "target": the row exists in one run only
    beyond_noise: bool

    @property
    def ratio(self) -> Optional[float]:
        """Target over base (None when the base spent no time there)."""
        return self.target_ms / self.base_ms if self.base_ms > 0 else None


@dataclass(frozen=True)
class TraceComparison:
    """The answer of ``compare-trace``: the gap, its noise, every row, the top contributor and what to do."""

    base: RunSide
    target: RunSide
    gap_ms: float
    noise_ms: float
    rows: tuple  # of Row: by level (LEVELS order), largest delta first, "unattributed" last
    top: Optional[Row]
    next_action: str
    notes: tuple = ()

    @property
    def slower(self) -> bool:
        """The target's step is slower than the base's beyond the noise."""
        return self.gap_ms > self.noise_ms

    @property
    def relative_gap(self) -> float:
        return self.gap_ms / self.base.median_ms if self.base.median_ms > 0 else 0.0

    def exit_code(self, threshold: float = DEFAULT_THRESHOLD) -> int:
        """1 when the target is slower by more than ``threshold`` of the base step and beyond noise, else 0."""
        return 1 if self.slower and self.relative_gap > threshold else 0

    def level_rows(self, level: str) -> tuple:
        return tuple(r for r in self.rows if r.level == level)

    def top_of(self, level: str) -> Optional[Row]:
        """The row of ``level`` that lost the most time (unattributed excluded), or None."""
        rows = [r for r in self.level_rows(level) if r.name != UNATTRIBUTED and r.delta_ms > 0]
        return max(rows, key=lambda r: r.delta_ms) if rows else None

    def one_sided(self, side: str) -> tuple:
        """The op rows present only in ``side`` ("base" or "target")."""
        return tuple(r for r in self.level_rows("op") if r.only_in == side)

    def verdict(self) -> str:
        """One line: how much slower the target is, whether beyond noise, and the top contributor."""
        gap = f"{self.gap_ms:+.2f} ms per step ({self.relative_gap:+.1%})"
        noise = f"noise ±{self.noise_ms:.2f} ms"
        if not self.slower:
            return f"no slowdown beyond noise: target {gap}, {noise}"
        return f"the target is slower by {gap}, beyond the {noise}"

    def top_line(self) -> str:
        """The top contributor as one line with its next action."""
        return f"{self.top_summary()} Next: {self.next_action}"

    def top_summary(self) -> str:
        """The top contributor: its level and name, ms per step on each side, share of the gap, how much slower."""
        if self.top is None:
            return "No contributor beyond noise."
        r = self.top
        ratio = "only in the target" if r.only_in == "target" else (
            f"{r.ratio:.1f}x slower on the target" if r.ratio else "new on the target")
        share = f", {r.share:.0%} of the gap" if r.share is not None else ""
        return (f"Top contributor: {r.level} {r.name}: {r.delta_ms:+.2f} ms per step ({r.base_ms:.2f} -> "
                f"{r.target_ms:.2f} ms{share}), {ratio}.")


def side_of(trace: Trace, step: Optional[int] = None) -> RunSide:
    """One trace's side: its steps (or ``step`` alone), the median step's rows and each row's per-step values."""
    steps = [s for s in trace.steps if s.number is not None]
    if not steps:
        raise InputError(f"{trace.path}: no ProfilerStep#N in the trace; profile with a schedule and call "
                         "prof.step() every step (TrainingMonitor(profile=True) does)")
    if step is not None:
        steps = [s for s in steps if s.number == step]
        if not steps:
            raise InputError(f"{trace.path}: no step {step} in the trace (its steps: "
                             f"{', '.join(str(s.number) for s in trace.steps)}); choose a --step both traces hold")
    labels = label_events(trace)
    each = [step_rows(trace, labels, s) for s in steps]
    order = sorted(range(len(steps)), key=lambda i: steps[i].dur)
    middle = order[(len(order) - 1) // 2: len(order) // 2 + 1]
    rows = {level: _mean([each[i][level] for i in middle]) for level in LEVELS}
    per_step = {level: {label: tuple(e[level].get(label, 0.0) / 1e3 for e in each)
                        for label in set().union(*(e[level] for e in each))} for level in LEVELS}
    step_ms = tuple(s.dur / 1e3 for s in steps)
    return RunSide(
        path=trace.path, device=trace.device, trace_kind=trace.kind, steps=tuple(s.number for s in steps),
        step_ms=step_ms, median_ms=statistics.median(step_ms), spread_ms=_spread(step_ms), scopes=labels.scopes,
        rows=rows, per_step=per_step,
    )


def compare_sides(base: RunSide, target: RunSide, next_action: str = "", notes: tuple = (),
                  noise_floor: float = NOISE_FLOOR) -> TraceComparison:
    """The comparison of two sides (``next_action`` is filled by :mod:`.next_action` for the top row;
    ``noise_floor``: the least share of the base step counted as noise)."""
    gap = target.median_ms - base.median_ms
    noise = _step_noise(base.step_ms, target.step_ms, base.median_ms, noise_floor)
    real = gap > noise
    rows = []
    for level in LEVELS:
        level_rows = []
        for name in set(base.rows[level]) | set(target.rows[level]):
            b, t = base.rows[level].get(name, 0.0), target.rows[level].get(name, 0.0)
            only = "" if name in base.rows[level] and name in target.rows[level] else (
                "base" if name in base.rows[level] else "target")
            if level == "kind" or name in OUTSIDE_LABEL.values() or (
                    level == "module" and "none" in (base.scopes, target.scopes)):
                only = ""  # a kind is a category; a module is missing from a trace that has no module scopes
            # a row is never noisier than the step it is part of (a read-back loop's time swings with the load)
            row_noise = min(_noise(base.per_step[level].get(name, ()), target.per_step[level].get(name, ()),
                                   base.median_ms), noise)
            level_rows.append(Row(level, name, b, t, t - b, (t - b) / gap if gap else None, only,
                                  real and abs(t - b) > row_noise))
        level_rows.sort(key=lambda r: (-r.delta_ms, r.name))
        left = gap - sum(r.delta_ms for r in level_rows)
        level_rows.append(Row(level, UNATTRIBUTED, 0.0, 0.0, left, left / gap if gap else None, "", False))
        rows.extend(level_rows)
    comparison = TraceComparison(base, target, gap, noise, tuple(rows), None, next_action, notes)
    return comparison


def _mean(counters: list) -> dict:
    total: Counter = Counter()
    for counter in counters:
        total.update(counter)
    return {label: us / len(counters) / 1e3 for label, us in total.items()}


def _step_noise(base_ms, target_ms, base_step_ms: float, floor: float) -> float:
    """The ms that ``NOISE_SIGMAS`` of the two sides' log-spreads combined add to the base step (at least ``floor``
    of it)."""
    logs = [[math.log(v) for v in side if v > 0] for side in (base_ms, target_ms)]
    relative = math.expm1(NOISE_SIGMAS * math.hypot(_spread(logs[0]), _spread(logs[1])))
    return base_step_ms * max(relative, floor)


def _noise(base_values, target_values, base_step_ms: float) -> float:
    """``NOISE_SIGMAS`` of the two sides' spreads combined, at least ``NOISE_FLOOR`` of the base step."""
    return max(NOISE_SIGMAS * math.hypot(_spread(base_values), _spread(target_values)), NOISE_FLOOR * base_step_ms)


def _spread(values) -> float:
    return robust_spread(values, least=3)
