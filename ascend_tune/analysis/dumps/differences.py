"""How two tensors of a dump comparison differ: msprobe's compare metrics (statistics and tensor mode), the agreement
error the first divergence reads, and the replay's error against a float64 golden result.

Statistics mode (:class:`StatsDiff`, vectorised over all compared rows at once), with T the target's and B the
base's statistic: ``diff = T - B`` and ``relative error = |T - B| / |B|`` for Max, Min, Mean and Norm (msprobe's
columns; inf when B = 0 and T differs).

Tensor mode (:class:`TensorMetrics`, from the saved tensors): Cosine, EucDist = ||T - B||, MaxAbsErr,
MaxRelativeErr (|T-B|/|B|, with float epsilon added where B = 0), and the shares of elements whose relative error is
below 0.001 and 0.005 (msprobe's definitions; inf/NaN at the same positions are zeroed first, at different
positions the metrics are NaN).

Each metric is one row of :data:`STATISTICS_METRICS` or :data:`TENSOR_METRICS` (its field, msprobe's column, how
its cell prints, its maths): the NamedTuples, :data:`COLUMNS` (with :class:`~.model.Stats`' columns) and the CSV
(:mod:`.table`) follow from the rows.

Agreement (ours, for the first divergence): a row's *error* is the largest difference of its statistics measured
against the tensor's magnitude, ``|T_s - B_s| / max(|max|, |min|)`` for max/min/mean and ``|T_n - B_n| / max(|T_n|,
|B_n|)`` for the norm (with saved tensors: ``max|T - B| / max(|T|, |B|)``). A relative error per statistic would
call a mean of 1e-9 against 2e-9 a 100% error; measured against the magnitude it is noise. How large an error two
correct runs may show (per dtype, op family and size): :mod:`.tolerance`.

The replay's error (:class:`ReplayError`) is defined in :mod:`.replay` and measured on the tensors themselves, in
torch, by :func:`ascend_tune.precision.golden.measure`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, NamedTuple, Optional

import numpy as np

from .model import Leaf


class Metric(NamedTuple):
    """One compare metric, its one row: its field, msprobe's column name, how its CSV cell prints (``number``,
    ``diff``: 0 as "0", ``percent``: a fraction as "12.5%"), and in tensor mode how it is computed."""

    field: str
    column: str
    cell: str
    compute: Optional[Callable[[TensorPair], float]] = None


class TensorPair(NamedTuple):
    """What every tensor-mode metric is computed from, computed once: the flat float64 tensors (inf/NaN at the same
    places zeroed), their difference, each element's relative error and the two norms."""

    target: np.ndarray
    base: np.ndarray
    delta: np.ndarray
    rel: np.ndarray
    target_norm: float
    base_norm: float


def _cosine(p: TensorPair) -> float:
    eps = np.finfo(np.float64).eps
    if p.target_norm <= eps and p.base_norm <= eps:
        return 1.0
    if p.target_norm <= eps or p.base_norm <= eps:
        return math.nan
    return float(np.dot(p.target, p.base) / (p.target_norm * p.base_norm))


# The metrics of each mode, in msprobe's column order: adding a metric is adding its row (and, in tensor mode, its
# function of a TensorPair); the NamedTuples, the CSV's columns and cells, NAN_METRICS follow.
STATISTICS_METRICS = (
    *(Metric(f"{s}_diff", f"{c} diff", "diff") for s, c in (("max", "Max"), ("min", "Min"), ("mean", "Mean"),
                                                             ("norm", "L2norm"))),
    *(Metric(f"{s}_rel", f"{c}RelativeErr", "percent") for s, c in (("max", "Max"), ("min", "Min"),
                                                                     ("mean", "Mean"), ("norm", "Norm"))),
)
TENSOR_METRICS = (
    Metric("cosine", "Cosine", "number", _cosine),
    Metric("euc_dist", "EucDist", "number", lambda p: float(np.linalg.norm(p.delta))),
    Metric("max_abs_err", "MaxAbsErr", "number", lambda p: float(np.max(np.abs(p.delta)))),
    Metric("max_rel_err", "MaxRelativeErr", "number", lambda p: float(np.max(p.rel))),
    Metric("one_thousandth", "One Thousandth Err Ratio", "number", lambda p: float(np.mean(p.rel < 0.001))),
    Metric("five_thousandths", "Five Thousandths Err Ratio", "number", lambda p: float(np.mean(p.rel < 0.005))),
)

StatsDiff = NamedTuple("StatsDiff", [(m.field, float) for m in STATISTICS_METRICS])
StatsDiff.__doc__ = "Statistics mode: TARGET - BASE of each statistic, then each one's relative error as a fraction."
TensorMetrics = NamedTuple("TensorMetrics", [(m.field, float) for m in TENSOR_METRICS])
TensorMetrics.__doc__ = "Tensor mode: msprobe's metrics of two saved tensors (:data:`TENSOR_METRICS`)."

COLUMNS = {
    **{m.field: m.column for m in (*STATISTICS_METRICS, *TENSOR_METRICS)},
    "max": "max", "min": "min", "mean": "mean", "norm": "l2norm",  # Stats: "NPU max", "Bench l2norm"...
}
"""Field of :class:`StatsDiff`, :class:`TensorMetrics` or :class:`~.model.Stats` -> msprobe's column name."""
NAN_METRICS = TensorMetrics(*(math.nan,) * len(TENSOR_METRICS))


def columns_of(kind: type) -> list:
    """The column names of a metrics NamedTuple's fields, in order."""
    return [COLUMNS[name] for name in kind._fields]


