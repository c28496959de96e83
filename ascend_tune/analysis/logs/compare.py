"""Loss-curve alignment of two runs: the gap numbers the GPU<->NPU migration is judged on.

With base losses ``a`` and target losses ``b`` over the compared steps:
mean absolute gap = mean(|a - b|); mean relative gap = mean(|a - b| / |a|) (the guide's "Loss Gap percent" / 100);
the runs are *aligned* when the mean relative gap is below the threshold (the guide's "< 5% is aligned") and the
target has no inf/NaN loss where the base is finite. A step whose base loss is zero or not finite cannot carry a
relative gap: it is excluded from all gap numbers and counted, never divided by.

``align="step"`` pairs losses by optimizer step (a resumed or shorter run still lines up); ``align="index"`` is the
seed script's method: the i-th line of one log against the i-th of the other, cut to the shorter log.

Optimizer steps are numbered as each framework numbers them: from 0 in ascend_tune, Lightning and TensorBoard
writers, from 1 in the Hugging Face Trainer (its ``global_step`` after the step). The logs are put on one counting
first: the one that counts from 1 is shifted down by one, so its step N is the other's step N-1, and the steps shown
count from 0; the comparison says how it paired them (``pairing``). What is paired:

- both logs hold each optimizer step's loss (metrics.jsonl's ``step_losses``, a record per step, Lightning's step
  values): step against step (unit ``step``);
- one does and the other holds log windows (a line's loss is the mean of the steps since its previous line: log.txt,
  a Trainer's ``loss`` with ``logging_steps`` > 1): the per-step losses are averaged over each window of the other,
  over windows whose every step is there (unit ``log window``);
- neither does: line against line by their last step (unit ``log line``).

When both logs record each step's gradient norm (:mod:`.grad_norm`), those are compared too, on the same step
counting: their mean relative gap and the first step where they part beyond the threshold, beside the losses' first
parting step (the gradient norm usually parts first). The verdict stays the losses'.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from ...errors import InputError
from ..defaults import LOSS_GAP, LOSS_NOISE_FLOOR
from .grad_norm import GradNormGap, compare_grad_norm
from .model import LossLog
from .noise import LossNoise, loss_noise, signed_gaps


@dataclass(frozen=True, eq=False)
class LossComparison:
    """Two loss curves side by side and their gap numbers (see the module docstring)."""

    base: str
    target: str
    align: str
    unit: str  # "step" (one loss per optimizer step) or "log line" (one per log window)
    threshold: float
    steps: np.ndarray  # the x of each compared pair: the step (base's step under index alignment)
    base_loss: np.ndarray
    target_loss: np.ndarray
    compared: int
    only_base: int
    only_target: int
    excluded: int
    target_nonfinite: int
    mean_abs_gap: float
    mean_rel_gap: float
    max_rel_gap: float
    max_rel_gap_step: Optional[int]
    final_step: Optional[int]
    final_base: float
    final_target: float
    final_gap: float
    final_rel_gap: float
    notes: tuple
    pairing: str = ""  # how the two logs' step numbers were put side by side
    first_parting_step: Optional[int] = None  # the first compared step whose relative gap exceeds the threshold
    grad: Optional[GradNormGap] = None  # the gradient norms compared, when both logs have them
    noise: Optional[LossNoise] = None  # whether the gap is beyond the pair's own noise (.noise)

    @property
    def agrees(self) -> bool:
        """Aligned by both rules: the guide's 5% rule, and the gap within the pair's own noise."""
        return self.aligned and not self.beyond_noise

    @property
    def beyond_noise(self) -> bool:
        """Whether the smoothed gap is beyond the pair's own noise (:mod:`.noise`)."""
        return self.noise is not None and self.noise.beyond

    @property
    def grad_parts_first(self) -> bool:
        """Whether the gradient norms part beyond the threshold before the losses do (or the losses never do)."""
        g = self.grad
        if g is None or g.first_parting_step is None:
            return False
        return self.first_parting_step is None or g.first_parting_step < self.first_parting_step

    @property
    def aligned(self) -> bool:
        return self.compared > 0 and self.target_nonfinite == 0 and self.mean_rel_gap < self.threshold

    def as_dict(self) -> dict:
        """The numbers, JSON-ready (no arrays)."""
        out = {k: getattr(self, k) for k in self.__dataclass_fields__
               if k not in ("steps", "base_loss", "target_loss", "grad", "noise")}
        out["grad_norm"] = self.grad.as_dict() if self.grad is not None else None
        out["beyond_noise"] = self.beyond_noise
        out["noise"] = self.noise.as_dict() if self.noise is not None else None
        out["grad_parts_first"] = self.grad_parts_first
        out["notes"] = list(self.notes)
        out["aligned"] = self.aligned
        return out


