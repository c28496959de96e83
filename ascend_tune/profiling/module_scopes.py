"""Module scopes in the monitor's traces: each forward of a module of the monitored model, while the profiler
records, runs inside a ``record_function`` range named ``formats.trace_names.module_scope_name(path)``.

``ascend-tune compare-trace`` charges time to these ranges, the part of the model that is the same on every device
(kernel names are not). They cost two range calls per module forward only while the profiler records; otherwise
one check of a flag. The hooks are global (``recording.modules.hook_modules``), so nothing is attached to the
model itself (``torch.save(model)`` inside the block pickles no hook), and they are removed with the block.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Optional

from ..formats.trace_names import module_scope_name


def record_module_scopes(models: tuple, stack: contextlib.ExitStack, before: Optional[Callable] = None) -> None:
    """Open a named range around every forward of the modules of ``models`` while the profiler records; the undo
    goes on ``stack``.

    before: called first at every module forward (the profiler's step boundary, so a step's range opens before
        the first module's range and encloses it).
    """
    import torch
    from torch.autograd.profiler import record_function

    from ..recording.modules import hook_modules

    names: dict = {}
    for model in models:
        if isinstance(model, torch.nn.Module):
            for path, module in model.named_modules():
                names.setdefault(id(module), module_scope_name(path or type(module).__name__))
    if not names:
        return
    recording = torch._C._autograd._profiler_enabled
    open_ranges: dict = {}

    def enter(module: Any, args: Any) -> None:
        if before is not None:
            before()
        name = names.get(id(module))
        if name is not None and recording():
            try:  # a range that cannot open costs the scope, never the forward
                scope = record_function(name)
                scope.__enter__()
            except Exception:  # noqa: BLE001
                return
            open_ranges.setdefault(id(module), []).append(scope)

    def leave(module: Any, *args_kwargs_output: Any) -> None:
        scopes = open_ranges.get(id(module))
        if scopes:
            try:
                scopes.pop().__exit__(None, None, None)
            except Exception:  # noqa: BLE001
                pass

    stack.callback(open_ranges.clear)
    hook_modules(stack, enter, leave)  # global hooks (recording.modules), each with its undo on the stack
