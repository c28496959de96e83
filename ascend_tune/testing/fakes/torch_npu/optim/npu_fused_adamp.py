"""Fake ``torch_npu.optim.npu_fused_adamp``: AdamP (Adam that removes the radial part of scale-invariant updates)."""

from __future__ import annotations

import math
from typing import Any, Callable, Optional

import torch

from .npu_fused_optim_base import NpuFusedOptimizerBase, _CombinedSlice

__all__ = ["NpuFusedAdamP"]


def _channel_view(x: torch.Tensor) -> torch.Tensor:
    return x.reshape(x.size(0), -1)


def _layer_view(x: torch.Tensor) -> torch.Tensor:
    return x.reshape(1, -1)


def _projection(
    p: torch.Tensor, grad: torch.Tensor, perturb: torch.Tensor, delta: float, wd_ratio: float, eps: float
) -> tuple[torch.Tensor, float]:
    """Drop the component of ``perturb`` along ``p`` when ``p`` looks scale-invariant; returns it and the wd factor."""
    expand = [-1] + [1] * (p.dim() - 1)
    for view in (_channel_view, _layer_view):
        p_flat, g_flat = view(p), view(grad)
        cosine = (p_flat * g_flat).sum(dim=1).abs() / p_flat.norm(dim=1).add(eps) / g_flat.norm(dim=1).add(eps)
        if cosine.max() < delta / math.sqrt(p_flat.size(1)):
            p_unit = p / p_flat.norm(dim=1).view(expand).add(eps)
            perturb = perturb - p_unit * view(p_unit * perturb).sum(dim=1).view(expand)
            return perturb, wd_ratio
    return perturb, 1.0


class NpuFusedAdamP(NpuFusedOptimizerBase):
    """AdamP: bias-corrected Adam whose update is projected for scale-invariant weights (delta, wd_ratio)."""

    def __init__(
        self,
        params: Any,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0,
        delta: float = 0.1,
        wd_ratio: float = 0.1,
        nesterov: bool = False,
    ):
        defaults = dict(
            lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, delta=delta, wd_ratio=wd_ratio, nesterov=nesterov
        )
        super().__init__(params, defaults)

    def _state_fills(self, group: dict[str, Any]) -> dict[str, float]:
        return {"exp_avg": 0.0, "exp_avg_sq": 0.0}

    @torch.no_grad()
    def step(self, closure: Optional[Callable[[], Any]] = None) -> Any:
        """One AdamP update; unlike the base class, ``closure`` runs with gradients enabled."""
        self._maybe_init_combined_params_and_grads()
        self._maybe_init_combined_states()
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group, slices in zip(self.param_groups, self._slices_by_group):
            for piece in slices:
                self._slice_step(group, piece)
        return loss

    def _slice_step(self, group: dict[str, Any], piece: _CombinedSlice) -> None:
        step = self._advance_step(piece)
        beta1, beta2 = group["betas"]
        grad = piece.grad
        exp_avg, exp_avg_sq = piece.states["exp_avg"], piece.states["exp_avg_sq"]
        exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)
        exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        denom = (exp_avg_sq.sqrt() / math.sqrt(1 - beta2**step)).add_(group["eps"])
        step_size = group["lr"] / (1 - beta1**step)
        if group["nesterov"]:
            perturb = (beta1 * exp_avg + (1 - beta1) * grad) / denom
        else:
            perturb = exp_avg / denom
        wd_ratios = torch.ones_like(perturb)
        for p, span in piece.segments():
            ratio = 1.0
            if p.dim() > 1:
                projected, ratio = _projection(
                    p, p.grad, perturb[span].view_as(p), group["delta"], group["wd_ratio"], group["eps"]
                )
                perturb[span] = projected.reshape(-1)
            wd_ratios[span] = ratio
        if group["weight_decay"] > 0:
            piece.param.mul_(1 - group["lr"] * group["weight_decay"] * wd_ratios)
        piece.param.add_(perturb, alpha=-step_size)
