"""The step's gradient norm, on the device: what ``grad_norm`` in metrics.jsonl is.

- When the step calls ``torch.nn.utils.clip_grad_norm_`` (patched for the block, seen without being told), it is
  that call's returned total norm: the pre-clip norm the Hugging Face Trainer logs (several calls in one step: the
  last one's); torch's split form (``get_total_norm``, then ``clip_grads_with_norm_``, which accelerate calls) gives
  the norm it clipped by;
- else the total 2-norm of the gradients at the optimizer's step (its pre-hook: after a GradScaler's unscale, after
  gradient accumulation), over every parameter the stepping optimizer holds; several optimizers stepping in one
  step give the norm of all their gradients together.

``grad_nonfinite`` counts the parameters whose gradient holds a NaN or an infinity (seen at the optimizer's step).
When every parameter the stepping optimizer holds is among those a 2-norm ``clip_grad_norm_`` of the step clipped,
nothing is computed here: the count follows from the clip's norm, 0 when it is finite, else every one of them (a
NaN norm makes clipping multiply every gradient by NaN: exactly what the optimizer then holds). How many that is,
torch's clip tells when the optimizer holds its very parameters (the length of the gradient list it gives its inner
total norm, torch >= 2.6: no ``.grad`` read of ours); else they are counted at the optimizer's step. A clipped step
thus costs health no kernel and no copy, only the clip's result kept until the log step. A step GradScaler skips
runs no optimizer step: its ``grad_nonfinite`` is unknown (NaN), its ``grad_norm`` the clip call's when there was
one.
FSDP2 / DTensor gradients give the global norm (the per-parameter norms made whole, one collective per step); DDP
gradients are the same on every rank after the all-reduce, so the rank's norm is global. Nothing here reads a value
back: a step's :class:`StepNorm` stays on the device until the log step's read-back.
"""

from __future__ import annotations

import contextlib
import functools
import operator
from itertools import chain, repeat
from typing import Any, NamedTuple, Optional

import torch

from ..recording.frames import internal

_GRAD = operator.attrgetter("grad")
_PARAMS = operator.itemgetter("params")


class StepNorm(NamedTuple):
    """One step's gradient norm and non-finite count, on the device until the log step."""

    norm: torch.Tensor  # 0-dim
    nonfinite: Optional[torch.Tensor]  # 0-dim count; None: ``nonfinite_if``, or unknown when that is None too
    nonfinite_if: Optional[int] = None  # the count when ``norm`` is not finite (0 when it is): a clip's norm reused


