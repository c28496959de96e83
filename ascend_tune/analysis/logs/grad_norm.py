"""The gradient norms of two runs side by side: the earlier signal of a migration that parts.

Both logs must record each step's gradient norm (metrics.jsonl with ``health=``, a Hugging Face Trainer's
``grad_norm``, which is the logging step's own value); steps are paired as :mod:`.compare` pairs losses (one
counting for both). With base norms ``a`` and target norms ``b`` over the paired steps where ``a`` is finite and
non-zero: mean relative gap = mean(|a - b| / |a|); the first *parting* step is the first where the relative gap
exceeds the loss threshold (a non-finite target norm there counts as parting).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from .model import LossLog


@dataclass(frozen=True, eq=False)
class GradNormGap:
    """The gradient-norm comparison of two runs (see the module docstring)."""

    steps: np.ndarray
    base: np.ndarray
    target: np.ndarray
    compared: int
    mean_rel_gap: float
    max_rel_gap: float
    max_rel_gap_step: Optional[int]
    first_parting_step: Optional[int]

    def as_dict(self) -> dict:
        """The numbers, JSON-ready (no arrays)."""
        return {"compared": self.compared, "mean_rel_gap": self.mean_rel_gap, "max_rel_gap": self.max_rel_gap,
                "max_rel_gap_step": self.max_rel_gap_step, "first_parting_step": self.first_parting_step}


def compare_grad_norm(base: LossLog, target: LossLog, threshold: float, origin: int) -> Optional[GradNormGap]:
    """The gradient norms of ``base`` and ``target`` compared on the step counting from ``origin``; None when either
    log has none or they share no step."""
    if base.grad_steps is None or target.grad_steps is None:
        return None
    bs, bv = _series(base, origin)
    ts, tv = _series(target, origin)
    x, bi, ti = np.intersect1d(bs, ts, assume_unique=True, return_indices=True)
    if not x.size:
        return None
    a, b = bv[bi], tv[ti]
    usable = np.isfinite(a) & (a != 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        rel = np.where(usable, np.abs(a - b) / np.abs(np.where(usable, a, 1.0)), np.nan)
    rel = np.where(usable & ~np.isfinite(b), np.inf, rel)
    finite = usable & np.isfinite(rel)
    parting = np.flatnonzero(usable & (rel > threshold))
    worst = int(np.nanargmax(np.where(finite, rel, -1.0))) if finite.any() else None
    return GradNormGap(
        steps=x, base=a, target=b, compared=int(usable.sum()),
        mean_rel_gap=float(rel[finite].mean()) if finite.any() else float("nan"),
        max_rel_gap=float(rel[worst]) if worst is not None else float("nan"),
        max_rel_gap_step=int(x[worst]) if worst is not None else None,
        first_parting_step=int(x[parting[0]]) if parting.size else None,
    )


def _series(log: LossLog, origin: int) -> tuple:
    """(steps on ``origin``'s counting, norms), the last value where a step repeats (a restarted run)."""
    steps, values = log.grad_steps, log.grad_norms
    unique, first_from_end = np.unique(steps[::-1], return_index=True)
    return unique - (log.step_origin - origin), values[::-1][first_from_end]
