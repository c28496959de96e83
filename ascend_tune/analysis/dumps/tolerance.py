"""How far two correct runs may differ: THE tolerances of a dump comparison, per dtype, op family and size.

**Agreement of one tensor** (the error is measured against the tensor's magnitude, see :mod:`.differences`): within the
tolerance of its dtype (:data:`TOLERANCE`: float64 1e-10, float32 1e-5, float16 2e-3, bfloat16 2e-2; integers and
bools exactly), the coarser of the two runs' dtypes. Mean and Norm are reductions two engines sum in different orders:
:func:`reduction_tolerance` widens them by ``8 * u * sqrt(n)`` (u the accumulating dtype's unit roundoff, n the
element count), capped for fp32 at 5e-4 so a 1e-3 drift is still caught.

**Right-but-different kernels** (:func:`kernel_tolerance`): a GPU -> NPU port swaps kernels. A matmul-like op (linear,
matmul, bmm, conv, SDPA) sums ``K`` products per output element, in an order its kernel chooses; its output may
differ by ``2 * u * K`` of its magnitude (the worst case of a blocked sum; u of fp32, the accumulator of every half
precision kernel), no less than its dtype's tolerance, capped like a reduction; a reduction op (sum, mean, norm,
the losses: :data:`REDUCTIONS`) the same with K its input's size over its output's. Elementwise ops stay at their
dtype's tolerance.

**Differences an op received** (:func:`explained`): an op whose inputs already differ (within their own tolerance)
passes the difference on. Its output is judged against what its inputs explain: ``kernel tolerance + GAIN * carried``,
``carried`` = the largest input error, counted both relative to its own tensor and converted to the output's
magnitude (``error * |input| / |output|``; a product's relative errors add, a sum's absolute ones do). GAIN = 4 covers
statistics that under-read an element's difference (a Max moves less than the element that moved most); an input
of a coarser dtype than the output carries at least one of its roundings (:func:`unseen`). Ops that
divide, normalise or take a sign (:data:`AMPLIFYING`: AdamW's ``addcdiv_`` divides by ``sqrt(v)``, which is about
``|grad|``, so gradients that agree to 1e-7 give updates that differ by 1e-4) amplify without a bound statistics can
give: beyond their kernel tolerance, with inputs that differ, they are **uncertain**, not a divergence; so is a
backward whose gradient a comparison routes (:data:`SELECTING`: ReLU, max pooling). A sum of one input's terms (a
reduction, a weight's or a bias's gradient, :func:`summed_terms`) carries up to all its terms' errors. Two
floating dtypes compare by value within the coarser one (:func:`is_float`, :func:`coarser`). An op whose inputs
agree exactly is held to its kernel tolerance alone: a fault in the op itself is always named.

**A replayed call** (task="replay", :mod:`.replay`) is judged against float64 by :data:`STANDARDS`, per dtype: the
rounding of a correct kernel, one to two orders of magnitude wide.

Measured margins: docs/precision.md ("Whole steps and right-but-different kernels").
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Optional

# one set of dtype spellings: torch's (``torch.float32``), numpy's and the aliases torch keeps (``half``, ``double``)
_ALIASES = {"half": "float16", "float": "float32", "double": "float64", "complex32": "float16",
            "complex64": "float32", "complex128": "float64"}

TOLERANCE = {"float64": 1e-10, "float32": 1e-5, "float16": 2e-3, "bfloat16": 2e-2}
_LOW_PRECISION = 1e-1  # float8 and other narrow float types
UNIT_ROUNDOFF = {"float64": 2.0 ** -53, "float32": 2.0 ** -24, "float16": 2.0 ** -11, "bfloat16": 2.0 ** -8}
_REDUCTION_SPREAD = 8.0  # roundings of noise per sqrt(n) allowed (0.9 measured between the two engines)
_KERNEL_SPREAD = 2.0  # roundings per summed product a blocked kernel may differ by
_CAP = 5e-4  # a 1e-3 drift of a reduction or a matmul stays a divergence
GAIN = 4.0

MATMUL = frozenset({"linear", "matmul", "mm", "bmm", "addmm", "baddbmm", "__matmul__", "__rmatmul__", "einsum",
                    "conv1d", "conv2d", "conv3d", "scaled_dot_product_attention", "bilinear"})
"""APIs whose output elements are sums of K products (K: the last dimension of their first input)."""
REDUCTIONS = frozenset({"sum", "mean", "nansum", "nanmean", "cumsum", "cumprod", "prod", "norm", "vector_norm",
                        "cross_entropy", "nll_loss", "mse_loss", "l1_loss", "smooth_l1_loss", "binary_cross_entropy",
                        "binary_cross_entropy_with_logits", "kl_div", "_foreach_norm", "logsumexp"})
"""APIs whose output elements sum many input elements (K: the input's size over the output's)."""
AMPLIFYING = frozenset({
    "div", "div_", "__truediv__", "__itruediv__", "__rtruediv__", "true_divide", "true_divide_", "addcdiv",
    "addcdiv_", "_foreach_addcdiv_", "_foreach_div", "_foreach_div_", "reciprocal", "reciprocal_", "rsqrt",
    "rsqrt_", "sqrt", "sqrt_", "_foreach_sqrt", "_foreach_sqrt_", "sign", "sgn", "log", "log_", "pow", "__pow__",
    "__rpow__", "layer_norm", "rms_norm", "group_norm", "batch_norm", "instance_norm", "normalize", "softmax",
    "log_softmax", "_softmax", "clip_grad_norm_", "_foreach_norm", "norm", "vector_norm", "std", "var",
    "_foreach_addcdiv", "_foreach_reciprocal_", "_foreach_rsqrt_",
})
"""APIs that divide, normalise or take a sign of what they received (see the module docstring)."""


def dtype_name(dtype: str) -> str:
    """``torch.float32`` / ``float32`` / ``float`` / ``complex64`` -> the canonical float name (``float32``)."""
    name = str(dtype).rpartition(".")[2]
    return _ALIASES.get(name, name)


def is_float(dtype: str) -> bool:
    """Whether ``dtype`` is a floating (or complex) dtype: two of them compare by value, within the coarser one."""
    raw = str(dtype).rpartition(".")[2]
    return dtype_name(raw) in TOLERANCE or raw.startswith(("float", "complex", "half", "double", "bfloat"))


def coarser(dtype_a: str, dtype_b: str) -> str:
    """The less precise of two floating dtypes, by name (``bfloat16`` of ``torch.float32`` and ``torch.bfloat16``)."""
    a, b = dtype_name(dtype_a), dtype_name(dtype_b)
    return a if _tolerance(a, None) >= _tolerance(b, None) else b


def tolerance(dtype_a: str, dtype_b: str, override: Optional[float] = None) -> float:
    """The agreement tolerance of a pair of dtypes: the coarser one's (``override`` for every float dtype)."""
    return max(_tolerance(dtype_a, override), _tolerance(dtype_b, override))


