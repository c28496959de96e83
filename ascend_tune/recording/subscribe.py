"""How a feature sees calls: a :class:`Subscriber` and :func:`subscribe`, which installs what it asks for with
each undo on the caller's ``ExitStack``.

A subscriber runs each listed torch API call it is given (``call_api`` returns the call's result) and may hook the
model's module calls. Several subscribers at once (a dump beside a replay beside the shape detector) each get their
own :class:`~.mode.ApiMode`; the one subscribed last sees a call first and runs it for the user's code, so the
next one below names the user's frame as the caller (:func:`~.frames.on_behalf`, :func:`~.frames.user_caller`).
"""

from __future__ import annotations

import contextlib
from types import FrameType
from typing import Any, Callable, Optional, Protocol

from .mode import ApiMode, ModeRemoval
from .modules import hook_modules


class Subscriber(Protocol):
    """What the recording layer calls: ``recording`` says whether calls are wanted now."""

    recording: bool

    def call_api(self, func: Any, api: tuple, args: tuple, kwargs: dict, caller: Optional[FrameType]) -> Any:
        """Run ``func(*args, **kwargs)`` (``api``: its ``(prefix, name)`` from the catalog; ``caller``: the
        frame that made the call) and return its result, recording what the subscriber wants of it."""


def subscribe(
    undo: contextlib.ExitStack,
    subscriber: Subscriber,
    removal: ModeRemoval,
    *,
    api: bool = True,
    on_module_pre: Optional[Callable] = None,
    on_module_forward: Optional[Callable] = None,
    modules: Any = None,
) -> Optional[ApiMode]:
    """Install what ``subscriber`` sees, each undo on ``undo``; returns its mode (None with ``api=False``).

    Parameters:
        undo: where each installed thing's undo goes.
        subscriber: gets the listed API calls (``api=True``).
        removal: takes the mode off torch's stack at the undo, or at the first chance when torch holds it aside.
        on_module_pre / on_module_forward: ``(module, args)`` / ``(module, args, kwargs, output)`` hooks on every
            module, or on each of ``modules`` when given (under ``torch.compile``, global hooks warn).
    """
    if on_module_forward is not None:
        if on_module_pre is not None:
            hook_modules(undo, on_module_pre, on_module_forward, modules)
        else:
            from .modules import global_forward_hook

            undo.callback(global_forward_hook(on_module_forward).remove)
    if not api:
        return None
    mode = ApiMode(subscriber)
    mode.__enter__()
    undo.callback(removal.remove, mode)
    return mode