class GradNorms:
    """Collects one step's :class:`StepNorm`."""

    def __init__(self) -> None:
        self._clip: Optional[torch.Tensor] = None
        self._clipped: Optional[list] = None  # the parameters the last clip normed when a 2-norm, else None
        self._normed: Optional[int] = None  # how many gradients the last clip normed, when torch's said
        self._seen: Optional[int] = None  # how many the clip's inner total norm was given (torch >= 2.6)
        self._parts: list = []  # per optimizer step in this step: (total, count tensor), or (clip norm, int) reused
        self._also: Optional[Any] = None

    def install(self, stack: contextlib.ExitStack, optimizer: Any, also: Optional[Any] = None) -> None:
        """Watch ``optimizer``'s steps (every optimizer's when None) and ``clip_grad_norm_`` until ``stack`` closes;
        ``also()`` runs at each optimizer step and before each clip (the module statistics' moment: the gradients
        before they are clipped)."""
        self._also = also

        def both(opt: Any, args: Any, kwargs: Any) -> None:
            self.before_step(opt)
            also()

        hook = self.before_step if also is None else both  # alone: no frame of ours between torch's call and it
        if optimizer is not None:
            handle = optimizer.register_step_pre_hook(hook)
        else:
            from torch.optim.optimizer import register_optimizer_step_pre_hook

            handle = register_optimizer_step_pre_hook(hook)
        stack.callback(handle.remove)
        utils = torch.nn.utils
        original = utils.clip_grad_norm_
        wrapped = self._wrap_clip(original)
        for owner in (utils, getattr(utils, "clip_grad", None)):
            if owner is not None and getattr(owner, "clip_grad_norm_", None) is original:
                owner.clip_grad_norm_ = wrapped
                stack.callback(setattr, owner, "clip_grad_norm_", original)
        inner = getattr(getattr(utils, "clip_grad", None), "_get_total_norm", None)  # torch >= 2.6
        if inner is not None:  # what clip_grad_norm_ calls with the gradients it norms: how many, without a read
            utils.clip_grad._get_total_norm = self._wrap_total(inner)
            stack.callback(setattr, utils.clip_grad, "_get_total_norm", inner)
        split = getattr(utils, "clip_grads_with_norm_", None)  # torch >= 2.6; not what clip_grad_norm_ calls inside
        if split is not None:
            utils.clip_grads_with_norm_ = self._wrap_split(split)
            stack.callback(setattr, utils, "clip_grads_with_norm_", split)

    def _before_clip(self) -> None:
        if self._also is not None:
            try:
                self._also()
            except Exception:  # our own bookkeeping never reaches the loop
                pass

    def _wrap_clip(self, original: Any) -> Any:
        @functools.wraps(original)
        def clip_grad_norm_(*args: Any, **kwargs: Any) -> Any:
            if self._also is not None:
                self._before_clip()
            args, kwargs, params = _listed(args, kwargs)
            self._seen = None
            total = original(*args, **kwargs)
            normed, self._seen = self._seen, None
            try:
                if type(total) is torch.Tensor and not total.requires_grad and not total.dim():
                    self._clip = total  # torch's own: kept as it is (_kept, inline: once a step)
                elif isinstance(total, torch.Tensor):
                    self._clip = _kept(total)
                else:
                    return total
                # a 2-norm: the default (two arguments, no norm_type, the usual call), else as the call says
                two = (len(args) < 3 and not kwargs) or _two_norm(args, kwargs)
                self._clipped = params if params is not None and two else None
                self._normed = normed
            except Exception:  # our own bookkeeping never reaches the loop
                self._clip = self._clipped = self._normed = None
            return total

        return clip_grad_norm_

    def _wrap_total(self, original: Any) -> Any:
        """torch's inner total norm, as ``clip_grad_norm_`` calls it with the list of the gradients it norms: their
        number kept (the clip's count when its norm is not finite), the call unchanged."""

        @functools.wraps(original)
        def _get_total_norm(tensors: Any, *args: Any, **kwargs: Any) -> Any:
            self._seen = len(tensors) if type(tensors) is list else None
            return original(tensors, *args, **kwargs)

        return _get_total_norm

    def _wrap_split(self, original: Any) -> Any:
        """torch's split clipping (``get_total_norm``, then ``clip_grads_with_norm_(parameters, max_norm,
        total_norm)``: accelerate's and so the HF Trainer's): the norm it is given is the step's; of which kind it
        is (a 2-norm?) is not said, so the count stays the optimizer step's."""

        @functools.wraps(original)
        def clip_grads_with_norm_(*args: Any, **kwargs: Any) -> Any:
            self._before_clip()
            out = original(*args, **kwargs)
            try:
                total = args[2] if len(args) > 2 else kwargs.get("total_norm")
                if isinstance(total, torch.Tensor):
                    self._clip = _kept(total)
                    self._clipped = None
            except Exception:  # our own bookkeeping never reaches the loop
                self._clip = self._clipped = None
            return out

        return clip_grads_with_norm_

    def before_step(self, optimizer: Any, args: Any = None, kwargs: Any = None) -> None:
        """The optimizer is about to apply its gradients: their norms, on the device, unless a clip has them (an
        optimizer step pre-hook: ``args`` and ``kwargs`` are the step's)."""
        try:
            params = list(chain.from_iterable(map(_PARAMS, optimizer.param_groups)))
            clipped = self._clipped
            same = clipped is not None and len(params) == len(clipped) and all(map(operator.is_, params, clipped))
            if same or (clipped is not None and _among(params, clipped)):
                # its gradients are the clip's: normed, then scaled; only how many there are is needed: as many as
                # the clip normed when they are its very parameters and torch said (nothing read), else counted (in
                # C: no list, no frame of ours)
                count = self._normed if same and self._normed is not None else sum(
                    map(operator.is_not, map(_GRAD, params), repeat(None)))
                if count:
                    self._parts.append((self._clip, count))
                return
            grads = [g for g in map(_GRAD, params) if g is not None]  # the one read of each .grad (~0.35 us)
            if not grads:
                return
            with internal(), torch.no_grad():
                self._parts.append(norms_of(grads))
        except Exception:
            return

    def take(self) -> Optional[StepNorm]:
        """The step's :class:`StepNorm` (None when it saw neither a clip nor an optimizer step)."""
        parts, clip = self._parts, self._clip
        self._parts, self._clip, self._clipped, self._normed = [], None, None, None
        if not parts:
            return None if clip is None else StepNorm(clip, None)
        if len(parts) == 1 and isinstance(parts[0][1], int) and parts[0][0] is clip:
            return StepNorm(clip, None, parts[0][1])  # the clipped step: nothing of ours ran on the device
        with internal(), torch.no_grad():
            dev = parts[0][0].device
            counts = [(~torch.isfinite(t) * c) if isinstance(c, int) else c for t, c in parts]
            if clip is not None:
                total = clip
            elif len(parts) == 1:
                total = parts[0][0]
            else:
                total = torch.linalg.vector_norm(torch.stack([t.to(dev) for t, _ in parts]))
            nonfinite = counts[0] if len(counts) == 1 else torch.stack([c.to(dev) for c in counts]).sum()
            return StepNorm(total, nonfinite)


