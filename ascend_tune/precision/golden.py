"""The golden side of a replayed call: its arguments copied to the CPU in float64, why a call cannot be replayed,
and how far the device's result is from the golden one.

Copies: a floating tensor becomes a float64 CPU copy (complex: complex128), an integer or bool tensor a CPU copy
of the same dtype, a floating ``torch.dtype`` argument ``torch.float64`` (``softmax(x, dtype=torch.float32)`` is
computed in float64 too: a golden value in float32 would not be golden), a device argument the CPU; everything
else is passed as it was. The same tensor passed twice is copied once (``x * x``, ``x.add_(x)``).
The error's definition and the verdict rule are :mod:`ascend_tune.analysis.dumps.replay`'s; :func:`measure`
computes it in torch (the analysis layer reads files and imports no torch).
"""

from __future__ import annotations

import math
import re
from typing import Any, Optional

import numpy as np
import torch

from ..analysis.dumps.differences import ReplayError
from ..analysis.dumps.tolerance import Standard, standard_for
from . import measure_kernel

MAX_DEPTH = 16
CPU = torch.device("cpu")
_FLOAT = {torch.float16, torch.bfloat16, torch.float32, torch.float64}
_COMPLEX = {torch.complex32, torch.complex64, torch.complex128}
_DEVICE_TEXT = re.compile(r"^[a-z_]+[a-z0-9_]*(:\d+)?$")
_PLAIN = (bool, int, float, str, type(None))

_RANDOM = frozenset(
    "Functional.dropout Functional.alpha_dropout Functional.dropout1d Functional.dropout2d Functional.dropout3d "
    "Functional.feature_alpha_dropout Functional.rrelu Functional.rrelu_ Functional.gumbel_softmax Torch.dropout "
    "Torch.dropout_ Torch.alpha_dropout Torch.alpha_dropout_ Torch.feature_alpha_dropout "
    "Torch.feature_alpha_dropout_ Torch.feature_dropout Torch.feature_dropout_ Torch.bernoulli Torch.multinomial "
    "Torch.normal Torch.poisson Torch.rand Torch.rand_like Torch.randn Torch.randn_like Torch.randint "
    "Torch.randint_like Torch.randperm Torch.binomial Torch.rrelu Torch.rrelu_ Torch.native_dropout "
    "Tensor.bernoulli Tensor.bernoulli_ Tensor.cauchy_ Tensor.exponential_ Tensor.geometric_ Tensor.log_normal_ "
    "Tensor.normal_ Tensor.random_ Tensor.uniform_ Tensor.multinomial".split()
)
# dropout-like calls are deterministic when they drop nothing: (name of p, position of p, name of the training flag,
# position of the flag, the flag's default)
_DROPOUT_ARGS = {
    "Functional.dropout": ("p", 1, "training", 2, True), "Functional.alpha_dropout": ("p", 1, "training", 2, False),
    "Functional.dropout1d": ("p", 1, "training", 2, True), "Functional.dropout2d": ("p", 1, "training", 2, True),
    "Functional.dropout3d": ("p", 1, "training", 2, True),
    "Functional.feature_alpha_dropout": ("p", 1, "training", 2, False),
    "Functional.rrelu": (None, None, "training", 3, False), "Functional.rrelu_": (None, None, "training", 3, False),
    "Torch.dropout": ("p", 1, "train", 2, True), "Torch.alpha_dropout": ("p", 1, "train", 2, True),
    "Torch.feature_alpha_dropout": ("p", 1, "train", 2, True), "Torch.feature_dropout": ("p", 1, "train", 2, True),
}
_ATTENTION_DROPOUT = {"Functional.scaled_dot_product_attention": ("dropout_p", 4)}
# sorting ops whose index outputs may break ties either way
TIE_BREAKING = frozenset("sort argsort topk kthvalue mode median nanmedian max min cummax cummin argmax argmin "
                         "msort".split())


class Unreplayable(Exception):
    """A call the CPU cannot replay meaningfully; the message is the reason written to replay.csv."""


def is_inplace(name: str, kwargs: dict) -> bool:
    """Whether the call writes into its first argument (``add_``, ``__iadd__``, ``__setitem__``, ``inplace=True``)."""
    method = name.rpartition(".")[2]
    if method.endswith("_") and not method.startswith("__"):
        return True
    if method == "__setitem__" or (method.startswith("__i") and method.endswith("__")):
        return True
    return kwargs.get("inplace") is True