def compare_loss(base: LossLog, target: LossLog, threshold: float = LOSS_GAP, align: str = "step",
                 noise_from: tuple = (), noise_floor: float = LOSS_NOISE_FLOOR) -> LossComparison:
    """Compare the loss curves of two runs.

    Parameters:
        base: the reference run (GPU / CPU); relative gaps are relative to its losses.
        target: the run being checked (NPU).
        threshold: the mean relative gap below which the runs are aligned (0.05 = 5%).
        align: ``"step"`` (pair by step number) or ``"index"`` (the guide's i-th against i-th line).
        noise_from: more reference runs (LossLog), the reference's script with other seeds: their gap against the
            base is noise (:mod:`.noise`).
        noise_floor: the least noise band, a fraction.
    """
    if align not in ("step", "index"):
        raise InputError(f"align must be 'step' or 'index', got {align!r}")
    if not threshold > 0:
        raise InputError(f"the threshold must be a positive fraction such as 0.05, got {threshold!r}")
    if not noise_floor >= 0:
        raise InputError(f"the noise floor must be a fraction such as 0.01, got {noise_floor!r}")
    notes = base.notes() + target.notes()
    pairing = _pairing(base, target) if align == "step" else "the i-th line of each log"
    if align == "index":
        unit = "log line"
        n = min(base.lines, target.lines)
        x, a, b = base.steps[:n], base.losses[:n], target.losses[:n]
        only_base, only_target = base.lines - n, target.lines - n
    else:
        unit, (bs, bl), (ts, tl) = _curves(base, target)
        x, bi, ti = np.intersect1d(bs, ts, assume_unique=True, return_indices=True)
        a, b = bl[bi], tl[ti]
        only_base, only_target = bs.size - x.size, ts.size - x.size
        if not x.size:
            raise InputError(
                f"{base.source} and {target.source} have no step in common (base steps {_span(bs)}, target steps "
                f"{_span(ts)}, {pairing}); compare line by line with --align index"
            )
        if {base.kind, target.kind} == {"text", "jsonl"} and unit != "step":
            notes.append("one log is log.txt (losses rounded to 4 decimals), the other metrics.jsonl")
        elif "text" in (base.kind, target.kind) and base.kind != target.kind:
            notes.append("one log is log.txt: its losses are rounded to 4 decimals")
    usable = np.isfinite(a) & (a != 0)
    target_bad = usable & ~np.isfinite(b)
    keep = usable & np.isfinite(b)
    gap = np.abs(a[keep] - b[keep])
    rel = gap / np.abs(a[keep])
    kept_x = x[keep]
    parting = np.flatnonzero(rel > threshold)
    first_parting = int(kept_x[parting[0]]) if parting.size else None
    if target_bad.any():
        bad = int(x[np.flatnonzero(target_bad)[0]])
        first_parting = bad if first_parting is None else min(first_parting, bad)
    grad = compare_grad_norm(base, target, threshold, _origin(base, target)) if align == "step" else None
    if rel.size:
        worst = int(np.argmax(rel))
        stats = (float(gap.mean()), float(rel.mean()), float(rel[worst]), int(kept_x[worst]))
        last = (int(kept_x[-1]), float(a[keep][-1]), float(b[keep][-1]), float(gap[-1]), float(rel[-1]))
    else:
        stats = (float("nan"), float("nan"), float("nan"), None)
        last = (None, float("nan"), float("nan"), float("nan"), float("nan"))
    if int((~usable).sum()):
        notes.append(f"{int((~usable).sum())} step(s) with a zero or non-finite base loss excluded")
    if int(target_bad.sum()):
        notes.append(f"{int(target_bad.sum())} step(s) where the target loss is inf/NaN and the base's is finite")
    return LossComparison(
        base=base.source, target=target.source, align=align, unit=unit, threshold=threshold,
        steps=x, base_loss=a, target_loss=b, compared=int(keep.sum()), only_base=int(only_base),
        only_target=int(only_target), excluded=int((~usable).sum()), target_nonfinite=int(target_bad.sum()),
        mean_abs_gap=stats[0], mean_rel_gap=stats[1], max_rel_gap=stats[2], max_rel_gap_step=stats[3],
        final_step=last[0], final_base=last[1], final_target=last[2], final_gap=last[3], final_rel_gap=last[4],
        notes=tuple(notes), pairing=pairing, first_parting_step=first_parting, grad=grad,
        noise=loss_noise(signed_gaps(a, b), tuple(_reference_gap(base, ref, align) for ref in noise_from),
                         noise_floor),
    )


