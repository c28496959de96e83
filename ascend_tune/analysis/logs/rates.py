"""Rate statistics of a run's log windows: the one definition that ``summary.json`` and ``ascend-tune perf`` share.

A *window* is the steps one log line reports: from the step after the previous line to the line's own step. Its
rate r = amount / seconds (steps, or samples, over the window's wall seconds).

Warm-up is counted in optimizer steps, never in log lines: with ``log_every = k`` a line holds k steps, so a count
of lines would leave out k times the steps asked for. A window belongs to the warm-up when it holds a warm-up step::

    first_step < start_step + warmup_steps

(a window that straddles the boundary is warm-up: its rate mixes warm-up steps in). The first step of a window is
what metrics.jsonl records (``first_step``); a log.txt line's is the previous line's step + 1 (the first line's
window is taken to be as long as the second line's; a line whose step does not follow the previous one, a
restarted run appended to the log, is a window of its own step).

Over the rates r_1..r_n of the steady windows (finite and >= 0):

    median = np.median(r)        mean = sum(r) / n        p10, p90 = np.percentile(r, [10, 90])  (linear)
    overall = sum(amount_i) / sum(seconds_i)              over every steady window, when the seconds are known
    spread = 1.4826 x median(|r - median|)                 the windows' robust sigma

A speed ratio (:func:`speed_ratio`, the alignment page's) is the target's median over the reference's, with a 95%
interval from each median's standard error ``1.2533 x spread / sqrt(n)``, combined on the log scale; the target is
slower (or faster) only when the whole interval is below (above) 1.

Zero rates are kept: a window is only ever measured as zero when log.txt rounded a slow rate to ``0.00``, and
leaving those out would make a slow run look faster than it ran (the writers record an unknown rate as NaN, never
as 0). NaN (unknown) and inf (a window of no measurable time) are left out: they are no measurement. Negative
rates cannot be measured and are left out too. numpy only.

A log that records no rate but the wall time of each line (TensorBoard events, a ``time`` column) gets its windows'
rates from consecutive lines: r_i = (step_i - step_{i-1}) / (t_i - t_{i-1}). The first line has no earlier time and
so no rate, and neither has a line whose step does not follow the previous one (a restart) or whose time does not.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple, Optional

import numpy as np

from ..stats import robust_spread

MEDIAN_SE = 1.2533  # sqrt(pi / 2): the median's standard error over the mean's, for normal scatter
SPEED_CONFIDENCE, SPEED_Z = 0.95, 1.96  # the speed ratio's interval


class WarmUp(NamedTuple):
    """The warm-up of a run: ``steps`` optimizer steps from ``start_step`` on."""

    start_step: int
    steps: int

    @property
    def end(self) -> int:
        """The first step past the warm-up."""
        return self.start_step + self.steps

    def holds(self, first_step: int) -> bool:
        """Whether the window that starts at ``first_step`` is warm-up."""
        return first_step < self.end

    def steady(self, first_steps: object) -> np.ndarray:
        """Whether each window (given by its first step) holds no warm-up step."""
        return np.asarray(first_steps, dtype=np.float64) >= self.end


def window_first_steps(last_steps: object, recorded: Optional[object] = None) -> np.ndarray:
    """The first step of each log line's window (int64), from the lines' steps and what the log recorded.

    Parameters:
        last_steps: each line's step (the last step of its window), in file order.
        recorded: each line's recorded first step (NaN where the line has none), or None (log.txt).
    """
    steps = np.asarray(last_steps, dtype=np.int64)
    if not steps.size:
        return steps.copy()
    previous = np.empty_like(steps)
    previous[1:] = steps[:-1]
    gap = int(steps[1] - steps[0]) if steps.size > 1 and steps[1] > steps[0] else 1
    previous[0] = steps[0] - gap
    first = np.where(previous < steps, previous + 1, steps)
    if recorded is not None:
        known = np.asarray(recorded, dtype=np.float64)
        first = np.where(np.isfinite(known), np.nan_to_num(known), first).astype(np.int64)
    return first


def rates_from_wall_times(steps: object, wall_times: object) -> tuple:
    """``(steps_per_sec, seconds)`` of each line's window from the lines' steps and wall times (NaN where a
    window has no measurable start; see the module docstring).

    Parameters:
        steps: each line's step (the last step of its window), in file order.
        wall_times: each line's wall-clock time in seconds (NaN where unknown).
    """
    s = np.asarray(steps, dtype=np.float64)
    t = np.asarray(wall_times, dtype=np.float64)
    rates = np.full(s.size, np.nan)
    seconds = np.full(s.size, np.nan)
    if s.size > 1:
        ds, dt = np.diff(s), np.diff(t)
        ok = (ds > 0) & (dt > 0) & np.isfinite(dt)
        seconds[1:] = np.where(ok, dt, np.nan)
        rates[1:] = np.where(ok, ds / np.where(ok, dt, 1.0), np.nan)
    return rates, seconds


@dataclass(frozen=True)
class RateStats:
    """Statistics of one rate over a run's steady windows (see the module docstring for the maths)."""

    median: float
    mean: float
    p10: float
    p90: float
    windows: int  # the rates counted: one per steady log line
    overall: Optional[float] = None  # total amount over total seconds; None when the seconds are not known
    spread: float = math.nan  # 1.4826 x MAD of the rates (a sigma that one slow window does not inflate)

    @property
    def median_se(self) -> float:
        """The median's standard error, ``1.2533 x spread / sqrt(windows)`` (NaN under 3 windows)."""
        return MEDIAN_SE * self.spread / math.sqrt(self.windows) if self.windows >= 3 else math.nan

    @property
    def lines(self) -> int:
        """The log lines counted (each line reports one window)."""
        return self.windows

    @classmethod
    def of(
        cls, rates: object, amounts: Optional[object] = None, seconds: Optional[object] = None
    ) -> Optional[RateStats]:
        """The statistics of ``rates`` (one per steady window; None entries are unknown), or None when none counts.

        Parameters:
            rates: each steady window's rate.
            amounts: each steady window's steps (or samples), for ``overall``; with ``seconds``.
            seconds: each steady window's wall seconds, for ``overall``.
        """
        values = _floats(rates)
        kept = values[np.isfinite(values) & (values >= 0)]
        if not kept.size:
            return None
        p10, p90 = np.percentile(kept, [10, 90])
        overall = None
        if amounts is not None and seconds is not None:
            total = float(np.sum(_floats(seconds)))
            overall = float(np.sum(_floats(amounts))) / total if total > 0 else None
        return cls(float(np.median(kept)), float(np.mean(kept)), float(p10), float(p90), int(kept.size), overall,
                   robust_spread(kept.tolist()))

    def as_dict(self) -> dict:
        """``median, mean, p10, p90, overall, windows``: summary.json's form."""
        return {"median": self.median, "mean": self.mean, "p10": self.p10, "p90": self.p90,
                "overall": self.overall, "windows": self.windows,
                "spread": None if math.isnan(self.spread) else self.spread}


