"""THE torch function mode of the recording layer, and taking a function mode off torch's stack again.

:class:`ApiMode` routes the listed torch API calls (:mod:`.catalog`) to a subscriber's ``call_api``; everything
else runs untouched. Torch pops the mode while its handler runs, so an API's own inner calls (``F.layer_norm`` ->
``torch.layer_norm``) are seen once; the monitor's own tensor work runs under :func:`.frames.internal` and is
skipped.
"""

from __future__ import annotations

import sys
from typing import Any, Optional

import torch
from torch.overrides import TorchFunctionMode

from . import catalog
from .frames import in_internal, on_behalf, user_caller


class ApiMode(TorchFunctionMode):
    """Routes listed torch API calls to the subscribers of one :class:`~.subscribe.Interception`; everything else
    runs untouched.

    A subscriber is anything with a ``recording`` flag and ``call_api(func, api, args, kwargs, caller, run)``
    (:class:`~.subscribe.Subscriber`): it runs the call with ``run(*args, **kwargs)``, which hands it to the next
    subscriber (the last one runs ``func``), and returns its result. ``live`` goes False when the mode is taken off
    (torch may still hold it aside, running a handler): from then on it passes every call through.
    """

    def __init__(self, interception: Any):
        super().__init__()
        self._interception = interception
        self._table = catalog.api_table()
        self.live = True

    @on_behalf
    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: Optional[dict] = None) -> Any:
        if kwargs is None:
            kwargs = {}
        try:
            api = self._table.get(func)
        except TypeError:
            api = None
        if api is None or not self.live or in_internal():
            return func(*args, **kwargs)
        # frame 1 is the code that made the call when func is C-level (operators are told apart there), unless it
        # is a subscriber of a mode above this one that runs the call for that code
        subscribers = self._interception.subscribers
        if len(subscribers) == 1:  # the common case, without the chain
            first = subscribers[0]
            if not first.recording:
                return func(*args, **kwargs)
            return first.call_api(func, api, args, kwargs, user_caller(sys._getframe(1)), func)
        return dispatch(subscribers, 0, func, api, args, kwargs, user_caller(sys._getframe(1)))


def dispatch(subscribers: tuple, index: int, func: Any, api: tuple, args: tuple, kwargs: dict, caller: Any) -> Any:
    """Hand the call to the first subscriber from ``index`` on that is recording; its ``run`` hands it to the next
    (as a mode below would see the call a subscriber above runs), the last one runs ``func``."""
    while index < len(subscribers) and not subscribers[index].recording:
        index += 1
    if index == len(subscribers):
        return func(*args, **kwargs)

    def run(*run_args: Any, **run_kwargs: Any) -> Any:
        if in_internal():
            return func(*run_args, **run_kwargs)
        return dispatch(subscribers, index + 1, func, api, run_args, run_kwargs, caller)

    last = index == len(subscribers) - 1
    return subscribers[index].call_api(func, api, args, kwargs, caller, func if last else run)


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
