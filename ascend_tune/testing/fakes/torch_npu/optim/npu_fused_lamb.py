"""Fake ``torch_npu.optim.npu_fused_lamb``: LAMB (layer-wise trust ratio on an Adam step, no bias correction)."""

from __future__ import annotations

from typing import Any, Callable, Optional

import torch
from torch_npu.utils._error_code import ErrCode, pta_error

from .npu_fused_optim_base import NpuFusedOptimizerBase, _CombinedSlice

__all__ = ["NpuFusedLamb"]


class NpuFusedLamb(NpuFusedOptimizerBase):
    """LAMB: ``p -= lr * trust * (m / (sqrt(v) + eps) + wd * p)`` with ``trust = clamp(|p|, 0, 10) / |update|``."""

    def __init__(
        self,
        params: Any,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-6,
        weight_decay: float = 0,
        adam: bool = False,
        use_global_grad_norm: bool = False,
    ):
        if lr < 0.0:
            raise ValueError(f"Invalid learning rate: {lr}" + pta_error(ErrCode.VALUE))
        if not 0.0 <= betas[0] < 1.0:
            raise ValueError(f"Invalid beta parameter at index 0: {betas[0]}" + pta_error(ErrCode.VALUE))
        if not 0.0 <= betas[1] < 1.0:
            raise ValueError(f"Invalid beta parameter at index 1: {betas[1]}" + pta_error(ErrCode.VALUE))
        if eps < 0.0:
            raise ValueError(f"Invalid epsilon value: {eps}" + pta_error(ErrCode.VALUE))
        self.adam = adam
        self.use_global_grad_norm = use_global_grad_norm
        self.global_grad_norm = torch.ones(1)
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))

    def _state_fills(self, group: dict[str, Any]) -> dict[str, float]:
        return {"exp_avg": 0.0, "exp_avg_sq": 0.0}

    @torch.no_grad()
    def step(self, closure: Optional[Callable[[], Any]] = None) -> Any:
        """One LAMB update; unlike the base class, ``closure`` runs with gradients enabled."""
        self._maybe_init_combined_params_and_grads()
        self._maybe_init_combined_states()
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        if self.use_global_grad_norm:
            # The real step calls get_optimizer_combined_grads(), which no class defines, so this option fails there.
            raise AttributeError(f"'{type(self).__name__}' object has no attribute 'get_optimizer_combined_grads'")
        for group, slices in zip(self.param_groups, self._slices_by_group):
            for piece in slices:
                self._slice_step(group, piece)
        return loss

    def _slice_step(self, group: dict[str, Any], piece: _CombinedSlice) -> None:
        self._advance_step(piece)
        beta1, beta2 = group["betas"]
        grad = piece.grad
        if self.global_grad_norm.item() > 1:
            grad = grad / self.global_grad_norm
        exp_avg, exp_avg_sq = piece.states["exp_avg"], piece.states["exp_avg_sq"]
        exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)
        exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        update = exp_avg / exp_avg_sq.sqrt().add(group["eps"])
        if group["weight_decay"] != 0:
            update.add_(piece.param, alpha=group["weight_decay"])
        trust = torch.ones_like(update)
        if not self.adam:
            for _, span in piece.segments():
                weight_norm = piece.param[span].pow(2).sum().sqrt().clamp(0, 10)
                update_norm = update[span].pow(2).sum().sqrt()
                if weight_norm != 0 and update_norm != 0:
                    trust[span] = weight_norm / update_norm
        piece.param.addcmul_(update, trust, value=-group["lr"])