def skip_reason(name: str, args: tuple, kwargs: dict) -> Optional[str]:
    """Why the call ``name`` (its base name, ``Functional.gelu``) is not replayed, or None when it is."""
    if name.startswith("Distributed."):
        return "collective: its result depends on the other ranks"
    if name in _RANDOM and not _drops_nothing(name, args, kwargs):
        return "random: the device's generator state is not reproduced on the CPU"
    if name in _ATTENTION_DROPOUT:
        key, pos = _ATTENTION_DROPOUT[name]
        if _arg(args, kwargs, key, pos, 0.0) not in (0, 0.0):
            return "random: attention dropout, the device's generator state is not reproduced on the CPU"
    if any(t._is_view() for t in written_by(name, args, kwargs)):
        return "in-place on a view: it writes through to the tensor it views"
    return None


def written_by(name: str, args: tuple, kwargs: dict) -> list:
    """The tensors the call ``name`` (its base name) writes into: an in-place call's first argument, ``out=``."""
    written = []
    if is_inplace(name, kwargs) and args and isinstance(args[0], torch.Tensor):
        written.append(args[0])
    out = kwargs.get("out")
    if out is not None:
        written += [t for t in (out if isinstance(out, (list, tuple)) else [out]) if isinstance(t, torch.Tensor)]
    return written


def _drops_nothing(name: str, args: tuple, kwargs: dict) -> bool:
    spec = _DROPOUT_ARGS.get(name)
    if spec is None:
        return False
    p_name, p_pos, flag_name, flag_pos, flag_default = spec
    if _arg(args, kwargs, flag_name, flag_pos, flag_default) is False:
        return True
    return p_name is not None and _arg(args, kwargs, p_name, p_pos, 0.5) in (0, 0.0)


def _arg(args: tuple, kwargs: dict, key: str, pos: int, default: Any) -> Any:
    if key in kwargs:
        return kwargs[key]
    return args[pos] if len(args) > pos else default


class GoldenCopy:
    """Copies a call's arguments to the CPU in float64 (see the module docstring); :attr:`tensors` holds each
    distinct tensor's copy, in the order first met."""

    def __init__(self) -> None:
        self._memo: dict = {}
        self.tensors: list = []

    def call_args(self, func: Any, args: tuple, kwargs: dict) -> tuple:
        """``(args, kwargs)`` for the CPU replay of ``func(*args, **kwargs)``."""
        gargs = tuple(self.copy(a) for a in args)
        gkwargs = {k: self.copy(v) for k, v in kwargs.items()}
        if "device" in gkwargs and gkwargs["device"] is not None:
            gkwargs["device"] = CPU
        if gkwargs.get("pin_memory"):
            gkwargs["pin_memory"] = False
        if func is torch.Tensor.to:  # x.to("npu:0"): a device named by a string
            gargs = tuple("cpu" if isinstance(a, str) and _DEVICE_TEXT.match(a) else a for a in gargs)
        return gargs, gkwargs

    def leaves(self, tensors: list) -> list:
        """The copies of the device tensors ``tensors`` (arguments already copied), made to require grad: what a
        backward replay differentiates by."""
        out = []
        for tensor in tensors:
            copy = self._memo[id(tensor)]
            if copy.is_floating_point():
                copy.requires_grad_(True)
            out.append(copy)
        return out

    def copy(self, value: Any, depth: int = 0) -> Any:
        """One argument's golden form."""
        if isinstance(value, torch.Tensor):
            return self._tensor(value)
        if isinstance(value, _PLAIN):
            return value
        if isinstance(value, torch.dtype):
            if value in _FLOAT:
                return torch.float64
            return torch.complex128 if value in _COMPLEX else value
        if isinstance(value, torch.device):
            return CPU
        if depth > MAX_DEPTH:
            raise Unreplayable("arguments nested too deep to copy")
        if isinstance(value, list):
            return [self.copy(v, depth + 1) for v in value]
        if isinstance(value, tuple):
            items = [self.copy(v, depth + 1) for v in value]
            return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
        if isinstance(value, dict):
            return {k: self.copy(v, depth + 1) for k, v in value.items()}
        return value

    @staticmethod
    def refusal(tensor: torch.Tensor) -> Optional[str]:
        """Why ``tensor`` is not copied (the call is then not replayed), or None."""
        if type(tensor) not in (torch.Tensor, torch.nn.Parameter) or tensor.layout != torch.strided:
            return f"a {type(tensor).__name__} argument ({tensor.layout}): only dense tensors are copied"
        if tensor.device.type == "meta":
            return "a meta tensor argument has no values"
        return None

    def _tensor(self, tensor: torch.Tensor) -> torch.Tensor:
        known = self._memo.get(id(tensor))
        if known is not None:
            return known
        why = self.refusal(tensor)
        if why is not None:
            raise Unreplayable(why)
        dtype = tensor.dtype
        target = torch.float64 if dtype in _FLOAT else torch.complex128 if dtype in _COMPLEX else dtype
        copy = tensor.detach().to(device=CPU, dtype=target, copy=True)
        self._memo[id(tensor)] = copy
        self.tensors.append(copy)
        return copy


