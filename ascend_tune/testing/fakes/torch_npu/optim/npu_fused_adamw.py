"""Fake ``torch_npu.optim.npu_fused_adamw``: Adam with decoupled weight decay."""

from __future__ import annotations

from typing import Any

from .npu_fused_adam import _adam_states, _adam_update, _check_adam_args
from .npu_fused_optim_base import NpuFusedOptimizerBase, _CombinedSlice

__all__ = ["NpuFusedAdamW"]


class NpuFusedAdamW(NpuFusedOptimizerBase):
    """AdamW, numerically torch.optim.AdamW: ``p *= 1 - lr * weight_decay`` before the Adam step."""

    def __init__(
        self,
        params: Any,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
        amsgrad: bool = False,
    ):
        _check_adam_args(lr, betas, eps, weight_decay)
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad)
        super().__init__(params, defaults)

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        for group in self.param_groups:
            group.setdefault("amsgrad", False)

    def _state_fills(self, group: dict[str, Any]) -> dict[str, float]:
        return _adam_states(group)

    def _slice_step(self, group: dict[str, Any], piece: _CombinedSlice) -> None:
        piece.param.mul_(1 - group["lr"] * group["weight_decay"])
        step = self._advance_step(piece)
        _adam_update(group, piece, piece.grad, step)