def _tolerance(dtype: str, override: Optional[float]) -> float:
    raw = str(dtype).rpartition(".")[2]
    name = dtype_name(raw)
    if name in TOLERANCE or raw.startswith(("float", "complex")):
        if override is not None:
            return override
        return TOLERANCE.get(name, _LOW_PRECISION)
    return 0.0


def _roundoff(dtype: str) -> float:
    return UNIT_ROUNDOFF["float64"] if dtype_name(dtype) == "float64" else UNIT_ROUNDOFF["float32"]


def reduction_tolerance(tolerance: float, dtype: str, numel: int, override: Optional[float] = None) -> float:
    """The tolerance of a Mean or Norm: the dtype's ``tolerance`` widened by the reduction noise of ``numel``
    elements; ``override`` (``--rtol``) applies as given."""
    if override is not None or not tolerance or not numel:
        return tolerance
    return max(tolerance, min(_REDUCTION_SPREAD * _roundoff(dtype) * math.sqrt(numel), _CAP))


def kernel_tolerance(api: Optional[str], tolerance: float, dtype: str, length: int,
                     override: Optional[float] = None) -> float:
    """The tolerance of an output of ``api`` (``Functional.linear``): a matmul-like op's or a reduction's widened by
    its reduction ``length`` K, any other op's ``tolerance`` as it is (elementwise ops stay tight)."""
    if override is not None or not tolerance or not length or _short(api) not in MATMUL | REDUCTIONS:
        return tolerance
    return max(tolerance, min(_KERNEL_SPREAD * _roundoff(dtype) * length, _CAP))


SELECTING = frozenset({
    "relu", "relu_", "relu6", "hardtanh", "hardtanh_", "threshold", "threshold_", "leaky_relu", "leaky_relu_",
    "max_pool1d", "max_pool2d", "max_pool3d", "adaptive_max_pool1d", "adaptive_max_pool2d", "adaptive_max_pool3d",
    "max_pool2d_with_indices", "clamp", "clamp_", "clip", "clip_", "abs", "abs_", "max", "min", "maximum",
    "minimum", "amax", "amin", "topk", "sort", "where", "masked_fill", "masked_fill_",
})
"""APIs whose gradient goes where a comparison sends it (a threshold, a max): in a backward, inputs that differ by
a rounding can route an element's gradient elsewhere (a ReLU's input near 0 in bfloat16 and in float32)."""