def norms_of(grads: list) -> tuple:
    """(total 2-norm, count of non-finite per-parameter norms) of ``grads``, on the device."""
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


def _listed(args: tuple, kwargs: dict) -> tuple:
    """``clip_grad_norm_``'s arguments with its parameters as a list (a generator can be read only once, and the
    clip and we both read them), and that list (None when the parameters are not where expected)."""
    if args:
        parameters, rest = args[0], args[1:]
    elif "parameters" in kwargs:
        parameters, rest = kwargs.pop("parameters"), ()
    else:
        return args, kwargs, None
    if isinstance(parameters, torch.Tensor):
        return (parameters, *rest), kwargs, [parameters]
    params = list(parameters)  # what the clip's own list() would raise, it raises here
    # an empty generator goes as it came: clip_grad_norm_ warns about that one
    return (params if params else parameters, *rest), kwargs, params


def _among(params: list, clipped: list) -> bool:
    """Whether every one of ``params`` is among ``clipped`` (by identity: ``==`` on tensors compares values)."""
    return set(map(id, clipped)).issuperset(map(id, params))


def _two_norm(args: tuple, kwargs: dict) -> bool:
    norm_type = args[2] if len(args) > 2 else kwargs.get("norm_type", 2.0)
    return isinstance(norm_type, (int, float)) and float(norm_type) == 2.0


def _kept(total: torch.Tensor) -> torch.Tensor:
    """A clip's norm as kept until the log step: whole, 0-dim, out of autograd (torch's already is: no op then)."""
    if type(total) is torch.Tensor and not total.requires_grad and not total.dim():
        return total
    with internal():  # a DTensor's is made whole by a collective: ours
        total = _whole(total)
        if total.requires_grad or total.dim():
            total = total.detach().reshape(())
    return total


def _whole(tensor: torch.Tensor) -> torch.Tensor:
    """A DTensor made whole (its shards' partial norms reduced across the mesh); any other tensor as it is."""
    full = getattr(tensor, "full_tensor", None)
    return full() if callable(full) else tensor
