"""Replayed calls checked in batches: small elementwise calls made without autograd (an optimizer's per-parameter
loop) are copied as they run and replayed together, one float64 call for all the calls of one kind.

torch's single-tensor optimizers (the CPU default) call the same few ops on every parameter, AdamW nine. Replayed
one at a time, such a call on a small tensor costs ~100 us of fixed costs (the copies, a float64 call, ~15 measuring
ops, its row) against ~2 us on the device. A call qualifies here (:meth:`Batches.stage`) when it is an elementwise
op of :data:`ELEMENTWISE`, grad mode is off, its tensors are dense floating tensors of one shape of at most
``golden.SMALL`` elements, and its other arguments are plain numbers. Its arguments are copied to the CPU in float64
before it runs, its result after; both join its batch: the calls of the same op with the same numbers, dtypes and
pattern of repeated arguments. A batch is replayed at the step's end, or when it holds :data:`LIMIT` elements: each
argument's copies concatenated, the op run once on them, the device's results measured against its result segment
by segment (:func:`measure_segments`), each call's row written into the place kept for it.

Each row is the one the call would have had alone: an elementwise op computes each element from the same elements
of its arguments, so the concatenated call gives each call's own float64 values, and the errors of each segment are
measured by the arithmetic that measures one small tensor (tests/test_precision_replay_batch.py compares the rows
op by op). Unlike a call replayed alone, a batched call's copies live until its batch is replayed: at most
:data:`LIMIT` elements per batch.
"""

from __future__ import annotations

import math
from types import FrameType
from typing import Any, Optional

import numpy as np
import torch

from ..analysis.dumps.differences import ReplayError
from ..analysis.dumps.model import parse_frame
from ..analysis.dumps.replay import PASS, SUSPECT, breach
from ..analysis.dumps.tolerance import Standard
from . import golden
from .golden import CPU
from .replay_rows import Described, ReplayRows

# base names of the elementwise ops batched: what torch's single-tensor optimizers call on each parameter, and kin
ELEMENTWISE = frozenset(
    f"{kind}.{op}" for kind, ops in (
        ("Tensor", "add add_ sub sub_ mul mul_ div div_ lerp lerp_ addcmul addcmul_ addcdiv addcdiv_ sqrt sqrt_ "
                   "neg neg_ __add__ __radd__ __iadd__ __sub__ __rsub__ __isub__ __mul__ __rmul__ __imul__ "
                   "__truediv__ __rtruediv__ __itruediv__ __neg__"),
        ("Torch", "add sub mul div lerp addcmul addcdiv sqrt neg"),
    ) for op in ops.split())
LIMIT = 1 << 16  # elements of results a batch holds before it is replayed
_FLOATING = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_DENSE = (torch.Tensor, torch.nn.Parameter)  # what golden.GoldenCopy copies (subclasses are refused)


class Staged:
    """A call's copies made before it runs; :meth:`Batches.commit` adds it to its batch once it has run."""

    __slots__ = ("batch", "name", "copies")

    def __init__(self, batch: _Batch, name: str, copies: list):
        self.batch, self.name, self.copies = batch, name, copies


class _Batch:
    """The calls of one op with the same numbers, dtypes and pattern of tensor arguments, waiting to be replayed."""

    def __init__(self, func: Any, args: tuple, kwargs: dict):
        self.func, self.args, self.kwargs = func, args, kwargs  # tensor arguments: their index in a call's copies
        self.entries: list = []  # (name, copies, result, dtype, shape, row slot, stack id)
        self.elements = 0

    def call_args(self, copies: list) -> tuple:
        """``(args, kwargs)`` with ``copies`` in the tensor arguments' places."""
        return (tuple(copies[a] if isinstance(a, _Arg) else a for a in self.args),
                {k: copies[v] if isinstance(v, _Arg) else v for k, v in self.kwargs.items()})


