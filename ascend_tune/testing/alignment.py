"""``assert_loss_aligned``: the GPU↔NPU loss-curve check as a test assertion with a readable failure."""

from __future__ import annotations

import os
from typing import Union

from ..analysis.defaults import LOSS_GAP
from ..analysis.logs.compare import LossComparison, compare_loss
from ..analysis.logs.model import LossLog
from ..analysis.logs.read import read_log

LogLike = Union[str, "os.PathLike[str]", LossLog]


def assert_loss_aligned(base: LogLike, target: LogLike, threshold: float = LOSS_GAP) -> LossComparison:
    """Fail unless the target run's loss curve is within ``threshold`` mean relative gap of the base run's.

    Parameters:
        base: the reference run (any log or run folder ``compare-loss`` reads, e.g. a Hugging Face
            trainer_state.json, or a LossLog).
        target: the run checked against it.
        threshold: the largest mean relative gap that counts as aligned (0.05 = 5%).
    Returns the comparison, so a test can assert more on it.
    """
    result = compare_loss(_as_log(base), _as_log(target), threshold=threshold)
    if not result.aligned:
        raise AssertionError(_failure(result))
    return result


def _as_log(log: LogLike) -> LossLog:
    return log if isinstance(log, LossLog) else read_log(os.fspath(log))


def _failure(r: LossComparison) -> str:
    lines = [
        f"loss curves not aligned: mean relative gap {r.mean_rel_gap:.2%} (threshold {r.threshold:.2%}) "
        f"over {r.compared} {r.unit}s; mean absolute gap {r.mean_abs_gap:.6g}",
    ]
    if r.max_rel_gap_step is not None:
        at = list(r.steps).index(r.max_rel_gap_step)
        lines.append(
            f"worst step {r.max_rel_gap_step}: base {r.base_loss[at]:.6g}, target {r.target_loss[at]:.6g} "
            f"({r.max_rel_gap:.2%})"
        )
    if r.final_step is not None:
        lines.append(f"final step {r.final_step}: base {r.final_base:.6g}, target {r.final_target:.6g}")
    if r.target_nonfinite:
        lines.append(f"{r.target_nonfinite} step(s) where the target loss is inf/NaN")
    lines.extend(r.notes)
    lines.append(f"base: {r.base}  target: {r.target}")
    return "\n".join(lines)
