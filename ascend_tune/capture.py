"""Zero-touch capture: the backward patch, the optimizer hooks, the GradScaler patch and the loader wrap.

Each function installs one thing and registers its undo on the caller's ``ExitStack`` in the same breath, so
leaving the ``with`` block, normally or by an exception, restores everything by construction.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import sys
import threading
from collections.abc import Iterable, Iterator
from typing import Any, Callable, Optional

import torch

_local = threading.local()
logger = logging.getLogger("ascend_tune")


class _Internal:
    # a plain class, not @contextmanager: it runs on every backward, where a generator costs microseconds
    __slots__ = ()

    def __enter__(self) -> None:
        _local.internal = getattr(_local, "internal", 0) + 1

    def __exit__(self, *exc: Any) -> None:
        _local.internal -= 1


_INTERNAL = _Internal()


def internal() -> _Internal:
    """Mark tensor work done by ascend_tune itself (loss accumulation, statistics) so no capture records it."""
    return _INTERNAL


def in_internal() -> bool:
    """True while ascend_tune's own tensor work runs on this thread."""
    return getattr(_local, "internal", 0) > 0


# the code objects of functions that make a torch call on the user's behalf (a recorder's call_api); a function mode
# beneath such a recorder sees that function as the call's maker, and looks past it to the user's frame
_ON_BEHALF: set = set()


def on_behalf(fn: Callable) -> Callable:
    """Mark ``fn`` (a recorder's ``call_api``) as running the torch calls it receives for the code that made them:
    :func:`user_caller` looks past its frames. Recorders stack (a statistics dump beside a replay, the shape
    detector beside a dump), so the lower one would otherwise name the upper one's frame as the caller."""
    _ON_BEHALF.add(fn.__code__)
    return fn


def user_caller(frame: Any) -> Any:
    """``frame``, or the first frame above it that is not an :func:`on_behalf` function's: the call's maker."""
    while frame is not None and frame.f_code in _ON_BEHALF:
        frame = frame.f_back
    return frame


def remove_function_mode(mode: Any) -> bool:
    """Remove ``mode`` from torch's function-mode stack wherever it sits, keeping the modes above it in order;
    False when it is not on the stack (torch has set it aside while its handler runs).

    ``TorchFunctionMode.__exit__`` pops whatever is on top: when undos do not run in push order (a block ending by
    an exception), popping the top would take another feature's mode off in place of this one.
    """
    depth = torch._C._len_torch_function_stack()
    if not any(torch._C._get_function_stack_at(i) is mode for i in range(depth)):
        return False
    above = []
    while True:
        top = torch._C._pop_torch_function_stack()
        if top is mode:
            break
        above.append(top)
    for other in reversed(above):
        torch._C._push_on_torch_function_stack(other)
    return True


class ModeRemoval:
    """Takes function modes off torch's stack now, or at the first chance when torch has set one aside.

    Torch sets a mode aside while its handler runs and puts it back afterwards. A step that ends inside a torch call
    (with no optimizer a step ends in ``loss.backward()``, which reaches the mode) cannot remove it then; the next
    module call (a one-shot global pre-hook) or an explicit :meth:`retry` (the next step, the block's end) can.
    """

    def __init__(self) -> None:
        self._pending: list = []
        self._hook: Any = None

    def remove(self, mode: Any) -> None:
        if not remove_function_mode(mode):
            self._pending.append(mode)
            if self._hook is None:
                self._hook = torch.nn.modules.module.register_module_forward_pre_hook(lambda *_: self.retry())

    @property
    def pending(self) -> bool:
        """Whether a mode is still waiting to be taken off."""
        return bool(self._pending)

    def retry(self) -> None:
        self._pending = [m for m in self._pending if not remove_function_mode(m)]
        if not self._pending and self._hook is not None:
            self._hook.remove()
            self._hook = None


def global_forward_hook(hook: Callable[[Any, tuple, dict, Any], None], *, always_call: bool = False) -> Any:
    """Register ``hook(module, args, kwargs, output)`` as a forward hook of every module; returns its handle.

    Global forward hooks get the forward's keyword arguments from torch 2.6 on (``with_kwargs``); on an older torch
    ``kwargs`` is always ``{}`` (said once in the log), since a hook on each module would be pickled with it.
    """
    register = torch.nn.modules.module.register_module_forward_hook
    if "with_kwargs" in inspect.signature(register).parameters:
        return _KwargsHookHandle(register(hook, with_kwargs=True, always_call=always_call))
    if not getattr(global_forward_hook, "said", False):
        global_forward_hook.said = True  # type: ignore[attr-defined]
        logger.info("ascend_tune: torch %s gives global module hooks no keyword arguments (torch 2.6 does): "
                    "module records show input_kwargs as {}", torch.__version__)
    return register(lambda module, args, output: hook(module, args, {}, output), always_call=always_call)


