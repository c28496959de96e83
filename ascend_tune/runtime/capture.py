"""Zero-touch capture: the backward patch, the optimizer hooks, the GradScaler patch and the loader wrap.

Each function installs one thing and registers its undo on the caller's ``ExitStack`` in the same breath, so
leaving the ``with`` block, normally or by an exception, restores everything by construction.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import time
from collections.abc import Iterable, Iterator
from typing import Any, Callable, Optional

import torch

from ..recording.frames import THREAD_MARKS
from .batch_indices import BatchIndices
from .host_times import HostTimes

logger = logging.getLogger("ascend_tune")


def patch_backward(
    stack: contextlib.ExitStack, on_loss: Callable[[torch.Tensor], bool], on_done: Callable[[], None],
    host: HostTimes, compiled: Optional[Callable[..., Any]] = None,
) -> Callable[..., Any]:
    """Report every scalar tensor back-propagated through ``torch.autograd.backward`` (``on_loss(loss)``), and,
    when ``on_loss`` returned True, when its backward ends (``on_done()``); add the host seconds the call took after
    ``on_loss`` returned to ``host.backward``.

    ``Tensor.backward`` calls ``torch.autograd.backward`` through the module attribute, so this one patch sees both
    spellings. Only a scalar is a loss (pipeline stages back-propagate activations with a ``gradient``), and only a
    call made outside a backward counts: reentrant checkpointing calls backward from inside backward, on whichever
    thread the autograd engine runs that node (an accelerator's device thread), which torch's graph-task id tells
    (-1 on a thread that runs no backward) where a depth kept by this wrapper would not. It runs on every backward,
    so the usual case (``loss.backward()``, not inside our own work) calls nothing but the two reports.

    ``compiled``: where the step path is compiled (:mod:`.compiled`), the factory of this wrapper's C twin,
    ``compiled(original, on_done, graph_task, THREAD_MARKS, _scalar)``, ``on_loss`` and ``host`` bound in it.
    Returns the wrapper installed.
    """
    original = torch.autograd.backward
    clock = time.perf_counter
    graph_task = torch._C._current_graph_task_id

    @functools.wraps(original)
    def backward(tensors: Any, *args: Any, **kwargs: Any) -> Any:
        loss = tensors if type(tensors) is torch.Tensor else _scalar(tensors)  # loss.backward(): a Tensor
        if loss is None or loss.numel() != 1 or graph_task() != -1 or getattr(THREAD_MARKS, "internal", 0):
            return original(tensors, *args, **kwargs)  # not a loss, a reentrant backward, or our own work
        wants_done = on_loss(loss)
        began = clock()
        result = original(tensors, *args, **kwargs)
        host.backward += clock() - began
        if wants_done:
            on_done()
        return result

    if compiled is not None:
        backward = compiled(original, on_done, graph_task, THREAD_MARKS, _scalar)
    torch.autograd.backward = backward
    stack.callback(setattr, torch.autograd, "backward", original)
    return backward


def _scalar(tensors: Any) -> Optional[torch.Tensor]:
    """The one tensor ``tensors`` holds (a tensor subclass, or a list or tuple of one), else None."""
    if isinstance(tensors, (list, tuple)) and len(tensors) == 1:
        tensors = tensors[0]
    return tensors if isinstance(tensors, torch.Tensor) else None


def hook_optimizer(
    stack: contextlib.ExitStack,
    optimizer: torch.optim.Optimizer,
    on_pre: Callable[[Any, Any, Any], None],
    on_post: Callable[[Any, Any, Any], None],
) -> None:
    """Call ``on_pre(optimizer, args, kwargs)`` before each ``optimizer.step()`` and ``on_post(opt, args, kwargs)``
    after every optimizer's (a GAN's second one tells where its backwards' loss went), through torch's official step
    hooks: an instance pre-hook and one global post-hook, each the step's one call of ours on its side. (Every
    optimizer's steps, for loops whose optimizer is not given: :mod:`.optimizer_watch`.)

    ``optimizer.step`` may already be wrapped by an LR scheduler or a profiler; the hooks see the real step.
    """
    from torch.optim.optimizer import register_optimizer_step_post_hook

    pre = optimizer.register_step_pre_hook(on_pre)
    stack.callback(pre.remove)
    stack.callback(register_optimizer_step_post_hook(on_post).remove)


def patch_grad_scaler(
    stack: contextlib.ExitStack,
    on_scale: Callable[[torch.Tensor, torch.Tensor], None],
    on_step: Callable[[Any, Callable[[], Any]], Any],
    extra: Optional[Any] = None,
) -> None:
    """Record ``GradScaler.scale``'s input (the unscaled loss) and wrap ``GradScaler.step`` for the block.

    ``on_scale(scaled, loss)`` is told each scaling; ``on_step(optimizer, run)`` runs the real step through ``run``
    so the caller can see whether the optimizer's own step ran (GradScaler skips it on inf/nan gradients).
    ``extra``: a user's scaler whose class overrides ``scale`` / ``step`` (torch_npu ships its own), patched too.
    """
    classes = list(grad_scaler_classes())
    if extra is not None:
        for cls in type(extra).__mro__:
            if cls not in classes and ("scale" in vars(cls) or "step" in vars(cls)):
                classes.append(cls)
    for cls in classes:
        for name, make in (("scale", _wrap_scale), ("step", _wrap_step)):
            original = vars(cls).get(name)
            if original is None:
                continue
            setattr(cls, name, make(original, on_scale if name == "scale" else on_step))
            stack.callback(setattr, cls, name, original)


def grad_scaler_classes() -> tuple:
    """torch's GradScaler classes that define ``scale`` / ``step`` themselves.

    ``torch.amp.GradScaler`` (first in torch 2.3) is the device-generic class, and ``torch.cuda.amp.GradScaler`` /
    ``torch.cpu.amp.GradScaler`` are thin subclasses of it; before it, ``torch.cuda.amp.GradScaler`` was the class
    (torch 2.1 and 2.2 have no CPU GradScaler at all).
    """
    found = []
    for owner in (torch.amp, torch.cuda.amp, getattr(torch.cpu, "amp", None)):
        cls = getattr(owner, "GradScaler", None)
        if isinstance(cls, type) and ("scale" in vars(cls) or "step" in vars(cls)):
            found.append(cls)
    return tuple(found)


def _wrap_scale(original: Callable, on_scale: Callable) -> Callable:
    @functools.wraps(original)
    def scale(self: Any, outputs: Any) -> Any:
        scaled = original(self, outputs)
        if isinstance(outputs, torch.Tensor) and isinstance(scaled, torch.Tensor):
            on_scale(scaled, outputs)
        return scaled

    return scale


def _wrap_step(original: Callable, on_step: Callable) -> Callable:
    @functools.wraps(original)
    def step(self: Any, optimizer: Any, *args: Any, **kwargs: Any) -> Any:
        return on_step(optimizer, lambda: original(self, optimizer, *args, **kwargs))

    return step


class EpochTracker:
    """Calls ``sampler.set_epoch`` at each new pass over the loader, unless the script does it itself.

    A script that calls ``set_epoch`` (resumed runs do, with their own epoch number) is left alone: the epoch the
    sampler holds at the start of a pass is compared with the one we last set.
    """

    def __init__(self) -> None:
        self.passes = 0
        self._last_set: Optional[int] = None

    def begun(self, loader: Any) -> None:
        """The first pass is under way already: the next one is the second."""
        self.passes = 1
        current = getattr(getattr(loader, "sampler", None), "epoch", None)
        self._last_set = current if isinstance(current, int) else None

    def begin_pass(self, loader: Any) -> int:
        sampler = getattr(loader, "sampler", None)
        current = getattr(sampler, "epoch", None)
        epoch = self.passes if current is None else current
        if callable(getattr(sampler, "set_epoch", None)) and isinstance(current, int):
            if self.passes > 0 and current == self._last_set:
                epoch = current + 1
                sampler.set_epoch(epoch)
            self._last_set = epoch
        self.passes += 1
        return epoch


def iterate_marked(iterator: Iterator, on_batch: Callable[[Any, float], None],
                   indices: Optional[BatchIndices] = None) -> Iterator:
    """Yield from ``iterator``, reporting each batch as it is handed to the training loop, with the host seconds
    the loop waited for it: ``on_batch(batch, seconds)``, one call a batch."""
    iterator = iter(iterator)
    clock = time.perf_counter
    while True:
        began = clock()
        try:
            batch = next(iterator)
        except StopIteration:
            return
        waited = clock() - began
        if indices is not None and indices.on:
            indices.handed_out()
        on_batch(batch, waited)
        yield batch


def _recording_index_sampler(self: Any) -> Any:
    sampler = super(type(self), self)._index_sampler
    indices = self.__dict__["_ascend_tune_marks"][3]
    if indices is None or not indices.on or not getattr(self, "in_order", True):
        return sampler
    return indices.recording(sampler)


_subclasses: dict = {}


def wrap_loader(
    stack: contextlib.ExitStack,
    loader: Any,
    on_pass: Callable[[int], None],
    on_batch: Callable[[Any, float], None],
    begun: bool = False,
    indices: Optional[BatchIndices] = None,
    iterate: Callable[..., Iterator] = iterate_marked,
) -> bool:
    """Wrap one loader instance in place by swapping its class for a subclass; False if it cannot be swapped.
    ``begun``: the loop is already in its first pass (the next ``__iter__`` begins the second).

    ``DataLoader.__iter__`` is looked up on the type, so patching the instance would not work, and patching
    ``_BaseDataLoaderIter`` (as ptdbg and msprobe did) would touch every loader in the process. ``indices``: where
    the sample indices of the batches go once a feature turns it on (:class:`BatchIndices`). ``iterate``:
    :func:`iterate_marked` or its compiled twin.
    """
    original = type(loader)
    if getattr(original, "__ascend_tune_wrapped__", False):
        return True  # already wrapped by an enclosing monitor: that one marks the steps
    if original not in _subclasses:
        attributes = {
            "__ascend_tune_wrapped__": True,
            "__iter__": _marked_iter,
            "__module__": original.__module__,
            "__qualname__": original.__qualname__,
        }
        if isinstance(getattr(original, "_index_sampler", None), property):  # a torch DataLoader
            attributes["_index_sampler"] = property(_recording_index_sampler)
        _subclasses[original] = type(original.__name__, (original,), attributes)
    try:
        object.__setattr__(loader, "__class__", _subclasses[original])
    except (TypeError, AttributeError):  # builtins, __slots__ classes, a class property (accelerate's loaders)
        return False
    tracker = EpochTracker()
    if begun:
        tracker.begun(loader)
    object.__setattr__(loader, "_ascend_tune_marks", (tracker, on_pass, on_batch, indices, iterate))
    stack.callback(_unwrap, loader, original)
    return True


def _marked_iter(self: Any) -> Iterator:
    tracker, on_pass, on_batch, indices, iterate = self.__dict__["_ascend_tune_marks"]
    on_pass(tracker.begin_pass(self))
    # torch names only __next__ in a trace; starting a pass (worker start-up, the sampler's seed read with .item())
    # is loader work too, named the same way so the advisor counts it as the loader's, not as a host sync of the step
    with torch.profiler.record_function(f"enumerate(DataLoader)#{type(self).__name__}.__iter__"):
        iterator = super(type(self), self).__iter__()
    return iterate(iterator, on_batch, indices)


def _unwrap(loader: Any, original: type) -> None:
    object.__setattr__(loader, "__class__", original)
    loader.__dict__.pop("_ascend_tune_marks", None)


def batch_size(batch: Any) -> Optional[int]:
    """Samples in a batch: the first dimension of the batch tensor, or of the first tensor it holds."""
    if isinstance(batch, (list, tuple)):  # the default collate's (inputs, targets) first: it runs every batch
        for item in batch:
            if isinstance(item, torch.Tensor) and item.dim() > 0:
                return item.size(0)
        return None
    if isinstance(batch, torch.Tensor):
        return batch.size(0) if batch.dim() > 0 else None
    if isinstance(batch, dict):
        return batch_size(list(batch.values()))
    return None


class MarkedLoader:
    """What ``mon.loader(dl)`` returns: iterates ``dl`` with each batch marked as a step boundary."""

    def __init__(self, loader: Iterable, on_pass: Any, on_batch: Any,
                 iterate: Callable[..., Iterator] = iterate_marked):
        self._loader = loader
        self._on_pass = on_pass
        self._on_batch = on_batch
        self._iterate = iterate
        self._epochs = EpochTracker()

    def __iter__(self) -> Iterator:
        self._on_pass(self._epochs.begin_pass(self._loader))
        return self._iterate(iter(self._loader), self._on_batch)

    def __len__(self) -> int:
        return len(self._loader)  # type: ignore[arg-type]
