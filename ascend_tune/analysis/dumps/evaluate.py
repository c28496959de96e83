"""An op evaluated again from the tensors a dump saved of its inputs (tensor mode): how far each run's own output is
from what its own inputs give, in float64.

Two runs of other precisions (an fp32 reference, a bfloat16 autocast port) differ everywhere by rounding, and an op
whose inputs already differ passes their difference on: across runs, a kernel 2% wrong hides in the drift. Each run
against its own inputs has no drift: its output is the op of what it received, rounded once to its dtype. So every op
whose call the dump holds whole is evaluated again here, by the recorded API itself (``Functional.linear`` is
``torch.nn.functional.linear``, ``Tensor.add_`` the method) on float64 copies of the saved tensors, its floating
inputs first rounded to the output's dtype where that is coarser (autocast casts the inputs of a lower precision op),
and its first output compared with the result: ``max |out - f(inputs)| / max |f(inputs)|``. What a correct kernel may
differ by (:func:`allowed`): :data:`ROUNDINGS` roundings of its output's dtype, and for a matmul-like op or a
reduction its kernel tolerance (the order of its fp32 sums, :func:`.tolerance.kernel_tolerance`).

An op is not evaluated when its result is not a function of its recorded arguments (random ops, ops that read a
device or a state the dump does not hold, in-place ops recorded after they ran by an older dump) or when torch cannot
run it on the CPU; without torch (a numpy-only install reading ``.npy`` dumps) only :data:`EVALUATORS`' elementwise
ops are. torch is imported only here and only in tensor mode, as :meth:`.model.Dump.load_tensor` does for ``.pt``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Optional

import numpy as np

from . import calls, tolerance
from .model import Dump, Op

ROUNDINGS = 2.0  # roundings of the output's dtype a correct op may be off by (one, rounding to nearest: 0.5)

# never a function of the recorded arguments alone (random, reading state, writing into no output)
_NOT_EVALUATED = frozenset({
    "dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout", "feature_alpha_dropout", "native_dropout",
    "rrelu", "rrelu_", "bernoulli", "bernoulli_", "multinomial", "normal", "normal_", "rand", "rand_like", "randn",
    "randn_like", "randint", "randint_like", "randperm", "uniform_", "exponential_", "random_", "cauchy_",
    "geometric_", "log_normal_", "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "to",
    "__setitem__", "numpy", "item", "tolist", "cpu", "cuda", "npu", "contiguous", "copy_", "set_", "data_ptr",
    "batch_norm",  # updates running statistics in training: its output is a function of them only in eval
})
_FAMILIES = ("Functional", "Torch", "Tensor")


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
"""Without torch: API (the last part of its name) -> its float64 meaning, over positional arguments and keywords."""
_KEYWORDS = {"alpha", "value", "weight", "other"}


@dataclass(frozen=True)
class OwnError:
    """One run's output of an op against what its own inputs give."""

    error: float  # max |out - f(inputs)| / max |f(inputs)|
    allowed: float  # what a correct kernel of its dtype may be off by (:func:`allowed`)
    dtype: str  # the output's
    how: str = "tensors"  # what it was evaluated from: "tensors", or the statistics check that gave it

    @property
    def beyond(self) -> bool:
        return self.error > self.allowed


def own_error(dump: Dump, op: Op) -> Optional[OwnError]:
    """``op``'s first output against what its saved inputs give in float64 (see the module docstring); None when
    the op is not evaluated here or a tensor is missing."""
    api = calls.api_of(op.name)
    if api is None:
        return None
    name = api.rpartition(".")[2]
    if name in _NOT_EVALUATED or api.partition(".")[0] not in _FAMILIES:
        return None
    if calls.mutated_slots(api) and not dump.inputs_as_received:
        return None  # an older dump recorded an in-place op's arguments after it wrote into them
    output = next((leaf for leaf in op.outputs if leaf.slot in ("output.0", "output")), None)
    if output is None or output.kind != "tensor" or not tolerance.is_float(output.dtype):
        return None
    got = dump.load_tensor(output)
    if got is None:
        return None
    expected = _by_torch(dump, op, api, output) if _torch() is not None else _by_numpy(dump, op, name)
    if expected is None or expected.shape != got.shape:
        return None
    limit = tolerance.kernel_tolerance(api, allowed(output.dtype), "float32", _length(name, op, output))
    return OwnError(_distance(np.asarray(got, dtype=np.float64), expected), limit,
                    tolerance.dtype_name(output.dtype))


def _length(name: str, op: Op, output: Any) -> int:
    """How many products or terms one output element sums (a matmul's K, a reduction's input over output size)."""
    tensors = [leaf for leaf in op.inputs if leaf.kind == "tensor" and leaf.shape]
    if name in tolerance.MATMUL:
        return int(tensors[0].shape[-1]) if tensors else 0
    if name in tolerance.REDUCTIONS and tensors:
        out = math.prod(output.shape) if output.shape else 1
        return max(math.prod(leaf.shape) for leaf in tensors) // max(out, 1)
    return 0


