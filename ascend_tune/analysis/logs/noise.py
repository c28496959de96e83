"""Whether a loss gap is beyond the pair's own noise: what tells a changed setting from another seed.

The guide's rule (a mean per-step relative gap under 5%) cannot tell them apart: two runs of one script with other
seeds and data orders differ by a few percent per step, and so does a run whose learning rate is off by a third.
What differs is the gap's *persistence*: the reruns' gap averages out and changes sign, a changed setting's does
not. With ``r_t = (target_t - base_t) / |base_t|`` the signed per-step relative gap over the ``n`` compared steps:

- **smoothed gap** ``g = mean(r_t)``, its sign (target above or below), and over consecutive windows of
  ``w = min(WINDOW, max(1, n // 8))`` steps the windows' mean gaps ``m_1..m_K`` and how many share ``g``'s sign;
- **its noise**: the standard error of ``g`` by batch means, ``se = std(m_k) / sqrt(K)`` (consecutive steps'
  gaps are correlated, a window of ``w`` steps holds that correlation, the windows' means are nearly independent);
  with fewer than 4 windows, ``se = s * sqrt((1 + rho) / (1 - rho) / n)`` from the per-step spread ``s`` and the
  lag-1 autocorrelation ``rho`` of ``r_t``;
- **reference runs** (``--noise-from``: the reference's script again with other seeds): each one's smoothed gap
  against the base ``g_j``, their band ``1.5 x max |g_j|`` (Megatron's tolerance from repeated runs, m = 1.5);
- the **band** ``max(NOISE_SIGMAS x se, the references' band, floor)``, the floor (default 1%, msprobe's guide:
  an average relative error over 1% is misaligned) keeping a tiny but steady offset (bfloat16's rounding) from being
  called a fault; **beyond noise** when ``|g| > band``. How sure: ``z = |g| / se`` in words (beyond: sure from
  z >= 5, likely below; within: sure when |g| is under half the band).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from ..defaults import LOSS_NOISE_FLOOR
from ..stats import robust_spread

NOISE_SIGMAS = 3.0
WINDOW = 25  # steps per window of the smoothed gap: the batch-means block
REFERENCE_MARGIN = 1.5  # the references' band: this many times their largest smoothed gap


@dataclass(frozen=True)
class LossNoise:
    """The smoothed gap of a pair and the noise it is judged by (see the module docstring)."""

    smoothed_gap: float  # mean signed relative gap, target above base when > 0
    steps: int
    window_steps: int
    windows: int
    same_sign: int  # windows whose mean gap has the smoothed gap's sign
    standard_error: float
    per_step_spread: float  # 1.4826 x MAD of the per-step gaps
    lag1: float  # autocorrelation of consecutive per-step gaps
    reference_gaps: tuple  # the smoothed gap of each reference run against the base
    floor: float
    band: float
    band_from: str  # "curve", "references" or "floor": the term that set the band

    @property
    def beyond(self) -> bool:
        """Whether the smoothed gap is beyond the band."""
        return math.isfinite(self.smoothed_gap) and abs(self.smoothed_gap) > self.band

    @property
    def z(self) -> float:
        """How many standard errors the smoothed gap is from zero."""
        if self.standard_error > 0:
            return abs(self.smoothed_gap) / self.standard_error
        return math.inf if self.smoothed_gap else 0.0

    def sureness(self) -> str:
        """How sure the verdict is, in a word."""
        if self.steps < 8:
            return "unsure: too few steps to measure the noise"
        if self.beyond:
            return "sure" if self.z >= 5 else "likely"
        return "sure" if abs(self.smoothed_gap) < self.band / 2 else "likely"

    def line(self) -> str:
        """The one line of the verdict: beyond or within the noise, with the figures behind it."""
        side = "above" if self.smoothed_gap > 0 else "below"
        refs = (f", {REFERENCE_MARGIN:g} x the {len(self.reference_gaps)} reference run(s)' largest "
                f"{max(abs(g) for g in self.reference_gaps):.2%}") if self.reference_gaps else ""
        return (f"{'beyond' if self.beyond else 'within'} the runs' own noise ({self.sureness()}): smoothed gap "
                f"{self.smoothed_gap:+.2%} (target {side} base; {self.same_sign} of {self.windows} windows of "
                f"{self.window_steps} steps on that side), band ±{self.band:.2%} (the largest of {NOISE_SIGMAS:g} x "
                f"its standard error {self.standard_error:.2%}{refs} and the floor {self.floor:.2%}); "
                f"z {self.z:.1f}")

    def as_dict(self) -> dict:
        """JSON-ready."""
        out = asdict(self)
        out["reference_gaps"] = list(self.reference_gaps)
        out.update(beyond_noise=self.beyond, z=self.z, sureness=self.sureness())
        return out


def signed_gaps(base_loss: np.ndarray, target_loss: np.ndarray) -> np.ndarray:
    """``(target - base) / |base|`` over the steps where both are finite and the base is not zero."""
    keep = np.isfinite(base_loss) & (base_loss != 0) & np.isfinite(target_loss)
    return (target_loss[keep] - base_loss[keep]) / np.abs(base_loss[keep])


def loss_noise(gaps: np.ndarray, reference_gaps: tuple = (), floor: float = LOSS_NOISE_FLOOR) -> LossNoise:
    """The smoothed gap of per-step signed gaps (in step order) and the band it is judged by.

    Parameters:
        gaps: :func:`signed_gaps` of the pair.
        reference_gaps: the smoothed gap of each reference run (another seed) against the base.
        floor: the least band (a fraction).
    """
    reference_gaps = tuple(r for r in reference_gaps if math.isfinite(r))  # one with no usable step says nothing
    n = int(gaps.size)
    g = float(gaps.mean()) if n else math.nan
    w = min(WINDOW, max(1, n // 8))
    k = n // w if n else 0
    means = gaps[n - k * w:].reshape(k, w).mean(axis=1) if k else np.zeros(0)
    lag1 = _lag1(gaps)
    if k >= 4:
        se = float(means.std(ddof=1) / math.sqrt(k))
    elif n >= 2:
        rho = min(max(lag1, 0.0), 0.95)
        se = float(gaps.std(ddof=1) * math.sqrt((1 + rho) / (1 - rho) / n))
    else:
        se = math.inf
    sign = 1.0 if g >= 0 else -1.0
    same = int(np.count_nonzero(np.sign(means) == sign)) if k else 0
    terms = {"curve": NOISE_SIGMAS * se, "floor": floor}
    if reference_gaps:
        terms["references"] = REFERENCE_MARGIN * max(abs(r) for r in reference_gaps)
    band_from = max(terms, key=lambda t: terms[t])
    return LossNoise(
        smoothed_gap=g, steps=n, window_steps=w, windows=k, same_sign=same, standard_error=se,
        per_step_spread=robust_spread(gaps.tolist()) if n else math.nan, lag1=lag1,
        reference_gaps=tuple(float(r) for r in reference_gaps), floor=floor, band=terms[band_from],
        band_from=band_from,
    )


def _lag1(values: np.ndarray) -> float:
    if values.size < 3:
        return 0.0
    x = values - values.mean()
    denominator = float(np.dot(x, x))
    return float(np.dot(x[:-1], x[1:]) / denominator) if denominator > 0 else 0.0
