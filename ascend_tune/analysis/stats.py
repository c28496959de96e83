"""THE robust statistics, once: the median, the spread (1.4826 x the median absolute deviation, a standard deviation
that one wild value does not move), both also of a rolling window kept sorted (:class:`SortedWindow`), and the test
that names one value among many (one rank), as msprof-analyze's slow-rank recipe does: Dixon's Q test at 99.5%
confidence up to 100 values, three standard deviations beyond. The ranks' verdicts, the health feature's spike rule
and compare-trace's noise use them.

Dixon's ratio compares the suspect's gap to its neighbour with the sample's range; the ratio changes with the
sample size so that one other extreme value cannot mask the suspect (Dixon 1950): r10 for n = 3-7, r11 for 8-10,
r21 for 11-13, r22 for 14 and more. The critical values are the ratio's 99.5% quantile for normal samples of that
size, simulated once per size with a fixed seed (200 000 samples; the quantile is within ~1% of the tables').
Where ranks meet repeatedly (collectives, steps), :func:`tally_chance` asks the same question of the count of
meetings at which one rank came out last.
"""

from __future__ import annotations

import functools
import math
from bisect import bisect_left, insort
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Optional

import numpy as np

MAD_TO_SIGMA = 1.4826  # a normal distribution's standard deviation per median absolute deviation
CONFIDENCE = 0.995
DIXON_MAX = 100  # beyond: 3 sigma
_SAMPLES = 200_000


def median(values: Sequence) -> float:
    """The middle value (the mean of the two middle ones for an even count); ``values`` must not be empty."""
    ordered = sorted(values)
    n = len(ordered)
    mid = n // 2
    return ordered[mid] if n % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def robust_spread(values: Sequence, least: int = 3) -> float:
    """``MAD_TO_SIGMA`` x the median absolute deviation of ``values``; 0.0 for fewer than ``least`` of them."""
    values = list(values)
    if len(values) < max(least, 1):
        return 0.0
    middle = median(values)
    return MAD_TO_SIGMA * median([abs(v - middle) for v in values])