def run_on_cpu(func: Any, args: tuple, kwargs: dict) -> Any:
    """``func`` on the golden copies, CPU autocast off (it would compute the golden value in bfloat16)."""
    if _cpu_autocast_on():
        with torch.autocast("cpu", enabled=False):
            return func(*args, **kwargs)
    return func(*args, **kwargs)


def _cpu_autocast_on() -> bool:
    try:
        return torch.is_autocast_enabled("cpu")  # a device type: torch 2.4
    except TypeError:
        return torch.is_autocast_cpu_enabled()  # before: one function per device


def failure(exc: BaseException, kernel: bool = True) -> str:
    """The reason replay.csv gives for a replay that raised ``exc`` (``kernel``: it raised in the golden call,
    where a missing float64 kernel is named as such)."""
    text = str(exc)
    lines = text.strip().splitlines()
    summary = f"{type(exc).__name__}: {lines[0] if lines else ''}"[:200]
    if kernel and "not implemented for" in text and ("'Double'" in text or "'ComplexDouble'" in text):
        return "no float64 CPU kernel: " + summary
    return "the CPU replay failed: " + summary


EXACT = ReplayError(0.0, 0.0, 0.0, 0.0, 0)  # a result equal to its golden twin


def implied(name: str, kwargs: dict, tensors: list, results: list) -> bool:
    """Whether the call ``name`` (its base name) returned its arguments' own values, rearranged: each result is
    an argument of its dtype or a view of one, from a call that writes nothing (its caller checks that no
    argument's version moved); ``tensors``: the tensors among its arguments. A view moves no data on the device,
    and its float64 replay gives those values upcast, exactly: an error of 0 without a recompute."""
    if not results or is_inplace(name, kwargs) or kwargs.get("out") is not None or \
            name.rpartition(".")[2] in TIE_BREAKING:
        return False
    sources = {(_storage(t), t.dtype) for t in tensors}
    return all(t.numel() and (_storage(t), t.dtype) in sources for t in results)


def passes_through(grads: list, incoming: Optional[torch.Tensor]) -> bool:
    """Whether each gradient a call's backward sent is the gradient it received, or a view of it, of its dtype
    (a view's backward, an addition's): its float64 replay gives the same values upcast, exactly."""
    if incoming is None:
        return False
    key = (_storage(incoming), incoming.dtype)
    return all(g.numel() and (_storage(g), g.dtype) == key for g in grads)


