"""What one run's statistics prove about its own op (statistics mode): a monotone elementwise op's output ends are
the op of its input's ends.

Across two runs of other precisions every tensor differs by rounding, and what an op's inputs carried hides a kernel
that is 2% wrong. Within one run there is no drift: ``relu``, ``gelu``, ``tanh``, ``exp`` ... are monotone, so the
output's Max is ``f(input's Max)`` (and its Min ``f(input's Min)`` where ``f`` is monotone over the whole line),
rounded once to the output's dtype. :func:`own_ends` checks that of each run on its own, within
:func:`.evaluate.allowed` (two roundings of the output's dtype) of the output's magnitude. Ops that are monotone only
above a point (``gelu``, ``silu``: their minimum lies below zero) are checked on the Max alone, when the input's Max
is at or above that point; a decreasing op (``neg``) swaps the ends.
"""

from __future__ import annotations

import math
from typing import Callable, Optional

from . import calls, evaluate, tolerance
from .model import Dump, Op


def _gelu(x: float, approximate: str = "none") -> float:
    if approximate == "tanh":
        return 0.5 * x * (1 + math.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    return 0.5 * x * (1 + math.erf(x / math.sqrt(2)))


def _sigmoid(x: float) -> float:
    return 1 / (1 + math.exp(-x)) if x >= 0 else math.exp(x) / (1 + math.exp(x))


def _silu(x: float) -> float:
    return x * _sigmoid(x)


# API (the last part of its name) -> (f, how): "increasing" (both ends), "decreasing" (the ends swap) or the least x
# above which f is increasing and every lower x gives no more than f there (the Max alone is checked)
MONOTONE: dict = {
    "relu": (lambda x: max(x, 0.0), "increasing"), "relu_": (lambda x: max(x, 0.0), "increasing"),
    "gelu": (_gelu, 0.0), "silu": (_silu, 0.0), "silu_": (_silu, 0.0),
    "sigmoid": (_sigmoid, "increasing"), "sigmoid_": (_sigmoid, "increasing"),
    "tanh": (math.tanh, "increasing"), "tanh_": (math.tanh, "increasing"),
    "exp": (math.exp, "increasing"), "exp_": (math.exp, "increasing"),
    "neg": (lambda x: -x, "decreasing"), "neg_": (lambda x: -x, "decreasing"),
    "__neg__": (lambda x: -x, "decreasing"),
}


def own_ends(dump: Dump, op: Op) -> Optional[evaluate.OwnError]:
    """How far ``op``'s output ends are from ``f`` of its input's ends (see the module docstring), as a share of the
    output's magnitude; None when the op is not one of :data:`MONOTONE` or a statistic is missing."""
    api = calls.api_of(op.name)
    entry = MONOTONE.get((api or "").rpartition(".")[2])
    if entry is None or (calls.mutated_slots(api) and not dump.inputs_as_received):
        return None
    func: Callable = entry[0]
    how = entry[1]
    tensors = [leaf for leaf in op.inputs if leaf.kind == "tensor"]
    out = next((leaf for leaf in op.outputs if leaf.slot in ("output.0", "output")), None)
    if len(tensors) != 1 or out is None or out.kind != "tensor" or not (tensors[0].has_stats and out.has_stats):
        return None
    if not (tolerance.is_float(out.dtype) and tolerance.is_float(tensors[0].dtype)):
        return None
    options = {leaf.slot.partition(".")[2]: leaf.value for leaf in op.inputs if leaf.kind != "tensor"}
    if set(options) - {"approximate", "inplace"}:
        return None  # an argument this check does not model (leaky_relu's slope, an out=)
    kwargs = {"approximate": str(options["approximate"])} if "approximate" in options else {}
    high, low = float(tensors[0].stats.max), float(tensors[0].stats.min)
    got_high, got_low = float(out.stats.max), float(out.stats.min)
    if not all(math.isfinite(v) for v in (high, low, got_high, got_low)):
        return None
    try:
        if how == "increasing":
            pairs = [(func(high, **kwargs), got_high), (func(low, **kwargs), got_low)]
        elif how == "decreasing":
            pairs = [(func(low, **kwargs), got_high), (func(high, **kwargs), got_low)]
        elif high >= how:
            pairs = [(func(high, **kwargs), got_high)]
        else:
            return None
    except (OverflowError, ValueError):
        return None
    scale = max(abs(got_high), abs(got_low), *(abs(e) for e, _ in pairs))
    if not scale:
        return None
    error = max(abs(got - expected) for expected, got in pairs) / scale
    ends = "Max" if len(pairs) == 1 else "Max and Min"
    check = f"its output's {ends} against {api.rpartition('.')[2]} of its input's"
    return evaluate.OwnError(error, evaluate.allowed(out.dtype), tolerance.dtype_name(out.dtype), check)
