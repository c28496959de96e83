"""Fake ``torch_npu.optim.npu_fused_adadelta``: Adadelta."""

from __future__ import annotations

from typing import Any

from torch_npu.utils._error_code import ErrCode, pta_error

from .npu_fused_optim_base import NpuFusedOptimizerBase, _CombinedSlice

__all__ = ["NpuFusedAdadelta"]


class NpuFusedAdadelta(NpuFusedOptimizerBase):
    """Adadelta, numerically torch.optim.Adadelta."""

    def __init__(self, params: Any, lr: float = 1.0, rho: float = 0.9, eps: float = 1e-6, weight_decay: float = 0):
        if lr < 0.0:
            raise ValueError(f"Invalid learning rate: {lr}" + pta_error(ErrCode.VALUE))
        if not 0.0 <= rho <= 1.0:
            raise ValueError(f"Invalid rho value: {rho}" + pta_error(ErrCode.VALUE))
        if eps < 0.0:
            raise ValueError(f"Invalid epsilon value: {eps}" + pta_error(ErrCode.VALUE))
        if weight_decay < 0.0:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}" + pta_error(ErrCode.VALUE))
        super().__init__(params, dict(lr=lr, rho=rho, eps=eps, weight_decay=weight_decay))

    def _state_fills(self, group: dict[str, Any]) -> dict[str, float]:
        return {"square_avg": 0.0, "acc_delta": 0.0}

    def _slice_step(self, group: dict[str, Any], piece: _CombinedSlice) -> None:
        self._advance_step(piece)
        rho, eps = group["rho"], group["eps"]
        square_avg, acc_delta = piece.states["square_avg"], piece.states["acc_delta"]
        grad = piece.grad
        if group["weight_decay"] != 0:
            grad = grad.add(piece.param, alpha=group["weight_decay"])
        square_avg.mul_(rho).addcmul_(grad, grad, value=1 - rho)
        std = square_avg.add(eps).sqrt_()
        delta = acc_delta.add(eps).sqrt_().div_(std).mul_(grad)
        piece.param.add_(delta, alpha=-group["lr"])
        acc_delta.mul_(rho).addcmul_(delta, delta, value=1 - rho)