def _storage(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


_STANDARD_NAMES = {torch.bfloat16: "bfloat16", torch.float16: "float16", torch.complex32: "float16",
                   torch.float32: "float32", torch.complex64: "float32", torch.float64: "float64",
                   torch.complex128: "float64"}


def standard_of(tensors: list, extra: tuple = ()) -> Standard:
    """The standard of the least precise floating dtype among ``tensors`` and the dtypes ``extra``."""
    names = {_STANDARD_NAMES.get(t.dtype) for t in tensors if t is not None}
    names.update(_STANDARD_NAMES.get(d) for d in extra)
    names.discard(None)
    return standard_for(names)


class Scratch:
    """Two float64 work buffers reused across a step's measurements (sized to the largest tensor measured), so a
    measurement allocates nothing; past ``KEEP`` elements they are allocated for that tensor only. They are held
    as numpy arrays and lent as tensors over the same memory for one measurement: no float64 tensor outlives its
    call."""

    KEEP = 1 << 22

    def __init__(self) -> None:
        self._a = self._b = np.empty(0)

    def buffers(self, n: int) -> tuple:
        """Two flat float64 CPU tensors of ``n`` elements."""
        if n > self.KEEP:
            return torch.empty(n, dtype=torch.float64), torch.empty(n, dtype=torch.float64)
        if self._a.size < n:
            self._a, self._b = np.empty(n), np.empty(n)
        return torch.from_numpy(self._a[:n]), torch.from_numpy(self._b[:n])


def measure(device: torch.Tensor, golden: torch.Tensor, rtol: float, scratch: Optional[Scratch] = None) -> ReplayError:
    """How far ``device`` (any dtype and device) is from ``golden`` (CPU, float64 or integer): the metrics of
    :mod:`ascend_tune.analysis.dumps.replay`. Raises Unreplayable when the shapes differ.

    Memory traffic is what measuring a large tensor costs, so it is measured in two passes of compiled C where the
    machine has a C compiler (:mod:`.measure_kernel`); else in the fewest passes torch has kernels for, in
    ``scratch``'s buffers (each viewed in the tensors' shape, so neither input is copied to be flattened):
    the device's values converted into one and the golden ones subtracted there, the golden magnitudes written
    into the other, then one read each for the difference's extremes and the two sums of squares (``dot``, no
    square written), read back together; the relative error is written over the magnitudes and read once more.
    Neither input is written (a view of the device's result may be the user's tensor). Integer and bool values
    are exact in float64.
    """
    if device.shape != golden.shape:
        raise Unreplayable(f"the CPU replay's shape {list(golden.shape)} differs from the device's "
                           f"{list(device.shape)}")
    device, golden = device.detach(), golden.detach()
    if device.is_complex():
        device, golden = torch.view_as_real(device), torch.view_as_real(golden)
    n = device.numel()
    if n == 0:
        return EXACT
    if golden.dtype is not torch.float64:
        golden = golden.to(torch.float64)
    if n <= SMALL:  # the arithmetic of replay_batch's batches, whose calls are this small: rows alike either way
        small = _measure_small(device, golden, rtol, n)
        if small is not None:
            return small
    else:
        fused = measure_kernel.measure(device, golden, rtol)
        if fused is not None:  # the same figures in two passes of compiled C
            low, high, diff_sq, gold_sq, max_rel, over = fused
            max_abs = max(-low, high)
            if max_abs == 0.0:
                return EXACT
            return ReplayError(max_abs, max_rel, min(over / n, 1.0), math.sqrt(diff_sq) / math.sqrt(gold_sq), 0)
    diff, work = (scratch or Scratch()).buffers(n)
    shape = device.shape
    diff.view(shape).copy_(device).sub_(golden)  # to the CPU and to float64 in the one copy
    torch.abs(golden, out=work.view(shape))
    low, high, diff_sq, gold_sq = torch.stack((*torch.aminmax(diff), torch.dot(diff, diff),
                                               torch.dot(work, work))).tolist()
    nonfinite = 0
    if not (math.isfinite(low) and math.isfinite(high)):  # inf/nan on either side: equal ones agree, others count
        values, gold = device.to(CPU, torch.float64).reshape(-1), golden.reshape(-1)
        both = torch.isfinite(values) & torch.isfinite(gold)
        same = (values == gold) | (torch.isnan(values) & torch.isnan(gold))
        nonfinite = int(torch.count_nonzero(~both & ~same))
        gold = torch.where(both, gold, 0.0)
        diff = torch.where(both, values, 0.0).sub_(gold)
        torch.abs(gold, out=work)
        low, high, diff_sq, gold_sq = torch.stack((*torch.aminmax(diff), torch.dot(diff, diff),
                                                   torch.dot(work, work))).tolist()
    max_abs = max(-low, high)
    if max_abs == 0.0 and not nonfinite:
        return EXACT
    total = math.sqrt(gold_sq)
    rms = total / math.sqrt(n)
    if rms > 0:
        rel = torch.div(diff, work.clamp_min_(rms), out=work)  # signed: its extremes give the largest magnitude
        low, high = torch.aminmax(rel)
        max_rel = max(-float(low), float(high))
        over = int(torch.count_nonzero(rel.abs_() > rtol)) if max_rel > rtol else 0
    else:  # a golden result of zeros: any difference is infinitely far off
        max_rel = math.inf if max_abs > 0 else 0.0
        over = int(torch.count_nonzero(diff))
    over += nonfinite
    diff_norm = math.sqrt(diff_sq)
    norm_err = diff_norm / total if total > 0 else (0.0 if diff_norm == 0 else math.inf)
    return ReplayError(max_abs, max_rel, min(over / n, 1.0), norm_err, nonfinite)


SMALL = 1 << 12  # elements: below, a tensor's few passes cost less than torch's fixed cost per op (~3 us vs ~1 us)


def _measure_small(device: torch.Tensor, golden: torch.Tensor, rtol: float, n: int) -> Optional[ReplayError]:
    """:func:`measure`'s metrics of a small tensor, in numpy on fresh arrays; None when a value is inf or nan
    (measure's own path sorts those out)."""
    d = device.to(CPU, torch.float64).reshape(-1).numpy()  # read only: it may be a view of the user's tensor
    g = golden.reshape(-1).numpy()
    if not (np.isfinite(d).all() and np.isfinite(g).all()):
        return None
    diff = np.abs(d - g)
    max_abs = float(diff.max())
    if max_abs == 0.0:
        return EXACT
    magnitude = np.abs(g)
    total = math.sqrt(float(np.dot(magnitude, magnitude)))
    rms = total / math.sqrt(n)
    if rms > 0:
        rel = diff / np.maximum(magnitude, rms)
        max_rel = float(rel.max())
        over = int(np.count_nonzero(rel > rtol)) if max_rel > rtol else 0
    else:
        max_rel, over = math.inf, int(np.count_nonzero(diff))
    diff_norm = math.sqrt(float(np.dot(diff, diff)))
    norm_err = diff_norm / total if total > 0 else math.inf
    return ReplayError(max_abs, max_rel, min(over / n, 1.0), norm_err, 0)
