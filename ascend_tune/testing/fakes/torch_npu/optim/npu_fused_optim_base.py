"""Fake ``torch_npu.optim.npu_fused_optim_base``: what every NpuFused* optimizer shares.

As in the real package, the first ``step()`` or ``zero_grad()`` moves every parameter that has a gradient, and its
gradient, into one flat buffer per dtype (``npu_combine_tensors``); subclasses then update a whole param group with
a few elementwise ops on slices of those buffers. Consequences reproduced here on purpose:

- only float32 and float16 parameters are accepted (``TypeError``), so bfloat16 models fail;
- ``zero_grad(set_to_none=True)`` raises ``ValueError``;
- parameters that had no gradient at the first combine are never updated afterwards, and a gradient replaced
  after it (e.g. ``model.zero_grad()``, which sets None) is not seen: the buffer keeps the old values.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import torch
from torch.optim.optimizer import Optimizer
from torch_npu.utils import get_part_combined_tensor, npu_combine_tensors
from torch_npu.utils._error_code import ErrCode, pta_error

__all__ = ["NpuFusedOptimizerBase"]

# Position in this tuple is the real package's "dtype index" of the combined buffers.
_FUSED_DTYPES = (torch.float32, torch.float16)


@dataclass
class _CombinedSlice:
    """One param group's share of one dtype: flat views of the combined params, grads and optimizer states."""

    params: list[torch.Tensor]
    param: torch.Tensor
    grad: torch.Tensor
    states: dict[str, torch.Tensor] = field(default_factory=dict)
    step: int = 0

    def segments(self) -> list[tuple[torch.Tensor, slice]]:
        """Each parameter with the range of the flat views that belongs to it."""
        out, start = [], 0
        for p in self.params:
            out.append((p, slice(start, start + p.numel())))
            start += p.numel()
        return out


