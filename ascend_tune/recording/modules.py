"""Module calls: the names msprobe gives a model's submodules, forward hooks on every module (global) or on each
submodule (under ``torch.compile``), and the hook object that pickles as a no-op.

Global hooks attach nothing to the model, so ``torch.save(model)`` inside the block pickles as usual; a hook on a
submodule is a :class:`Detachable` (a model saved meanwhile carries nothing of ours that needs ascend_tune).
"""

from __future__ import annotations

import contextlib
import inspect
import logging
from typing import Any, Callable

import torch

logger = logging.getLogger("ascend_tune")


def hook_modules(undo: contextlib.ExitStack, pre: Callable, post: Callable, modules: Any = None) -> None:
    """Register ``pre(module, args)`` and ``post(module, args, kwargs, output)`` (also called when the forward
    raises, then without kwargs) on every module, or on each of ``modules`` when given; each undo goes on
    ``undo``."""
    if modules is not None:
        for module in modules:
            undo.callback(module.register_forward_pre_hook(Detachable(pre)).remove)
            undo.callback(module.register_forward_hook(Detachable(post), with_kwargs=True, always_call=True).remove)
        return
    undo.callback(torch.nn.modules.module.register_module_forward_pre_hook(pre).remove)
    undo.callback(global_forward_hook(post, always_call=True).remove)


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


class Detachable:
    """A per-module hook that pickles as a no-op: ``logging.getLogger(...).debug`` takes any arguments, returns
    None (so it changes no input or output) and unpickles without ascend_tune."""

    __slots__ = ("_fn",)

    def __init__(self, fn: Callable):
        self._fn = fn

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._fn(*args, **kwargs)

    def __reduce__(self) -> tuple:
        return getattr, (logging.getLogger("ascend_tune.detached_hook"), "debug")


def unwrapped(model: Any) -> Any:
    """The module a ``torch.compile(model)`` wraps (its names are the model's), else ``model``."""
    inner = getattr(model, "_orig_mod", None)
    return inner if isinstance(inner, torch.nn.Module) and type(model).__name__ == "OptimizedModule" else model


def module_prefixes(models: list) -> dict:
    """``id(module) -> (prefix, module)`` for the submodules of ``models``, prefix as msprobe names them.

    ``Module.fc1.Linear.`` (``Module.<index>.fc1.Linear.`` when there are several models); the root is left out, as
    in msprobe, and a compiled model is named by the module it wraps (so its dump pairs with an eager run's). The
    module is kept beside its id so a freed module whose id is reused is not mistaken for it.
    """
    names: dict = {}
    many = len(models) > 1
    for index, model in enumerate(models):
        model = unwrapped(model)
        for path, module in model.named_modules():
            if module is model:
                continue
            prefix = f"Module.{index}.{path}" if many else f"Module.{path}"
            names[id(module)] = (f"{prefix}.{type(module).__name__}.", module)
    return names


def backward_name(forward_name: str) -> str:
    """``Module.fc.Linear.forward.0`` -> ``...backward.0``; ``Functional.linear.0.forward`` -> ``...backward``."""
    if forward_name.startswith("Module."):
        return forward_name.replace(".forward.", ".backward.")
    return forward_name[: -len("forward")] + "backward" if forward_name.endswith(".forward") else forward_name
