"""The step's gradient norm, on the device: what ``grad_norm`` in metrics.jsonl is.

- When the step calls ``torch.nn.utils.clip_grad_norm_`` (patched for the block, seen without being told), it is
  that call's returned total norm: the pre-clip norm the Hugging Face Trainer logs (several calls in one step: the
  last one's);
- else the total 2-norm of the gradients at the optimizer's step (its pre-hook: after a GradScaler's unscale, after
  gradient accumulation), over every parameter the stepping optimizer holds; several optimizers stepping in one
  step give the norm of all their gradients together.

``grad_nonfinite`` counts the parameters whose gradient holds a NaN or an infinity (seen at the optimizer's step).
A step GradScaler skips runs no optimizer step: its ``grad_nonfinite`` is unknown (NaN), its ``grad_norm`` the clip
call's when there was one. FSDP2 / DTensor gradients give the global norm (the per-parameter norms made whole, one
collective per step); DDP gradients are the same on every rank after the all-reduce, so the rank's norm is global.
Nothing here reads a value back: the pair stays on the device until the log step's read-back.
"""

from __future__ import annotations

import contextlib
import functools
import math
from typing import Any, Optional

import torch

from ..recording.frames import internal


class GradNorms:
    """Collects one step's ``(grad_norm, grad_nonfinite)`` as a device tensor of two values."""

    def __init__(self) -> None:
        self._clip: Optional[torch.Tensor] = None
        self._parts: list = []  # (total, nonfinite) per optimizer step in this step
        self._nan: dict = {}
        self._also: Optional[Any] = None

    def install(self, stack: contextlib.ExitStack, optimizer: Any, also: Optional[Any] = None) -> None:
        """Watch ``optimizer``'s steps (every optimizer's when None) and ``clip_grad_norm_`` until ``stack`` closes;
        ``also()`` runs at each optimizer step and before each clip (the module statistics' moment: the gradients
        before they are clipped)."""
        self._also = also

        def pre(opt: Any, args: Any, kwargs: Any) -> None:
            self.before_step(opt)
            if also is not None:
                also()

        if optimizer is not None:
            handle = optimizer.register_step_pre_hook(pre)
        else:
            from torch.optim.optimizer import register_optimizer_step_pre_hook

            handle = register_optimizer_step_pre_hook(pre)
        stack.callback(handle.remove)
        utils = torch.nn.utils
        original = utils.clip_grad_norm_
        wrapped = self._wrap_clip(original)
        for owner in (utils, getattr(utils, "clip_grad", None)):
            if owner is not None and getattr(owner, "clip_grad_norm_", None) is original:
                owner.clip_grad_norm_ = wrapped
                stack.callback(setattr, owner, "clip_grad_norm_", original)

    def _wrap_clip(self, original: Any) -> Any:
        @functools.wraps(original)
        def clip_grad_norm_(*args: Any, **kwargs: Any) -> Any:
            if self._also is not None:
                try:
                    self._also()
                except Exception:  # our own bookkeeping never reaches the loop
                    pass
            total = original(*args, **kwargs)
            try:
                if isinstance(total, torch.Tensor):
                    with internal():
                        self._clip = _whole(total).detach().reshape(())
            except Exception:  # our own bookkeeping never reaches the loop
                self._clip = None
            return total

        return clip_grad_norm_

    def before_step(self, optimizer: Any) -> None:
        """The optimizer is about to apply its gradients: their norms, on the device."""
        try:
            with internal(), torch.no_grad():
                part = norms_of(optimizer)
        except Exception:
            return
        if part is not None:
            self._parts.append(part)

    def take(self) -> Optional[torch.Tensor]:
        """The step's ``[grad_norm, grad_nonfinite]`` (None when it saw neither a clip nor an optimizer step)."""
        parts, clip = self._parts, self._clip
        self._parts, self._clip = [], None
        if not parts and clip is None:
            return None
        with internal(), torch.no_grad():
            if parts:
                if len(parts) == 1:
                    total, nonfinite = parts[0]
                else:
                    dev = parts[0][0].device
                    total = torch.linalg.vector_norm(torch.stack([p[0].to(dev) for p in parts]))
                    nonfinite = torch.stack([p[1].to(dev) for p in parts]).sum()
            else:
                total, nonfinite = clip, self._nan_on(clip.device)
            if clip is not None:
                total = clip.to(total.device)
            return torch.stack([total.float(), nonfinite.float()])

    def _nan_on(self, dev: torch.device) -> torch.Tensor:
        if dev not in self._nan:
            self._nan[dev] = torch.full((), math.nan, device=dev)
        return self._nan[dev]


def norms_of(optimizer: Any) -> Optional[tuple]:
    """(total 2-norm, count of non-finite per-parameter norms) of the gradients ``optimizer`` holds, on the device."""
    grads = [p.grad for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
    if not grads:
        return None
    groups: dict = {}
    for g in grads:
        groups.setdefault((g.device, g.dtype, type(g)), []).append(g)
    norms = []
    for members in groups.values():
        if any(g.is_sparse for g in members):
            norms.extend(torch.linalg.vector_norm(g.coalesce().values()) for g in members)
        else:
            norms.extend(torch._foreach_norm(members))
    first = norms[0].device
    stacked = _whole(torch.stack([n.to(first).float() for n in norms]))
    return torch.linalg.vector_norm(stacked), (~torch.isfinite(stacked)).sum()


def _whole(tensor: torch.Tensor) -> torch.Tensor:
    """A DTensor made whole (its shards' partial norms reduced across the mesh); any other tensor as it is."""
    full = getattr(tensor, "full_tensor", None)
    return full() if callable(full) else tensor