class NpuFusedOptimizerBase(Optimizer):
    """Base of the fused optimizers: combines params and grads once, then steps each group on flat buffers."""

    def __init__(self, params: Any, default: dict[str, Any]):
        super().__init__(params, default)
        self.is_params_grads_combined = False
        self.is_states_combined = False
        self.is_fused_optimizer = True
        self.params_all_group_combined: list[Optional[torch.Tensor]] = [None, None]
        self.grads_all_group_combined: list[Optional[torch.Tensor]] = [None, None]
        self._slices_by_group: list[list[_CombinedSlice]] = []

    # --- combining -------------------------------------------------------------------------------------------------

    def _maybe_init_combined_params_and_grads(self) -> None:
        if self.is_params_grads_combined:
            return
        by_group: list[tuple[list[torch.Tensor], list[torch.Tensor]]] = []
        for group in self.param_groups:
            buckets: tuple[list[torch.Tensor], list[torch.Tensor]] = ([], [])
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.dtype not in _FUSED_DTYPES:
                    raise TypeError(
                        f"Fused optimizer's parameters must be either float32 or float16, but received {p.dtype}"
                        + pta_error(ErrCode.TYPE)
                    )
                buckets[_FUSED_DTYPES.index(p.dtype)].append(p)
            by_group.append(buckets)

        with torch.no_grad():
            for dtype_index in range(len(_FUSED_DTYPES)):
                params = [p for buckets in by_group for p in buckets[dtype_index]]
                self.params_all_group_combined[dtype_index] = npu_combine_tensors(params)
                self.grads_all_group_combined[dtype_index] = npu_combine_tensors([p.grad for p in params])

        offsets = [0] * len(_FUSED_DTYPES)
        self._slices_by_group = []
        for buckets in by_group:
            slices = []
            for dtype_index, params in enumerate(buckets):
                size = sum(p.numel() for p in params)
                if size == 0:
                    continue
                start = offsets[dtype_index]
                param = get_part_combined_tensor(self.params_all_group_combined[dtype_index], start, size)
                grad = get_part_combined_tensor(self.grads_all_group_combined[dtype_index], start, size)
                slices.append(_CombinedSlice(params, param, grad))
                offsets[dtype_index] += size
            self._slices_by_group.append(slices)
        self.is_params_grads_combined = any(t is not None for t in self.params_all_group_combined)

    def _state_fills(self, group: dict[str, Any]) -> dict[str, float]:
        """The per-parameter state tensors a group needs and the value each starts at (subclasses say)."""
        raise NotImplementedError

    def _init_param_state(self, p: torch.Tensor, group: dict[str, Any]) -> None:
        state = self.state[p]
        fresh = len(state) == 0
        if fresh:
            state["step"] = 0
        for key, fill in self._state_fills(group).items():
            # A loaded state dict's tensors are copied into new ones, since combining rebases their storage.
            old = None if fresh else state.get(key)
            state[key] = torch.full_like(p, fill) if old is None else torch.zeros_like(p).copy_(old)

    def _maybe_init_combined_states(self) -> None:
        if self.is_states_combined:
            return
        with torch.no_grad():
            for group, slices in zip(self.param_groups, self._slices_by_group):
                for piece in slices:
                    for p in piece.params:
                        self._init_param_state(p, group)
                    piece.step = self.state[piece.params[0]].get("step", 0)
                    for key in self._state_fills(group):
                        piece.states[key] = npu_combine_tensors([self.state[p][key] for p in piece.params])
        self.is_states_combined = any(self._slices_by_group)

    def _advance_step(self, piece: _CombinedSlice) -> int:
        """Count one more step for the slice and for each of its parameters' states; returns the new count."""
        for p in piece.params:
            if "step" in self.state[p]:
                self.state[p]["step"] += 1
        piece.step += 1
        return piece.step

    # --- the optimizer API -----------------------------------------------------------------------------------------

    @torch.no_grad()
    def step(self, closure: Optional[Callable[[], Any]] = None) -> Any:
        """Update every combined parameter once; ``closure`` (if given) runs first, under no_grad as in the real one."""
        loss = None
        if closure is not None:
            loss = closure()
        self._maybe_init_combined_params_and_grads()
        self._maybe_init_combined_states()
        for group, slices in zip(self.param_groups, self._slices_by_group):
            for piece in slices:
                self._slice_step(group, piece)
        return loss

    def _slice_step(self, group: dict[str, Any], piece: _CombinedSlice) -> None:
        raise NotImplementedError

    @torch.no_grad()
    def zero_grad(self, set_to_none: bool = False) -> None:
        """Zero the combined gradients in place; ``set_to_none=True`` is refused, it would detach them."""
        if set_to_none:
            raise ValueError("set_to_none is not supported in fused optimizers" + pta_error(ErrCode.VALUE))
        self._maybe_init_combined_params_and_grads()
        if not self.is_params_grads_combined:
            super().zero_grad(set_to_none=False)
            return
        for grads in self.grads_all_group_combined:
            if grads is not None:
                grads.zero_()

    def get_combined_params(self) -> list[Optional[torch.Tensor]]:
        """The combined parameter buffers: [float32, float16], None where a dtype is absent."""
        return self.params_all_group_combined

    def get_combined_grads(self) -> list[Optional[torch.Tensor]]:
        """The combined gradient buffers: [float32, float16], None where a dtype is absent."""
        return self.grads_all_group_combined

    def clip_grad_norm_fused_(self, max_norm: float, norm_type: float = 2) -> torch.Tensor:
        """Clip all combined gradients together to ``max_norm``; returns their total norm before clipping."""
        with torch.no_grad():
            self._maybe_init_combined_params_and_grads()
            grads = [g for g in self.grads_all_group_combined if g is not None]
            if not grads:
                return torch.tensor(0.0)
            norm_type = float(norm_type)
            if norm_type == math.inf:
                total = max(g.float().abs().max() for g in grads)
            else:
                total = torch.stack([g.float().abs().pow(norm_type).sum() for g in grads]).sum().pow(1 / norm_type)
            coef = float(max_norm) / (total + 1e-6)
            if coef < 1:
                for g in grads:
                    g.mul_(coef)
            return total
