"""Fake ``torch_npu.npu.amp.grad_scaler``: torch's GradScaler running on CPU tensors, with the NPU signature.

The real class derives from the GradScaler of the torch it is built for: ``torch.amp.GradScaler`` (torch 2.3 on),
``torch.cuda.amp.GradScaler`` before (torch_npu 2.1.0). Torch 2.1 has no CPU kernels for the scaler's two fused
ops, where torch_npu brings NPU ones; on such a torch the fake does their maths with plain tensor ops instead.
"""

from __future__ import annotations

import warnings
from collections import abc, defaultdict
from typing import Any, Optional, Union

import torch
import torch_npu

__all__ = ["GradScaler"]

# torch.amp.GradScaler (torch 2.3) came with CPU kernels for _amp_foreach_non_finite_check_and_unscale_ and
# _amp_update_scale_; torch_npu 2.1.0 derives from torch.cuda.amp.GradScaler.
_GENERIC = getattr(torch.amp, "GradScaler", None)


class _HostKernels:
    """The scaler's device ops in plain tensor maths, for a torch without CPU kernels for them (torch 2.1)."""

    def _lazy_init_scale_growth_tracker(self, dev: Any) -> None:
        self._scale = torch.full((), self._init_scale, dtype=torch.float32, device=dev)
        self._growth_tracker = torch.full((), self._init_growth_tracker, dtype=torch.int32, device=dev)

    def scale(self, outputs: Any) -> Any:
        """Multiply a tensor (or an iterable of tensors) by the scale factor."""
        if not self._enabled:
            return outputs

        def apply_scale(val: Any) -> Any:
            if isinstance(val, torch.Tensor):
                if self._scale is None:
                    self._lazy_init_scale_growth_tracker(val.device)
                return val * self._scale.to(device=val.device, non_blocking=True)
            if isinstance(val, abc.Iterable):
                scaled = map(apply_scale, val)
                return type(val)(scaled) if isinstance(val, (list, tuple)) else scaled
            raise ValueError("outputs must be a Tensor or an iterable of Tensors")

        return apply_scale(outputs)

    def _unscale_grads_(self, optimizer: Any, inv_scale: torch.Tensor, found_inf: torch.Tensor,
                        allow_fp16: bool) -> dict:
        per_device: dict = {}
        with torch.no_grad():
            for group in optimizer.param_groups:
                for param in group["params"]:
                    if param.grad is None:
                        continue
                    if not allow_fp16 and param.grad.dtype == torch.float16:
                        raise ValueError("Attempting to unscale FP16 gradients.")
                    grad = param.grad._values() if param.grad.is_sparse else param.grad
                    flag = per_device.setdefault(grad.device, found_inf.to(grad.device))
                    if not bool(torch.isfinite(grad).all()):
                        flag.fill_(1.0)
                    grad.mul_(inv_scale.to(grad.device))
        return per_device

    def update(self, new_scale: Optional[Union[float, torch.Tensor]] = None) -> None:
        """Grow or back off the scale after a step; a static scaler keeps its scale."""
        if not self._enabled:
            return
        if new_scale is None and not self._dynamic:
            new_scale = self.get_scale()
        if new_scale is not None:
            self._scale.fill_(float(new_scale))
        else:
            found = sum(float(f) for state in self._per_optimizer_states.values()
                        for f in state["found_inf_per_device"].values())
            if found:
                self._scale.mul_(self._backoff_factor)
                self._growth_tracker.zero_()
            else:
                self._growth_tracker.add_(1)
                if int(self._growth_tracker) == self._growth_interval:
                    self._scale.mul_(self._growth_factor)
                    self._growth_tracker.zero_()
        self._per_optimizer_states = defaultdict(_refresh_per_optimizer_state)


if _GENERIC is not None:
    _BASES: tuple = (_GENERIC,)
else:
    from torch.cuda.amp.grad_scaler import _refresh_per_optimizer_state

    _BASES = (_HostKernels, torch.cuda.amp.GradScaler)


class GradScaler(*_BASES):  # type: ignore[misc]
    """Scales the loss against fp16 underflow; ``dynamic=False`` keeps the scale fixed (an NPU-only option)."""

    def __init__(
        self,
        init_scale: float = 2.0**16,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
        dynamic: bool = True,
        enabled: bool = True,
    ):
        if enabled and not torch_npu.npu.is_available():
            warnings.warn("torch_npu.amp.GradScaler is enabled, but NPU is not available. Disabling.", stacklevel=2)
            enabled = False
        self._dynamic = dynamic
        if _GENERIC is not None:
            super().__init__("cpu", init_scale, growth_factor, backoff_factor, growth_interval, enabled)
            return
        # torch.cuda.amp.GradScaler disables itself without CUDA: set its state as torch_npu 2.1.0 does
        self._enabled = enabled
        if enabled:
            if growth_factor <= 1.0:
                raise ValueError("The growth factor must be > 1.0.")
            if backoff_factor >= 1.0:
                raise ValueError("The backoff factor must be < 1.0.")
            self._init_scale = init_scale
            self._scale: Optional[torch.Tensor] = None
            self._growth_factor = growth_factor
            self._backoff_factor = backoff_factor
            self._growth_interval = growth_interval
            self._init_growth_tracker = 0
            self._growth_tracker: Optional[torch.Tensor] = None
            self._per_optimizer_states = defaultdict(_refresh_per_optimizer_state)

    def update(self, new_scale: Optional[Union[float, torch.Tensor]] = None) -> None:
        """Grow or back off the scale after a step; a static scaler keeps its scale."""
        if _GENERIC is None:
            return super().update(new_scale)
        if not self._dynamic and new_scale is None and self.is_enabled() and self._scale is not None:
            new_scale = self.get_scale()
        super().update(new_scale)
