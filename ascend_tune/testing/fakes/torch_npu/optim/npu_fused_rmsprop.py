"""Fake ``torch_npu.optim.npu_fused_rmsprop``: RMSprop (PyTorch order: eps added after the square root)."""

from __future__ import annotations

from typing import Any

from torch_npu.utils._error_code import ErrCode, pta_error

from .npu_fused_optim_base import NpuFusedOptimizerBase, _CombinedSlice

__all__ = ["NpuFusedRMSprop"]


def _check_rmsprop_args(lr: float, alpha: float, eps: float, weight_decay: float, momentum: float) -> None:
    if lr < 0.0:
        raise ValueError(f"Invalid learning rate: {lr}" + pta_error(ErrCode.VALUE))
    if eps < 0.0:
        raise ValueError(f"Invalid epsilon value: {eps}" + pta_error(ErrCode.VALUE))
    if momentum < 0.0:
        raise ValueError(f"Invalid momentum value: {momentum}" + pta_error(ErrCode.VALUE))
    if weight_decay < 0.0:
        raise ValueError(f"Invalid weight_decay value: {weight_decay}" + pta_error(ErrCode.VALUE))
    if alpha < 0.0:
        raise ValueError(f"Invalid alpha value: {alpha}" + pta_error(ErrCode.VALUE))


class NpuFusedRMSprop(NpuFusedOptimizerBase):
    """RMSprop, numerically torch.optim.RMSprop, with optional momentum and centring."""

    def __init__(
        self,
        params: Any,
        lr: float = 1e-2,
        alpha: float = 0.99,
        eps: float = 1e-8,
        weight_decay: float = 0,
        momentum: float = 0,
        centered: bool = False,
    ):
        _check_rmsprop_args(lr, alpha, eps, weight_decay, momentum)
        defaults = dict(lr=lr, momentum=momentum, alpha=alpha, eps=eps, centered=centered, weight_decay=weight_decay)
        super().__init__(params, defaults)

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        for group in self.param_groups:
            group.setdefault("momentum", 0)
            group.setdefault("centered", False)

    def _state_fills(self, group: dict[str, Any]) -> dict[str, float]:
        fills = {"square_avg": 0.0}
        if group["momentum"] > 0:
            fills["momentum_buffer"] = 0.0
        if group["centered"]:
            fills["grad_avg"] = 0.0
        return fills

    def _slice_step(self, group: dict[str, Any], piece: _CombinedSlice) -> None:
        self._advance_step(piece)
        alpha = group["alpha"]
        square_avg = piece.states["square_avg"]
        grad = piece.grad
        if group["weight_decay"] != 0:
            grad = grad.add(piece.param, alpha=group["weight_decay"])
        square_avg.mul_(alpha).addcmul_(grad, grad, value=1 - alpha)
        if group["centered"]:
            grad_avg = piece.states["grad_avg"]
            grad_avg.mul_(alpha).add_(grad, alpha=1 - alpha)
            avg = square_avg.addcmul(grad_avg, grad_avg, value=-1).sqrt_().add_(group["eps"])
        else:
            avg = square_avg.sqrt().add_(group["eps"])
        if group["momentum"] > 0:
            buf = piece.states["momentum_buffer"]
            buf.mul_(group["momentum"]).addcdiv_(grad, avg)
            piece.param.add_(buf, alpha=-group["lr"])
        else:
            piece.param.addcdiv_(grad, avg, value=-group["lr"])
