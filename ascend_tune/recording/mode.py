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
    """Routes listed torch API calls to a subscriber; everything else runs untouched.

    The subscriber is anything with a ``recording`` flag and ``call_api(func, api, args, kwargs, caller)`` that
    runs the call and returns its result (:class:`~.subscribe.Subscriber`).
    """

    def __init__(self, subscriber: Any):
        super().__init__()
        self._subscriber = subscriber
        self._table = catalog.api_table()

    @on_behalf
    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: Optional[dict] = None) -> Any:
        if kwargs is None:
            kwargs = {}
        try:
            api = self._table.get(func)
        except TypeError:
            api = None
        if api is None or not self._subscriber.recording or in_internal():
            return func(*args, **kwargs)
        # frame 1 is the code that made the call when func is C-level (operators are told apart there), unless it
        # is a subscriber above this mode that runs the call for that code
        return self._subscriber.call_api(func, api, args, kwargs, user_caller(sys._getframe(1)))


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
