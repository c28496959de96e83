"""Fake ``torch_npu.optim.npu_fused_rmsprop_tf``: RMSprop in TensorFlow's order (timm's RMSpropTF)."""

from __future__ import annotations

from typing import Any

from .npu_fused_optim_base import NpuFusedOptimizerBase, _CombinedSlice
from .npu_fused_rmsprop import _check_rmsprop_args

__all__ = ["NpuFusedRMSpropTF"]


class NpuFusedRMSpropTF(NpuFusedOptimizerBase):
    """RMSprop as TensorFlow does it: ``square_avg`` starts at 1, eps goes inside the root, lr into the momentum."""

    def __init__(
        self,
        params: Any,
        lr: float = 1e-2,
        alpha: float = 0.9,
        eps: float = 1e-10,
        weight_decay: float = 0,
        momentum: float = 0.0,
        centered: bool = False,
        decoupled_decay: bool = False,
        lr_in_momentum: bool = True,
    ):
        _check_rmsprop_args(lr, alpha, eps, weight_decay, momentum)
        defaults = dict(
            lr=lr,
            momentum=momentum,
            alpha=alpha,
            eps=eps,
            centered=centered,
            weight_decay=weight_decay,
            decoupled_decay=decoupled_decay,
            lr_in_momentum=lr_in_momentum,
        )
        super().__init__(params, defaults)

    def _state_fills(self, group: dict[str, Any]) -> dict[str, float]:
        fills = {"square_avg": 1.0}
        if group["momentum"] > 0:
            fills["momentum_buffer"] = 0.0
        if group["centered"]:
            fills["grad_avg"] = 0.0
        return fills

    def _slice_step(self, group: dict[str, Any], piece: _CombinedSlice) -> None:
        self._advance_step(piece)
        one_minus_alpha = 1.0 - group["alpha"]
        square_avg = piece.states["square_avg"]
        param, grad = piece.param, piece.grad
        if group["weight_decay"] != 0:
            if group.get("decoupled_decay"):
                param.add_(param, alpha=-group["weight_decay"])
            else:
                grad = grad.add(param, alpha=group["weight_decay"])
        square_avg.add_(grad.pow(2) - square_avg, alpha=one_minus_alpha)
        if group["centered"]:
            grad_avg = piece.states["grad_avg"]
            grad_avg.add_(grad - grad_avg, alpha=one_minus_alpha)
            avg = square_avg.addcmul(grad_avg, grad_avg, value=-1).add(group["eps"]).sqrt_()
        else:
            avg = square_avg.add(group["eps"]).sqrt_()
        if group["momentum"] > 0:
            buf = piece.states["momentum_buffer"]
            if group.get("lr_in_momentum"):
                buf.mul_(group["momentum"]).addcdiv_(grad, avg, value=group["lr"])
                param.sub_(buf)
            else:
                buf.mul_(group["momentum"]).addcdiv_(grad, avg)
                param.add_(buf, alpha=-group["lr"])
        else:
            param.addcdiv_(grad, avg, value=-group["lr"])