def amplifies(api: Optional[str], backward: bool = False) -> bool:
    """Whether ``api`` divides, normalises or takes a sign (:data:`AMPLIFYING`); of a backward, also whether its
    gradient is routed by a comparison (:data:`SELECTING`)."""
    return _short(api) in AMPLIFYING or (backward and _short(api) in SELECTING)


def carried(inputs: list, output_magnitude: float, terms: int = 0) -> float:
    """The error an op's inputs carry into its output: ``inputs`` as (error, magnitude) pairs (see the module
    docstring), an output element summing ``terms`` of them (a reduction, a weight's gradient) carrying up to the
    sum of their errors, ``terms`` of one (a sum that cancels to ~0, the bias of a convolution before a BatchNorm,
    is all rounding: only its terms' size bounds it); 0 when every input agrees exactly."""
    relative = sum(e for e, _ in inputs)
    if not output_magnitude or not math.isfinite(output_magnitude):
        return relative
    absolute = sum(e * m for e, m in inputs if math.isfinite(m)) / output_magnitude
    return max(relative, absolute * max(terms, 1))


def is_reduction(api: Optional[str]) -> bool:
    """Whether ``api``'s output elements each sum many input elements (:data:`REDUCTIONS`)."""
    return _short(api) in REDUCTIONS


def summed_terms(api: Optional[str], backward: bool, input_shapes: list, output_shape: Optional[tuple],
                 first_shape: Optional[tuple]) -> int:
    """How many products or terms one element of an output sums: a forward matmul-like op's K (the last dimension
    of its first input, ``first_shape``); a reduction's output, or a backward's gradient that is smaller than the
    gradient it received (a weight's, summed over the batch), the ratio of their sizes; else 0."""
    if backward or _short(api) in REDUCTIONS:
        sizes = [math.prod(shape) for shape in input_shapes]
        out = math.prod(output_shape) if output_shape is not None else 0
        return max(sizes) // out if sizes and out and max(sizes) > out else 0
    return int(first_shape[-1]) if first_shape else 0


def unseen(error: float, input_dtype: str, output_dtype: str) -> float:
    """An input's error as an op's output can carry it: at least one rounding of the input's dtype when that is
    coarser than the output's (a bfloat16 result added into a float32 residual under autocast): two correct kernels
    may round each half precision element either way, and its statistics (msprobe sums them in that dtype) need
    not show it."""
    rounding = UNIT_ROUNDOFF.get(dtype_name(input_dtype), 0.0)
    if rounding > UNIT_ROUNDOFF.get(dtype_name(output_dtype), rounding):
        return max(error, rounding)
    return error


def explained(error: float, kernel: float, carried_error: float) -> bool:
    """Whether an output ``error`` is within its ``kernel`` tolerance plus what its inputs carried (GAIN times)."""
    return error <= kernel + GAIN * carried_error


# --- the replay's standards: a call replayed on the CPU in float64, judged per dtype (analysis/dumps/replay.py) ---

@dataclass(frozen=True)
class Standard:
    """The limits one dtype's results are judged by (see the module docstring)."""

    dtype: str
    rtol: float
    max_err_ratio: float
    max_norm_err: float

    def text(self) -> str:
        """One CSV cell: ``float32: rtol 0.0001, err_ratio <= 0.001, norm_err <= 0.0001``."""
        return (f"{self.dtype}: rtol {self.rtol:g}, err_ratio <= {self.max_err_ratio:g}, "
                f"norm_err <= {self.max_norm_err:g}")


# unit roundoff u: float64 2^-53, float32 2^-24, float16 2^-11, bfloat16 2^-8
STANDARDS = {
    "float64": Standard("float64", 1e-9, 1e-3, 1e-10),
    "float32": Standard("float32", 1e-4, 1e-3, 1e-4),
    "float16": Standard("float16", 2.0 ** -7, 1e-2, 2.0 ** -8),
    "bfloat16": Standard("bfloat16", 2.0 ** -4, 1e-2, 2.0 ** -5),
    "exact": Standard("exact", 0.0, 0.0, 0.0),  # integer and bool results
}
_PRECISION_ORDER = ("bfloat16", "float16", "float32", "float64")


def standard_for(dtypes: Iterable[str]) -> Standard:
    """The standard of the least precise floating dtype among ``dtypes``; ``exact`` when none is floating."""
    names = {dtype_name(d) for d in dtypes}
    for name in _PRECISION_ORDER:
        if name in names:
            return STANDARDS[name]
    return STANDARDS["exact"]


def _short(api: Optional[str]) -> str:
    return (api or "").rpartition(".")[2]