class _KwargsHookHandle:
    """A global kwargs hook's handle whose ``remove()`` also clears the hook's id from torch's with_kwargs table.

    torch's handle leaves it there (torch 2.13), and ``torch.compile`` then warns about global hooks that are gone.
    """

    def __init__(self, handle: Any):
        self._handle = handle

    def remove(self) -> None:
        self._handle.remove()
        table = getattr(torch.nn.modules.module, "_global_forward_hooks_with_kwargs", None)
        if isinstance(table, dict):
            table.pop(self._handle.id, None)


def patch_backward(
    stack: contextlib.ExitStack, on_loss: Callable[[torch.Tensor], None], on_done: Callable[[], None]
) -> None:
    """Report every scalar tensor back-propagated through ``torch.autograd.backward``, and when its backward ends.

    ``Tensor.backward`` calls ``torch.autograd.backward`` through the module attribute, so this one patch sees both
    spellings. Only a scalar is a loss (pipeline stages back-propagate activations with a ``gradient``), and only
    the outermost call counts (reentrant checkpointing calls backward from inside backward).
    """
    original = torch.autograd.backward

    @functools.wraps(original)
    def backward(tensors: Any, *args: Any, **kwargs: Any) -> Any:
        depth = getattr(_local, "depth", 0)
        loss = _scalar(tensors) if depth == 0 and not in_internal() else None
        if loss is not None:
            on_loss(loss)
        _local.depth = depth + 1
        try:
            result = original(tensors, *args, **kwargs)
        finally:
            _local.depth = depth
        if loss is not None:
            on_done()
        return result

    torch.autograd.backward = backward
    stack.callback(setattr, torch.autograd, "backward", original)


def _scalar(tensors: Any) -> Optional[torch.Tensor]:
    if isinstance(tensors, (list, tuple)) and len(tensors) == 1:
        tensors = tensors[0]
    if isinstance(tensors, torch.Tensor) and tensors.numel() == 1:
        return tensors
    return None


def hook_optimizer(
    stack: contextlib.ExitStack,
    optimizer: torch.optim.Optimizer,
    on_pre: Callable[[Any], None],
    on_post: Callable[[Any], None],
) -> None:
    """Call ``on_pre(optimizer)`` / ``on_post(optimizer)`` around each ``optimizer.step()`` through torch's official
    step hooks. (Every optimizer's steps, for loops whose optimizer is not given: :mod:`.optimizer_watch`.)

    ``optimizer.step`` may already be wrapped by an LR scheduler or a profiler; the hooks see the real step.
    """
    pre = optimizer.register_step_pre_hook(lambda opt, args, kwargs: on_pre(opt))
    stack.callback(pre.remove)
    post = optimizer.register_step_post_hook(lambda opt, args, kwargs: on_post(opt))
    stack.callback(post.remove)


def compile_in_use(models: tuple = ()) -> bool:
    """Whether ``torch.compile``d code may run: one of ``models`` (or a submodule) is compiled, or dynamo has compiled
    a frame in this process. False while dynamo is not even imported (frameworks import it without compiling)."""
    if "torch._dynamo" not in sys.modules:
        return False
    for model in models:
        if type(model).__name__ == "OptimizedModule":
            return True
        if any(getattr(m, "_compiled_call_impl", None) is not None for m in model.modules()):  # module.compile()
            return True
    try:
        from torch._dynamo.utils import counters

        return counters["frames"]["total"] > 0
    except Exception:  # a dynamo without those counters: assume it compiles
        return True


def run_eager(stack: contextlib.ExitStack, models: tuple = ()) -> bool:
    """Make ``torch.compile``d code run eagerly until ``stack`` closes (``torch.compiler.set_stance("force_eager")``;
    the previous stance comes back unless the script set its own meanwhile); False when nothing compiled is in use
    (:func:`compile_in_use`) or the stance cannot be set here.

    Recording hooks and function modes would otherwise be traced by dynamo (graph breaks, recompiles, warnings) and
    see the compiled graph's boundaries instead of the ops; eager code runs the same ops the model's Python says.
    """
    if not compile_in_use(models):
        return False
    if getattr(torch.compiler, "set_stance", None) is None:  # first in torch 2.6
        if not getattr(run_eager, "said", False):
            run_eager.said = True  # type: ignore[attr-defined]
            logger.info("ascend_tune: torch %s has no torch.compiler.set_stance (torch 2.6 does): recorded steps of "
                        "a compiled model run compiled, and dynamo traces the recording hooks", torch.__version__)
        return False
    try:
        stance = torch.compiler.set_stance("force_eager")
    except Exception:  # inside a compiled region
        return False
    stack.callback(_restore_stance, stance)
    return True


