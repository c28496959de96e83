"""Fake ``torch_npu.optim.npu_fused_sgd``: SGD with momentum, dampening, weight decay and Nesterov."""

from __future__ import annotations

import math
from typing import Any, Callable, Optional

import torch
from torch.optim.optimizer import required
from torch_npu.utils._error_code import ErrCode, pta_error

from .npu_fused_optim_base import NpuFusedOptimizerBase, _CombinedSlice

__all__ = ["NpuFusedSGD"]


class NpuFusedSGD(NpuFusedOptimizerBase):
    """SGD, numerically torch.optim.SGD: ``buf = momentum * buf + (1 - dampening) * g``, ``p -= lr * buf``."""

    def __init__(
        self,
        params: Any,
        lr: float = required,
        momentum: float = 0.0,
        dampening: float = 0.0,
        weight_decay: float = 0.0,
        nesterov: bool = False,
    ):
        if lr is not required and lr < 0.0:
            raise ValueError(f"Invalid learning rate: {lr}" + pta_error(ErrCode.VALUE))
        if momentum < 0.0:
            raise ValueError(f"Invalid momentum value: {momentum}" + pta_error(ErrCode.VALUE))
        if weight_decay < 0.0:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}" + pta_error(ErrCode.VALUE))
        if nesterov and (momentum <= 0.0 or not math.isclose(dampening, 0.0, abs_tol=1e-15)):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening" + pta_error(ErrCode.VALUE))
        defaults = dict(lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay, nesterov=nesterov)
        # One flag for the whole optimizer, as in the real class: buffers made this step skip the momentum update.
        self._momentum_buffer_already_in_state = False
        super().__init__(params, defaults)

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        for group in self.param_groups:
            group.setdefault("nesterov", False)

    def _state_fills(self, group: dict[str, Any]) -> dict[str, float]:
        return {"momentum_buffer": 0.0} if group["momentum"] != 0 else {}

    def _init_param_state(self, p: torch.Tensor, group: dict[str, Any]) -> None:
        if group["momentum"] == 0:
            return
        state = self.state[p]
        if "momentum_buffer" not in state:
            # The first step's buffer is the (weight-decayed) gradient itself, as in torch.optim.SGD.
            self._momentum_buffer_already_in_state = False
            d_p = p.grad if group["weight_decay"] == 0 else p.grad.add(p, alpha=group["weight_decay"])
            state["momentum_buffer"] = torch.clone(d_p).detach()
        else:
            self._momentum_buffer_already_in_state = True
            state["momentum_buffer"] = torch.zeros_like(p).copy_(state["momentum_buffer"])

    def _slice_step(self, group: dict[str, Any], piece: _CombinedSlice) -> None:
        grad = piece.grad
        if group["weight_decay"] != 0:
            grad = grad.add(piece.param, alpha=group["weight_decay"])
        momentum = group["momentum"]
        if momentum != 0:
            buf = piece.states["momentum_buffer"]
            if self._momentum_buffer_already_in_state:
                buf.mul_(momentum).add_(grad, alpha=1 - group["dampening"])
            grad = grad.add(buf, alpha=momentum) if group["nesterov"] else buf
        piece.param.add_(grad, alpha=-group["lr"])

    def step(self, closure: Optional[Callable[[], Any]] = None) -> Any:
        """One SGD update of every combined parameter."""
        loss = super().step(closure)
        self._momentum_buffer_already_in_state = True
        return loss