class Batches:
    """One replayed step's batches (see the module docstring); ``rows`` keeps each call's place, ``stacks``
    (the engine's) names where a suspect was called."""

    def __init__(self, rows: ReplayRows, stacks: Any, lock: Any, scratch: golden.Scratch):
        self._rows, self._stacks, self._lock, self._scratch = rows, stacks, lock, scratch
        self._batches: dict = {}
        self._caller: Optional[FrameType] = None  # the last call's frame, and its stacks' ids by line
        self._stack_ids: dict = {}

    def stage(self, name: str, base: str, func: Any, args: tuple, kwargs: dict) -> Optional[Staged]:
        """Copy the arguments of a call that qualifies, before it runs; None when it does not qualify (it is then
        replayed alone). ``base``: its name without the count (``Tensor.mul_``)."""
        if base not in ELEMENTWISE or torch.is_grad_enabled() or not args or type(args[0]) not in _DENSE or \
                "out" in kwargs or not 0 < args[0].numel() <= golden.SMALL:  # larger: passes cost more than calls
            return None
        shape = args[0].shape
        tensors: list = []
        key: list = [func]
        for value in (*args, *kwargs.values()):
            kind = type(value)
            if kind in _DENSE:
                if value.shape != shape or value.dtype not in _FLOATING or value.layout is not torch.strided or \
                        value.is_meta:
                    return None
                index = 0  # a tensor passed twice is copied once (x.addcmul_(g, g)), as a call alone copies it
                while index < len(tensors) and tensors[index] is not value:
                    index += 1
                if index == len(tensors):
                    tensors.append(value)
                key.append((index, value.dtype))
            elif kind is float:  # -0.0 and 0.0 are equal keys but not equal factors
                key.append((kind, value, math.copysign(1.0, value)))
            elif kind is int or kind is bool:
                key.append((kind, value))
            else:
                return None
        key.extend(kwargs)
        key_t = tuple(key)
        batch = self._batches.get(key_t)
        if batch is None:
            batch = self._batches[key_t] = _batch_for(func, args, kwargs, tensors)
        # grad mode is off: the copies record no graph
        return Staged(batch, name, [t.reshape(-1).to(CPU, torch.float64, False, True) for t in tensors])

    def commit(self, staged: Staged, result: torch.Tensor, caller: Optional[FrameType]) -> None:
        """Add a staged call that has run to its batch, its row's place kept (``result``: the device's result, of
        the arguments' shape: the op is elementwise)."""
        copy = result.reshape(-1).to(CPU, torch.float64, False, True)
        batch = staged.batch
        with self._lock:
            batch.entries.append((staged.name, staged.copies, copy, result.dtype, tuple(result.shape),
                                  self._rows.reserve(), self._stack_id(caller)))
            batch.elements += copy.numel()
            full = batch.elements >= LIMIT
        if full:
            self._replay(batch)

    def _stack_id(self, caller: Optional[FrameType]) -> Optional[int]:
        """The id of the stack a call was made from: an optimizer's calls come from a few lines of one frame (held,
        so that it is the same frame), whose callers stay where they are while it runs."""
        if caller is None:
            return None
        if caller is not self._caller:
            self._caller, self._stack_ids = caller, {}
        stack_id = self._stack_ids.get(caller.f_lineno)
        if stack_id is None:
            stack_id = self._stack_ids[caller.f_lineno] = self._stacks.capture(caller)[0]
        return stack_id

    def flush(self) -> None:
        """Replay every batch (the step ends)."""
        with self._lock:
            batches, self._batches = self._batches, {}
        self._caller = None
        for batch in batches.values():
            if batch.entries:
                self._replay(batch)

    def _replay(self, batch: _Batch) -> None:
        with self._lock:
            entries, batch.entries, batch.elements = batch.entries, [], 0
        device = torch.cat([e[2] for e in entries])
        lengths = [e[2].numel() for e in entries]
        standard = golden.standard_of([], (entries[0][3],))
        try:
            gargs, gkwargs = batch.call_args([torch.cat(parts) for parts in zip(*(e[1] for e in entries))])
            gold = golden.run_on_cpu(batch.func, gargs, gkwargs)
            if not isinstance(gold, torch.Tensor) or gold.shape != device.shape:
                raise golden.Unreplayable("the CPU replay's result is not one tensor of the arguments' shape")
            gold = gold.to(torch.float64)
            errors = measure_segments(device.numpy(), gold.numpy(), lengths, standard.rtol)
        except Exception as exc:
            reason = str(exc) if isinstance(exc, golden.Unreplayable) else golden.failure(exc)
            for name, _, _, dtype, shape, slot, _ in entries:
                self._rows.skipped(name, Described(dtype, shape), reason, at=slot)
            return
        start = 0
        for (name, _, result, dtype, shape, slot, stack_id), n, error in zip(entries, lengths, errors):
            if error is None:  # inf or nan: measured as a call replayed alone is
                error = golden.measure(result, gold[start:start + n], standard.rtol, self._scratch)
            start += n
            self._add(name, Described(dtype, shape), error, standard, stack_id, slot)

    def _add(self, name: str, like: Described, error: Any, standard: Standard, stack_id: Optional[int],
             slot: int) -> None:
        why = breach(error, standard)
        frames: tuple = ()
        if why and stack_id is not None:
            frames = tuple(parse_frame(f) for f in self._stacks.frames[stack_id])
        self._rows.add(name, like, SUSPECT if why else PASS, error, standard, why or "", frames, slot)


