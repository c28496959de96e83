"""Fake ``torch_npu.optim.npu_fused_adam``: Adam with L2 weight decay and optional AMSGrad."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch_npu.utils._error_code import ErrCode, pta_error

from .npu_fused_optim_base import NpuFusedOptimizerBase, _CombinedSlice

__all__ = ["NpuFusedAdam"]


def _check_adam_args(lr: float, betas: tuple[float, float], eps: float, weight_decay: float) -> None:
    if lr < 0.0:
        raise ValueError(f"Invalid learning rate: {lr}" + pta_error(ErrCode.VALUE))
    if eps < 0.0:
        raise ValueError(f"Invalid epsilon value: {eps}" + pta_error(ErrCode.VALUE))
    if not 0.0 <= betas[0] < 1.0:
        raise ValueError(f"Invalid beta parameter at index 0: {betas[0]}" + pta_error(ErrCode.VALUE))
    if not 0.0 <= betas[1] < 1.0:
        raise ValueError(f"Invalid beta parameter at index 1: {betas[1]}" + pta_error(ErrCode.VALUE))
    if weight_decay < 0.0:
        raise ValueError(f"Invalid weight_decay value: {weight_decay}" + pta_error(ErrCode.VALUE))


def _adam_states(group: dict[str, Any]) -> dict[str, float]:
    fills = {"exp_avg": 0.0, "exp_avg_sq": 0.0}
    if group["amsgrad"]:
        fills["max_exp_avg_sq"] = 0.0
    return fills


def _adam_update(group: dict[str, Any], piece: _CombinedSlice, grad: torch.Tensor, step: int) -> None:
    """Bias-corrected Adam moment update and parameter step on one combined slice."""
    beta1, beta2 = group["betas"]
    exp_avg, exp_avg_sq = piece.states["exp_avg"], piece.states["exp_avg_sq"]
    # lerp_ rather than mul_/add_ (the same maths): it rounds exactly as torch.optim.Adam does on CPU.
    exp_avg.lerp_(grad, 1 - beta1)
    exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
    second_moment = exp_avg_sq
    if group["amsgrad"]:
        max_exp_avg_sq = piece.states["max_exp_avg_sq"]
        torch.maximum(max_exp_avg_sq, exp_avg_sq, out=max_exp_avg_sq)
        second_moment = max_exp_avg_sq
    denom = (second_moment.sqrt() / math.sqrt(1 - beta2**step)).add_(group["eps"])
    piece.param.addcdiv_(exp_avg, denom, value=-group["lr"] / (1 - beta1**step))


class NpuFusedAdam(NpuFusedOptimizerBase):
    """Adam, numerically torch.optim.Adam (weight decay is added to the gradient)."""

    def __init__(
        self,
        params: Any,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0,
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
        step = self._advance_step(piece)
        grad = piece.grad
        if group["weight_decay"] != 0:
            grad = grad.add(piece.param, alpha=group["weight_decay"])
        _adam_update(group, piece, grad, step)