def _reference_gap(base: LossLog, reference: LossLog, align: str) -> float:
    """The smoothed gap of another reference run against the base, paired as the target is."""
    paired = compare_loss(base, reference, align=align)
    return float(np.mean(signed_gaps(paired.base_loss, paired.target_loss)))


def _origin(base: LossLog, target: LossLog) -> int:
    """The counting both logs are put on: from 0 unless both count from the same number."""
    return base.step_origin if base.step_origin == target.step_origin else 0


def _pairing(base: LossLog, target: LossLog) -> str:
    """How step numbers of ``base`` and ``target`` were paired, in words."""
    if base.step_origin == target.step_origin:
        return f"both count optimizer steps from {base.step_origin}: equal step numbers paired"
    names = {"base": base, "target": target}
    shifted = "base" if base.step_origin else "target"
    other = "target" if shifted == "base" else "base"
    by = names[shifted].step_origin - names[other].step_origin
    return (f"{shifted} ({names[shifted].writer}) counts optimizer steps from {names[shifted].step_origin}, "
            f"{other} ({names[other].writer}) from {names[other].step_origin}: {shifted} step N paired with {other} "
            f"step N-{by}; steps shown counted from {names[other].step_origin}")


def _curves(base: LossLog, target: LossLog) -> tuple:
    """``(unit, (base steps, losses), (target steps, losses))`` on one step counting (see the module docstring)."""
    origin = _origin(base, target)
    b_per, t_per = base.step_numbers is not None, target.step_numbers is not None
    if b_per and t_per:
        return "step", _series(base, True, origin), _series(target, True, origin)
    if b_per != t_per:
        per, windows = (base, target) if b_per else (target, base)
        averaged = _window_means(_series(per, True, origin), windows, origin)
        ours = _series(windows, False, origin)
        return "log window", (averaged if b_per else ours), (ours if b_per else averaged)
    return "log line", _series(base, False, origin), _series(target, False, origin)


def _series(log: LossLog, per_step: bool, origin: int = 0) -> tuple:
    """(steps, losses) with one entry per step number, the last one when a step repeats (a restarted run); the
    steps shifted from the log's counting to ``origin``'s."""
    steps, losses = (log.step_numbers, log.step_losses) if per_step else (log.steps, log.losses)
    reversed_steps = steps[::-1]
    unique, first_from_end = np.unique(reversed_steps, return_index=True)
    return unique - (log.step_origin - origin), losses[::-1][first_from_end]


def _window_means(per_step: tuple, windows: LossLog, origin: int) -> tuple:
    """``per_step`` losses averaged over each log window of ``windows`` whose every step they hold: (last steps,
    means). A window of one step keeps its loss as it is."""
    steps, losses = per_step
    shift = windows.step_origin - origin
    last = windows.steps - shift
    first = np.minimum(windows.first_steps - shift, last)
    lo, hi = np.searchsorted(steps, first, "left"), np.searchsorted(steps, last, "right")
    whole = (hi - lo) == (last - first + 1)
    if not whole.any():
        return last[:0], losses[:0]
    lo, hi, last = lo[whole], hi[whole], last[whole]
    padded = np.append(losses, 0.0)  # reduceat needs every index in range; a window ending at the end uses it
    sums = np.add.reduceat(padded, np.ravel(np.column_stack([lo, hi])))[::2]
    means = sums / (hi - lo)
    unique, at = np.unique(last[::-1], return_index=True)
    return unique, means[::-1][at]


def _span(steps: np.ndarray) -> str:
    return f"{int(steps.min())}..{int(steps.max())}" if steps.size else "none"