class _Arg(int):
    """A tensor argument's place in a call's list of copies."""


def _batch_for(func: Any, args: tuple, kwargs: dict, tensors: list) -> _Batch:
    def slot(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return _Arg(next(i for i, t in enumerate(tensors) if t is value))
        return value

    return _Batch(func, tuple(slot(a) for a in args), {k: slot(v) for k, v in kwargs.items()})


@np.errstate(all="ignore")  # an inf or nan is found where it arises: its segment is left to measure's own path
def measure_segments(device: np.ndarray, gold: np.ndarray, lengths: list, rtol: float) -> list:
    """:func:`.golden.measure`'s metrics for each segment of two flat float64 arrays (``lengths``: the segments'
    sizes, in order, none empty), by its arithmetic for a small tensor with each pass run once over all segments:
    one ReplayError per segment, or None where a value is inf or nan. Only the sums of squares are taken segment by
    segment (one ``np.dot`` each, as for one tensor)."""
    starts = np.cumsum([0, *lengths[:-1]])
    diff = np.abs(device - gold)
    highs = np.maximum.reduceat(diff, starts).tolist()
    magnitude = np.abs(gold)
    out: list = [golden.EXACT] * len(lengths)
    live, rms = [], np.ones(len(lengths))  # live: (segment, start, size, norm of its golden values, their rms)
    for i, (start, n, max_abs) in enumerate(zip(starts.tolist(), lengths, highs)):
        if not math.isfinite(max_abs) and not (np.isfinite(device[start:start + n]).all() and
                                               np.isfinite(gold[start:start + n]).all()):
            out[i] = None
        elif max_abs != 0.0:
            part = magnitude[start:start + n]
            total = math.sqrt(float(np.dot(part, part)))
            live.append((i, start, n, total, total / math.sqrt(n)))
            if live[-1][4] > 0:
                rms[i] = live[-1][4]
    if not live:
        return out
    rel = diff / np.maximum(magnitude, np.repeat(rms, lengths))
    rel_highs = np.maximum.reduceat(rel, starts).tolist()
    for i, start, n, total, segment_rms in live:
        if segment_rms > 0:
            max_rel = rel_highs[i]
            over = int(np.count_nonzero(rel[start:start + n] > rtol)) if max_rel > rtol else 0
        else:  # a golden result of zeros: any difference is infinitely far off
            max_rel, over = math.inf, int(np.count_nonzero(diff[start:start + n]))
        part = diff[start:start + n]
        norm_err = math.sqrt(float(np.dot(part, part))) / total if total > 0 else math.inf
        out[i] = ReplayError(highs[i], max_rel, min(over / n, 1.0), norm_err, 0)
    return out
