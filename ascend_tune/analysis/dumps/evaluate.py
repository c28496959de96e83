"""An op evaluated again from the tensors a dump saved of its inputs (tensor mode): how far its own output is from
what those inputs give, in float64.

With tensors, an op whose inputs already differ between two runs need not be *uncertain* (:mod:`.tolerance`): each
run's output is checked against its own inputs, so a kernel that computes wrongly is told apart from one that
faithfully amplifies what it received (AdamW's ``addcdiv_`` divides by ``sqrt(v)``, about ``|grad|``). Evaluated
here, in numpy: the elementwise ops of optimizer steps and residual paths (:data:`EVALUATORS`); any other op keeps
the statistics' verdict. No torch: the tensors come from :meth:`.model.Dump.load_tensor`.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Optional

import numpy as np

from . import calls
from .model import Dump, Op


def _add(x: Any, y: Any, alpha: Any = 1) -> Any:
    return x + alpha * y


def _sub(x: Any, y: Any, alpha: Any = 1) -> Any:
    return x - alpha * y


EVALUATORS: dict = {
    "add": _add, "add_": _add, "__add__": _add, "__iadd__": _add, "__radd__": _add,
    "sub": _sub, "sub_": _sub, "__sub__": _sub, "__isub__": _sub,
    "mul": np.multiply, "mul_": np.multiply, "__mul__": np.multiply, "__imul__": np.multiply,
    "__rmul__": np.multiply,
    "div": np.divide, "div_": np.divide, "__truediv__": np.divide, "__itruediv__": np.divide,
    "sqrt": np.sqrt, "sqrt_": np.sqrt,
    "addcdiv": lambda x, a, b, value=1: x + value * (a / b),
    "addcdiv_": lambda x, a, b, value=1: x + value * (a / b),
    "addcmul": lambda x, a, b, value=1: x + value * (a * b),
    "addcmul_": lambda x, a, b, value=1: x + value * (a * b),
    "lerp": lambda x, end, weight: x + weight * (end - x),
    "lerp_": lambda x, end, weight: x + weight * (end - x),
}
"""API (the last part of its name) -> its float64 meaning, over positional arguments and keywords."""
_KEYWORDS = {"alpha", "value", "weight", "other"}


def own_error(dump: Dump, op: Op) -> Optional[float]:
    """How far ``op``'s first output is from what its saved inputs give in float64, measured against its magnitude
    (``max |out - f(inputs)| / max |f(inputs)|``); None when the op is not evaluated here or a tensor is missing."""
    api = calls.api_of(op.name)
    func: Optional[Callable] = EVALUATORS.get((api or "").rpartition(".")[2])
    if func is None:
        return None
    args: list = []
    kwargs: dict = {}
    output = None
    for leaf in op.leaves:
        if leaf.role == "output":
            if output is None and leaf.slot in ("output.0", "output"):
                output = leaf
            continue
        value = _value(dump, leaf)
        if value is None:
            return None
        key = leaf.slot.partition(".")[2]
        if key.isdigit():
            args.append(value)
        elif key in _KEYWORDS:
            kwargs[key] = value
        else:
            return None  # a keyword this evaluation does not know (out=, rounding_mode=)
    got = _value(dump, output) if output is not None else None
    if got is None or not isinstance(got, np.ndarray):
        return None
    with np.errstate(all="ignore"):
        try:
            expected = np.asarray(func(*args, **kwargs), dtype=np.float64)
        except (TypeError, ValueError):
            return None
        if expected.shape != got.shape:
            return None
        finite = np.isfinite(expected) & np.isfinite(got)
        if not np.array_equal(np.isfinite(expected), np.isfinite(got)):
            return math.inf
        scale = float(np.max(np.abs(expected[finite]))) if finite.any() else 0.0
        diff = float(np.max(np.abs(got[finite] - expected[finite]))) if finite.any() else 0.0
    return 0.0 if diff == 0 else (diff / scale if scale > 0 else math.inf)


def _value(dump: Dump, leaf: Any) -> Any:
    if leaf.kind == "tensor":
        data = dump.load_tensor(leaf)
        return None if data is None else np.asarray(data, dtype=np.float64)
    if leaf.kind == "scalar":
        return float(leaf.value)
    return None