def statistics_diffs(target: np.ndarray, base: np.ndarray) -> list:
    """One :class:`StatsDiff` per row of two statistics arrays (rows x 4); equal values give 0, NaN against a
    number gives NaN, and a relative error against a zero base is inf."""
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        same = (target == base) | (np.isnan(target) & np.isnan(base))
        diff = np.where(same, 0.0, target - base)
        rel = np.where(same, 0.0, np.abs(diff) / np.abs(base))
        rel = np.where(~same & (base == 0) & ~np.isnan(target), np.inf, rel)
    return [StatsDiff(*map(float, d), *map(float, r)) for d, r in zip(diff, rel)]


def statistics_error(target: np.ndarray, base: np.ndarray) -> np.ndarray:
    """Each row's agreement error per statistic (rows x 4, see the module docstring); inf when only one side is
    inf/NaN."""
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        same = (target == base) | (np.isnan(target) & np.isnan(base))
        finite = np.isfinite(target) & np.isfinite(base)
        ends = np.abs(np.concatenate([target[:, :2], base[:, :2]], axis=1))
        magnitude = np.where(np.isfinite(ends), ends, 0.0).max(axis=1) if ends.size else np.zeros(0)
        norm_scale = np.fmax(np.abs(target[:, 3]), np.abs(base[:, 3]))
        scale = np.column_stack([magnitude, magnitude, magnitude, norm_scale])
        err = np.abs(target - base) / scale
        err = np.where(same, 0.0, np.where(finite, err, np.inf))
        err = np.where(np.isnan(err), np.inf, err)  # a difference against a zero scale
    return err.reshape(-1, 4)


def tensor_metrics(target: np.ndarray, base: np.ndarray) -> tuple:
    """(:class:`TensorMetrics`, agreement error, note) of two saved tensors."""
    nan = NAN_METRICS
    if target.shape != base.shape:
        return nan, math.inf, "Shape of NPU and bench Tensor do not match."
    if target.size == 0:
        return nan, 0.0, "This is empty data, can not compare."
    t = target.astype(np.float64, copy=False).reshape(-1)
    b = base.astype(np.float64, copy=False).reshape(-1)
    t_bad, b_bad = ~np.isfinite(t), ~np.isfinite(b)
    if t_bad.any() or b_bad.any():
        same_places = np.array_equal(np.isnan(t), np.isnan(b)) and np.array_equal(np.isinf(t), np.isinf(b))
        if not same_places or not np.array_equal(t[np.isinf(t)], b[np.isinf(b)]):
            return nan, math.inf, "The position of inf or nan in NPU and bench Tensor do not match."
        t, b = np.where(t_bad, 0.0, t), np.where(b_bad, 0.0, b)
    delta = t - b
    max_abs = float(np.max(np.abs(delta)))
    scale = max(float(np.max(np.abs(t))), float(np.max(np.abs(b))))
    error = 0.0 if max_abs == 0 else (max_abs / scale if scale > 0 else math.inf)
    with np.errstate(invalid="ignore", divide="ignore"):
        zero = b == 0
        eps = np.finfo(np.float64).eps
        rel = np.abs(np.where(zero, (t + eps) - (b + eps), delta) / np.where(zero, b + eps, b))
        pair = TensorPair(t, b, delta, rel, float(np.linalg.norm(t)), float(np.linalg.norm(b)))
        metrics = TensorMetrics(*(m.compute(pair) for m in TENSOR_METRICS))
    return metrics, error, ""


def leaf_error(target: Optional[Leaf], base: Optional[Leaf], name: Optional[str] = None) -> tuple:
    """(error, reason) of a pair of non-tensor leaves, or of a tensor missing on one side; reason "" = agree.

    ``name`` is the parameter the leaves fill (the reason names it: ``eps 1e-05 vs 2e-05 (BASE vs TARGET)``).
    """
    if target is None or base is None:
        return math.inf, "only in TARGET" if base is None else "only in BASE"
    label = name or target.slot
    if target.kind != base.kind:
        return math.inf, f"{label}: a {_kind(base)} in BASE, a {_kind(target)} in TARGET"
    if target.kind == "scalar":
        same = math.isclose(float(target.value), float(base.value), rel_tol=1e-12, abs_tol=0.0)
        return (0.0, "") if same else (math.inf, f"{label} {base.value!r} vs {target.value!r} (BASE vs TARGET)")
    if target.kind == "other" and target.value != base.value:
        return math.inf, f"{label} {base.value!r} vs {target.value!r} (BASE vs TARGET)"
    return 0.0, ""


def _kind(leaf: Leaf) -> str:
    return {"none": "None", "other": leaf.dtype.strip("<>").replace("class ", "")}.get(leaf.kind, leaf.kind)


@dataclass(frozen=True)
class ReplayError:
    """How far a call's device results are from the golden ones (the worst over its output tensors)."""

    max_abs_err: float
    max_rel_err: float
    err_ratio: float
    norm_err: float
    nonfinite: int

    @classmethod
    def from_dict(cls, entry: dict) -> ReplayError:
        """A ReplayError read back from replay.json."""
        return cls(*(float(entry.get(k, math.nan)) for k in ("max_abs_err", "max_rel_err", "err_ratio",
                                                              "norm_err")), int(entry.get("nonfinite", 0)))

    def worst(self, other: ReplayError) -> ReplayError:
        """The larger of each metric (a call's outputs combined)."""
        return ReplayError(max(self.max_abs_err, other.max_abs_err), max(self.max_rel_err, other.max_rel_err),
                       max(self.err_ratio, other.err_ratio), max(self.norm_err, other.norm_err),
                       self.nonfinite + other.nonfinite)
