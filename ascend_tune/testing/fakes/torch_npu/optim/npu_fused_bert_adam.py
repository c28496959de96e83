"""Fake ``torch_npu.optim.npu_fused_bert_adam``: BERT's Adam (no bias correction, clipping, lr warmup schedules)."""

from __future__ import annotations

import math
from typing import Any, Callable

import torch
from torch.optim.optimizer import required
from torch_npu.utils._error_code import ErrCode, pta_error

from .npu_fused_optim_base import NpuFusedOptimizerBase, _CombinedSlice

__all__ = ["NpuFusedBertAdam"]


def _warmup_cosine(x: float, warmup: float = 0.002) -> float:
    if x < warmup:
        return x / warmup
    # torch.cos on a float, as in the real schedule: after warmup this raises TypeError there too.
    return 0.5 * (1.0 + torch.cos(math.pi * x))


def _warmup_constant(x: float, warmup: float = 0.002) -> float:
    return x / warmup if x < warmup else 1.0


def _warmup_linear(x: float, warmup: float = 0.002) -> float:
    return x / warmup if x < warmup else max((x - 1.0) / (warmup - 1.0), 0.0)


def _warmup_poly(x: float, warmup: float = 0.002, degree: float = 0.5) -> float:
    return x / warmup if x < warmup else (1.0 - x) ** degree


SCHEDULES: dict[str, Callable[..., float]] = {
    "warmup_cosine": _warmup_cosine,
    "warmup_constant": _warmup_constant,
    "warmup_linear": _warmup_linear,
    "warmup_poly": _warmup_poly,
}


class NpuFusedBertAdam(NpuFusedOptimizerBase):
    """BERT's Adam: each group's grads clipped to ``max_grad_norm``, ``p -= lr_t * (m / (sqrt(v) + e) + wd * p)``."""

    def __init__(
        self,
        params: Any,
        lr: float = required,
        warmup: float = -1,
        t_total: int = -1,
        schedule: str = "warmup_linear",
        b1: float = 0.9,
        b2: float = 0.999,
        e: float = 1e-6,
        weight_decay: float = 0.01,
        max_grad_norm: float = 1.0,
    ):
        if lr is not required and lr < 0.0:
            raise ValueError(f"Invalid learning rate: {lr}" + pta_error(ErrCode.VALUE))
        if (warmup < 0.0 and warmup != -1) or warmup >= 1.0:
            raise ValueError(f"Invalid warmup: {warmup}" + pta_error(ErrCode.VALUE))
        if schedule not in SCHEDULES:
            raise ValueError(f"Invalid schedule parameter: {schedule}" + pta_error(ErrCode.VALUE))
        if not 0.0 <= b1 < 1.0:
            raise ValueError(f"Invalid b1 parameter: {b1}" + pta_error(ErrCode.VALUE))
        if not 0.0 <= b2 < 1.0:
            raise ValueError(f"Invalid b2 parameter: {b2}" + pta_error(ErrCode.VALUE))
        if e < 0.0:
            raise ValueError(f"Invalid epsilon value: {e}" + pta_error(ErrCode.VALUE))
        defaults = dict(
            lr=lr,
            schedule=schedule,
            warmup=warmup,
            t_total=t_total,
            b1=b1,
            b2=b2,
            e=e,
            weight_decay=weight_decay,
            max_grad_norm=max_grad_norm,
        )
        self.max_grad_norm = max_grad_norm
        super().__init__(params, defaults)

    def _state_fills(self, group: dict[str, Any]) -> dict[str, float]:
        return {"exp_avg": 0.0, "exp_avg_sq": 0.0}

    def _slice_step(self, group: dict[str, Any], piece: _CombinedSlice) -> None:
        grad = piece.grad
        if self.max_grad_norm > 0:
            # Clipped in place, per group and dtype: the parameters' .grad tensors see the clipped values.
            total_norm = grad.float().abs().pow(2.0).sum().pow(0.5)
            coef = self.max_grad_norm / (total_norm + 1e-6)
            if coef < 1.0:
                grad.mul_(coef)
        beta1, beta2 = group["b1"], group["b2"]
        exp_avg, exp_avg_sq = piece.states["exp_avg"], piece.states["exp_avg_sq"]
        exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)
        exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        update = exp_avg / (exp_avg_sq.sqrt() + group["e"])
        if group["weight_decay"] > 0.0:
            update += group["weight_decay"] * piece.param
        lr = group["lr"]
        if group["t_total"] != -1:
            lr = lr * SCHEDULES[group["schedule"]](piece.step / group["t_total"], group["warmup"])
        piece.param.add_(update, alpha=-lr)
        # Only the combined count advances (after the update), as in the real class; per-parameter steps stay 0.
        piece.step += 1
