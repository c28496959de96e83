"""How a feature sees calls: a :class:`Subscriber`, and :func:`subscribe`, which installs what it asks for with each
undo on the caller's ``ExitStack``.

A subscriber runs each listed torch API call it is given and may hook the model's module calls. Several subscribers
at once (a dump beside a replay beside the shape detector) share one :class:`~.mode.ApiMode` per thread, an
:class:`Interception`: the one subscribed last sees a call first, and its ``run`` hands the call to the next, with
the same caller, as a mode stacked below would have seen it (``benchmarks/shared_interception.py`` measures the
shared mode against one mode per subscriber). The mode is pushed with the first subscriber and taken off with the
last; torch may hold it aside at that moment (a step that ends inside ``loss.backward()``), then it is taken off at
the next chance (:class:`~.mode.ModeRemoval`, :func:`retry_removal`).
"""

from __future__ import annotations

import contextlib
import os
import threading
from types import FrameType
from typing import Any, Callable, Optional, Protocol

from .mode import ApiMode, ModeRemoval
from .modules import global_forward_hook, hook_modules

SHARED = True  # False: one mode per subscriber, stacked (what the benchmark compares against)
_local = threading.local()


class Subscriber(Protocol):
    """What the recording layer calls: ``recording`` says whether calls are wanted now."""

    recording: bool

    def call_api(self, func: Any, api: tuple, args: tuple, kwargs: dict, caller: Optional[FrameType],
                 run: Callable) -> Any:
        """Run the call with ``run(*args, **kwargs)`` and return its result, recording what the subscriber wants.

        ``func`` is the torch function called (for its name, signature, a CPU re-run under ``internal()``); ``api``
        its ``(prefix, name)`` from the catalog; ``caller`` the frame that made the call."""


class Interception:
    """One thread's function mode and the subscribers it routes calls to (last subscribed first)."""

    def __init__(self) -> None:
        self.subscribers: tuple = ()  # replaced, never mutated: a call in flight keeps the tuple it started with
        self.mode: Optional[ApiMode] = None
        self.removal = ModeRemoval()

    def add(self, subscriber: Subscriber) -> None:
        self.removal.retry()
        self.subscribers = (subscriber, *self.subscribers)
        if self.mode is None:
            self.mode = ApiMode(self)
            self.mode.__enter__()

    def discard(self, subscriber: Subscriber) -> None:
        self.subscribers = tuple(s for s in self.subscribers if s is not subscriber)
        if not self.subscribers and self.mode is not None:
            mode, self.mode = self.mode, None
            mode.live = False
            self.removal.remove(mode)


def _interceptions() -> list:
    found = getattr(_local, "interceptions", None)
    if found is None:
        found = _local.interceptions = []
    return found


def subscribe(
    undo: contextlib.ExitStack,
    subscriber: Subscriber,
    *,
    api: bool = True,
    on_module_pre: Optional[Callable] = None,
    on_module_forward: Optional[Callable] = None,
    modules: Any = None,
) -> None:
    """Install what ``subscriber`` sees for as long as ``undo`` is open.

    Parameters:
        undo: where each installed thing's undo goes.
        subscriber: gets the listed API calls of this thread (``api=True``).
        on_module_pre / on_module_forward: ``(module, args)`` / ``(module, args, kwargs, output)`` hooks on every
            module, or on each of ``modules`` when given (under ``torch.compile``, global hooks warn); with
            ``on_module_forward`` alone, a global forward hook only.
    """
    if on_module_forward is not None:
        if on_module_pre is not None:
            hook_modules(undo, on_module_pre, on_module_forward, modules)
        else:
            undo.callback(global_forward_hook(on_module_forward).remove)
    if not api:
        return
    found = _interceptions()
    found[:] = [i for i in found if i.subscribers or i.removal.pending]
    if SHARED and found:
        interception = found[0]
    else:
        interception = Interception()
        found.append(interception)
    interception.add(subscriber)
    undo.callback(interception.discard, subscriber)


def retry_removal() -> None:
    """Take off this thread's modes that torch held aside when their last subscriber left."""
    for interception in _interceptions():
        interception.removal.retry()


def removal_pending() -> bool:
    """Whether a mode of this thread still waits to be taken off."""
    return any(i.removal.pending for i in _interceptions())


def _forget_in_child() -> None:
    # a DataLoader worker forked meanwhile inherits the modes (thread state); it never sees the steps that remove
    # them, and would pay for them in every torch call for as long as it lives
    for interception in _interceptions():
        for subscriber in interception.subscribers:
            interception.discard(subscriber)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)
