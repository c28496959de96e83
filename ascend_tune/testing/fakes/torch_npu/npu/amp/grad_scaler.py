"""Fake ``torch_npu.npu.amp.grad_scaler``: torch's GradScaler running on CPU tensors, with the NPU signature."""

from __future__ import annotations

import warnings
from typing import Optional, Union

import torch
import torch_npu

__all__ = ["GradScaler"]


class GradScaler(torch.amp.GradScaler):
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
        super().__init__("cpu", init_scale, growth_factor, backoff_factor, growth_interval, enabled)
        self._dynamic = dynamic

    def update(self, new_scale: Optional[Union[float, torch.Tensor]] = None) -> None:
        """Grow or back off the scale after a step; a static scaler keeps its scale."""
        if not self._dynamic and new_scale is None and self.is_enabled() and self._scale is not None:
            new_scale = self.get_scale()
        super().update(new_scale)