@dataclass(frozen=True)
class SpeedRatio:
    """One run's median steps/sec over another's, with the interval their window-to-window scatter leaves."""

    ratio: float
    low: float  # NaN when either run has fewer than 3 steady windows
    high: float

    @property
    def known(self) -> bool:
        return not (math.isnan(self.low) or math.isnan(self.high))

    @property
    def slower(self) -> bool:
        """Slower beyond the interval: its top is below 1 (with no interval, never: nothing says how sure)."""
        return self.known and self.high < 1

    @property
    def faster(self) -> bool:
        return self.known and self.low > 1

    def text(self) -> str:
        """``0.77x (95% 0.74-0.80)``: the ratio and its interval."""
        interval = f" ({SPEED_CONFIDENCE:.0%} {self.low:.2f}-{self.high:.2f})" if self.known else " (no interval: " \
            "under 3 steady log lines in a run)"
        return f"{self.ratio:.2f}x{interval}"

    def verdict(self) -> str:
        """``slower``, ``faster`` or ``as fast``, beyond or within the interval."""
        if not self.known:
            side = "below" if self.ratio < 1 else "above" if self.ratio > 1 else "at"
            return f"{side} 1 by the medians alone: too few steady log lines to say how sure"
        if self.slower:
            return "slower beyond the runs' own scatter"
        if self.faster:
            return "faster beyond the runs' own scatter"
        return "as fast within the runs' own scatter"


def speed_ratio(base: RateStats, target: RateStats) -> Optional[SpeedRatio]:
    """``target``'s median over ``base``'s, and its interval: ``ratio x exp(+-z x sqrt((se_t/m_t)^2 +
    (se_b/m_b)^2))``, each run's median standard error from its windows' robust spread (see :attr:`median_se`);
    None when a median is not positive."""
    if not (base.median > 0 and target.median > 0):
        return None
    ratio = target.median / base.median
    se = math.hypot(target.median_se / target.median, base.median_se / base.median)
    if math.isnan(se):
        return SpeedRatio(ratio, math.nan, math.nan)
    return SpeedRatio(ratio, ratio * math.exp(-SPEED_Z * se), ratio * math.exp(SPEED_Z * se))


def _floats(values: object) -> np.ndarray:
    """A float64 array of ``values``, None read as NaN (an array passes through without a Python loop)."""
    if isinstance(values, np.ndarray) and values.dtype.kind in "fiu":
        return values.astype(np.float64, copy=False).ravel()
    return np.array([np.nan if v is None else v for v in values], dtype=np.float64)  # type: ignore[attr-defined]