class SortedWindow:
    """The last ``size`` values, in arrival order and sorted: their :func:`median` and :func:`robust_spread`
    (``least=1``), exactly, without sorting them at each call (the spike rule asks at every step).

    A value in costs a binary search and a list insert (and the oldest's removal once full). The median is then the
    middle value, kept as :attr:`middle` (NaN while empty); the median absolute deviation is the middle one of the
    distances to it, which need no sort: the values below the median, walked down, and those above it, walked up,
    give two ascending runs of distances, merged up to their middle (half the window). Values must be finite (NaN
    has no place in an order).

    Parameters:
        size: how many values it keeps.
        values: the first ones, oldest first.
    """

    def __init__(self, size: int, values: Iterable[float] = ()):
        self._arrived: deque = deque(maxlen=size)
        self._sorted: list = []
        self.middle = math.nan  # the median, kept by append: the spike rule reads it at every step, with no call
        for value in values:
            self.append(value)

    def __len__(self) -> int:
        return len(self._arrived)

    def __iter__(self) -> Iterator[float]:
        """The values, oldest first."""
        return iter(self._arrived)

    def append(self, value: float) -> None:
        """Add ``value``; once full, the oldest leaves."""
        arrived, ordered = self._arrived, self._sorted
        if len(arrived) == arrived.maxlen:
            # insort (to the right of equal values) keeps equal values in arrival order, as sorted() of the arrival
            # order does, so the oldest is the first of its equals, down to 0.0 against -0.0
            del ordered[bisect_left(ordered, arrived[0])]
        arrived.append(value)
        insort(ordered, value)
        n = len(ordered)
        mid = n // 2
        self.middle = ordered[mid] if n % 2 else (ordered[mid - 1] + ordered[mid]) / 2

    def median(self) -> float:
        """:func:`median` of the values (:attr:`middle`); the window must not be empty."""
        if not self._sorted:
            raise IndexError("the median of an empty window")
        return self.middle

    def spread(self) -> float:
        """``MAD_TO_SIGMA`` x the median absolute deviation (0.0 when empty): ``robust_spread(values, least=1)``."""
        ordered, n = self._sorted, len(self._sorted)
        if not n:
            return 0.0
        middle = self.median()
        below = bisect_left(ordered, middle) - 1  # ordered[below] < middle <= ordered[above]
        above = below + 1
        # the next distance on each side (inf: none left). Below, middle - v is abs(v - middle) to the bit (a rounded
        # difference only changes sign when its terms swap); above, abs() turns -0.0 - 0.0 into 0.0. Rounding is
        # monotonic: each side's distances ascend as it walks away from the middle
        up = abs(ordered[above] - middle) if above < n else math.inf
        down = middle - ordered[below] if below >= 0 else math.inf
        previous = distance = 0.0
        for _ in range(n // 2 + 1):
            previous = distance
            if up <= down:
                distance, above = up, above + 1
                up = abs(ordered[above] - middle) if above < n else math.inf
            else:
                distance, below = down, below - 1
                down = middle - ordered[below] if below >= 0 else math.inf
        return MAD_TO_SIGMA * (distance if n % 2 else (previous + distance) / 2)


@dataclass(frozen=True)
class Outlier:
    """The test's answer about the most extreme value on one side."""

    index: int  # into the values given
    statistic: float  # Dixon's ratio, or the distance in standard deviations
    critical: float
    test: str  # "Dixon r10" ... or "3 sigma"

    @property
    def significant(self) -> bool:
        return self.statistic > self.critical

    def text(self) -> str:
        """How sure, in words."""
        verdict = "an outlier" if self.significant else "not an outlier"
        return f"{self.test} = {self.statistic:.3g} vs {self.critical:.3g} at {CONFIDENCE:.1%}: {verdict}"


def most_extreme(values: list, high: bool = True) -> Optional[Outlier]:
    """The largest (``high``) or smallest value of ``values`` tested as an outlier; None under 3 finite values."""
    x = np.asarray(values, dtype=float)
    finite = np.flatnonzero(np.isfinite(x))
    if finite.size < 3:
        return None
    signed = x[finite] if high else -x[finite]
    order = np.argsort(signed, kind="stable")
    index = int(finite[order[-1]])
    if finite.size > DIXON_MAX:
        std = float(signed.std())
        distance = 0.0 if std == 0 else float((signed[order[-1]] - signed.mean()) / std)
        return Outlier(index, distance, 3.0, "3 sigma")
    name, ratio = _dixon(np.sort(signed))
    return Outlier(index, ratio, dixon_critical(int(finite.size)), f"Dixon {name}")


def _dixon(s: np.ndarray) -> tuple:
    """(variant, ratio) for the largest of the sorted sample ``s``."""
    n = s.size
    gap, low, name = (1, 0, "r10") if n <= 7 else (1, 1, "r11") if n <= 10 else (2, 1, "r21") if n <= 13 else \
        (2, 2, "r22")
    span = s[-1] - s[low]
    return name, 0.0 if span <= 0 else float((s[-1] - s[-1 - gap]) / span)


@functools.cache
def dixon_critical(n: int) -> float:
    """The 99.5% quantile of Dixon's ratio for ``n`` normal values (3 <= n <= 100)."""
    rng = np.random.default_rng(n)
    ratios = np.empty(_SAMPLES)
    chunk = max(1, 2_000_000 // n)
    for start in range(0, _SAMPLES, chunk):
        stop = min(_SAMPLES, start + chunk)
        s = np.sort(rng.standard_normal((stop - start, n)), axis=1)
        gap, low = (1, 0) if n <= 7 else (1, 1) if n <= 10 else (2, 1) if n <= 13 else (2, 2)
        ratios[start:stop] = (s[:, -1] - s[:, -1 - gap]) / (s[:, -1] - s[:, low])
    return float(np.quantile(ratios, CONFIDENCE))


def tally_chance(wins: int, rounds: int, ranks: int) -> float:
    """The chance that any one of ``ranks`` equal ranks comes out last at ``wins`` or more of ``rounds`` meetings
    (binomial tail at 1/ranks, times ranks for having looked at every rank): below 1 - :data:`CONFIDENCE`, the
    tally itself sets the rank apart, also where its times alone are too noisy for Dixon's test."""
    if ranks < 2 or rounds < 1:
        return 1.0
    p = 1.0 / ranks
    tail = sum(math.comb(rounds, i) * p ** i * (1 - p) ** (rounds - i) for i in range(wins, rounds + 1))
    return min(1.0, tail * ranks)