def allowed(dtype: str) -> float:
    """What a correct elementwise op's output of ``dtype`` may be off from its float64 value: :data:`ROUNDINGS`
    roundings of ``dtype``, of 8 ulp of float32 at the least (a float32 kernel's transcendental functions are a few
    ulp off); a matmul-like op or a reduction widens it by its sums (:func:`.tolerance.kernel_tolerance`)."""
    u32 = tolerance.UNIT_ROUNDOFF["float32"]
    rounding = max(tolerance.UNIT_ROUNDOFF.get(tolerance.dtype_name(dtype), u32), 8 * u32)
    return ROUNDINGS * rounding


def _distance(got: np.ndarray, expected: np.ndarray) -> float:
    with np.errstate(all="ignore"):
        if not np.array_equal(np.isfinite(expected), np.isfinite(got)):
            return math.inf
        finite = np.isfinite(expected)
        if not finite.any():
            return 0.0
        scale = float(np.max(np.abs(expected[finite])))
        diff = float(np.max(np.abs(got[finite] - expected[finite])))
    return 0.0 if diff == 0 else (diff / scale if scale > 0 else math.inf)


def _torch() -> Any:
    try:
        import torch
    except ImportError:  # a numpy-only install: the elementwise evaluators only
        return None
    return torch


def _function(api: str) -> Optional[Callable]:
    torch = _torch()
    family, _, name = api.partition(".")
    home = {"Functional": torch.nn.functional, "Torch": torch, "Tensor": torch.Tensor}[family]
    func = getattr(home, name, None)
    return func if callable(func) else None


def _by_torch(dump: Dump, op: Op, api: str, output: Any) -> Optional[np.ndarray]:
    torch = _torch()
    func = _function(api)
    if func is None:
        return None
    coarse = torch.bfloat16 if tolerance.dtype_name(output.dtype) == "bfloat16" else (
        torch.float16 if tolerance.dtype_name(output.dtype) == "float16" else None)

    def value(leaf: Any) -> Any:
        if leaf.kind == "tensor":
            data = dump.load_tensor(leaf)
            if data is None:
                raise LookupError(leaf.slot)
            t = torch.from_numpy(np.array(data))
            if t.is_floating_point():
                if coarse is not None and tolerance.UNIT_ROUNDOFF.get(tolerance.dtype_name(leaf.dtype), 1.0) < \
                        tolerance.UNIT_ROUNDOFF[tolerance.dtype_name(output.dtype)]:
                    t = t.to(coarse)  # autocast cast this input to the op's precision
                t = t.to(torch.float64)
            return t
        if leaf.kind == "none":
            return None
        return leaf.value

    args: dict = {}
    kwargs: dict = {}
    try:
        for leaf in op.inputs:
            head, _, rest = leaf.slot.partition(".")
            key, _, inner = rest.partition(".")
            if head != "input" or not key:
                return None
            v = value(leaf)
            place = args if key.isdigit() else kwargs
            slot = int(key) if key.isdigit() else key
            if inner:  # one element of a list argument (torch.cat's tensors)
                if not inner.isdigit():
                    return None
                place.setdefault(slot, {})[int(inner)] = v
            else:
                place[slot] = v
    except LookupError:
        return None
    positional = [_listed(args[i]) for i in range(len(args))] if sorted(args) == list(range(len(args))) else None
    if positional is None:
        return None
    keywords = {k: _listed(v) for k, v in kwargs.items()}
    try:
        with torch.no_grad():
            result = func(*positional, **keywords)
    except Exception:  # noqa: BLE001 - an op torch cannot run from what the dump holds is not evaluated
        return None
    if isinstance(result, (tuple, list)):
        result = result[0] if result else None
    if not isinstance(result, torch.Tensor) or not result.is_floating_point():
        return None
    return result.detach().to(torch.float64).numpy()


def _listed(value: Any) -> Any:
    """A list argument gathered from its element slots (``{0: a, 1: b}`` -> ``[a, b]``), else ``value``."""
    if isinstance(value, dict):
        return [value[i] for i in sorted(value)]
    return value


def _by_numpy(dump: Dump, op: Op, name: str) -> Optional[np.ndarray]:
    func: Optional[Callable] = EVALUATORS.get(name)
    if func is None:
        return None
    args: list = []
    kwargs: dict = {}
    for leaf in op.inputs:
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
    with np.errstate(all="ignore"):
        try:
            return np.asarray(func(*args, **kwargs), dtype=np.float64)
        except (TypeError, ValueError):
            return None


def _value(dump: Dump, leaf: Any) -> Any:
    if leaf.kind == "tensor":
        data = dump.load_tensor(leaf)
        return None if data is None else np.asarray(data, dtype=np.float64)
    if leaf.kind == "scalar":
        return float(leaf.value)
    return None