def _restore_stance(stance: Any) -> None:
    """Put the previous stance back, unless the script set one of its own meanwhile (that one stays)."""
    try:
        from torch._dynamo import eval_frame

        if eval_frame._stance is not stance.stance:
            return
    except Exception:  # a torch without that attribute: restore as the context manager does
        pass
    stance.__exit__(None, None, None)


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


def iterate_marked(iterator: Iterator, on_batch: Callable[[Any], None]) -> Iterator:
    """Yield from ``iterator``, reporting each batch as it is handed to the training loop."""
    for batch in iterator:
        on_batch(batch)
        yield batch


_subclasses: dict = {}


def wrap_loader(
    stack: contextlib.ExitStack,
    loader: Any,
    on_pass: Callable[[int], None],
    on_batch: Callable[[Any], None],
    begun: bool = False,
) -> bool:
    """Wrap one loader instance in place by swapping its class for a subclass; False if it cannot be swapped.
    ``begun``: the loop is already in its first pass (the next ``__iter__`` begins the second).

    ``DataLoader.__iter__`` is looked up on the type, so patching the instance would not work, and patching
    ``_BaseDataLoaderIter`` (as ptdbg and msprobe did) would touch every loader in the process.
    """
    original = type(loader)
    if getattr(original, "__ascend_tune_wrapped__", False):
        return True  # already wrapped by an enclosing monitor: that one marks the steps
    if original not in _subclasses:
        _subclasses[original] = type(
            original.__name__,
            (original,),
            {
                "__ascend_tune_wrapped__": True,
                "__iter__": _marked_iter,
                "__module__": original.__module__,
                "__qualname__": original.__qualname__,
            },
        )
    try:
        object.__setattr__(loader, "__class__", _subclasses[original])
    except (TypeError, AttributeError):  # builtins, __slots__ classes, a class property (accelerate's loaders)
        return False
    tracker = EpochTracker()
    if begun:
        tracker.begun(loader)
    object.__setattr__(loader, "_ascend_tune_marks", (tracker, on_pass, on_batch))
    stack.callback(_unwrap, loader, original)
    return True


def _marked_iter(self: Any) -> Iterator:
    tracker, on_pass, on_batch = self.__dict__["_ascend_tune_marks"]
    on_pass(tracker.begin_pass(self))
    # torch names only __next__ in a trace; starting a pass (worker start-up, the sampler's seed read with .item())
    # is loader work too, named the same way so the advisor counts it as the loader's, not as a host sync of the step
    with torch.profiler.record_function(f"enumerate(DataLoader)#{type(self).__name__}.__iter__"):
        iterator = super(type(self), self).__iter__()
    return iterate_marked(iterator, on_batch)


def _unwrap(loader: Any, original: type) -> None:
    object.__setattr__(loader, "__class__", original)
    loader.__dict__.pop("_ascend_tune_marks", None)


def batch_size(batch: Any) -> Optional[int]:
    """Samples in a batch: the first dimension of the batch tensor, or of the first tensor it holds."""
    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0]) if batch.dim() > 0 else None
    if isinstance(batch, dict):
        batch = list(batch.values())
    if isinstance(batch, (list, tuple)):
        for item in batch:
            if isinstance(item, torch.Tensor) and item.dim() > 0:
                return int(item.shape[0])
    return None


class MarkedLoader:
    """What ``mon.loader(dl)`` returns: iterates ``dl`` with each batch marked as a step boundary."""

    def __init__(self, loader: Iterable, on_pass: Any, on_batch: Any):
        self._loader = loader
        self._on_pass = on_pass
        self._on_batch = on_batch
        self._epochs = EpochTracker()

    def __iter__(self) -> Iterator:
        self._on_pass(self._epochs.begin_pass(self._loader))
        return iterate_marked(iter(self._loader), self._on_batch)

    def __len__(self) -> int:
        return len(self._loader)  # type: ignore[arg-type]
