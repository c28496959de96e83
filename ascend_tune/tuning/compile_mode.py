"""The NPU's operator compile mode for the block: binary (prebuilt) kernels instead of compiling each new shape.

With ``jit_compile=True`` the runtime compiles an operator for every new input shape, so a loop with dynamic shapes
recompiles operators every step; ``torch_npu.npu.set_compile_mode(jit_compile=False)`` runs prebuilt kernels
instead. CANN's default is already binary on Atlas A2/A3 (910B, 910_93) and JIT on 910A and 310P, so setting it
explicitly makes runs on both behave alike. It must happen before the loop's first operator: the monitor calls
:func:`set_for_block` from ``__enter__``. The mode is a process-wide runtime option; the one found at the start is
put back when the block ends.
"""

from __future__ import annotations

import contextlib
import logging
from types import ModuleType
from typing import Optional

logger = logging.getLogger("ascend_tune")


def set_for_block(stack: contextlib.ExitStack, jit_compile: Optional[bool], npu: Optional[ModuleType],
                  device_kind: str) -> dict:
    """Set the compile mode now and register putting the previous one back on ``stack``; returns the record.

    Parameters:
        stack: the monitor's ExitStack.
        jit_compile: False (binary kernels), True (online compilation) or None (leave the runtime alone).
        npu: the imported torch_npu, or None when not running on an NPU.
        device_kind: the monitor's device kind, named in the record when there is nothing to set.
    """
    if jit_compile is None:
        return {"action": "left", "reason": "jit_compile=None: the NPU runtime's compile mode is left as it is"}
    if npu is None:
        return {"action": "skipped", "reason": f"the device is {device_kind}; compile mode is an NPU runtime setting"}
    runtime = npu.npu
    try:
        # reading the mode initialises the runtime (torch_npu's own query does), which runs no operator
        previous = not runtime.is_jit_compile_false()
        runtime.set_compile_mode(jit_compile=jit_compile)
    except Exception as exc:  # an old or broken torch_npu must not stop training; the record says why
        return {"action": "failed", "jit_compile": jit_compile,
                "reason": f"torch_npu.npu.set_compile_mode failed: {type(exc).__name__}: {exc}"}
    if previous != jit_compile:
        stack.callback(_put_back, runtime, previous)
    why = ("binary kernels: an operator is not compiled again for each new input shape"
           if not jit_compile else "online compilation, as asked (each new input shape compiles its operators)")
    return {
        "action": "set",
        "jit_compile": jit_compile,
        "previous_jit_compile": previous,
        "restore_at_exit": previous != jit_compile,
        "reason": f"torch_npu.npu.set_compile_mode(jit_compile={jit_compile}) at the block's start: {why}",
    }


def _put_back(runtime: ModuleType, previous: bool) -> None:
    try:
        runtime.set_compile_mode(jit_compile=previous)
    except Exception as exc:  # at exit, a failure to restore is reported, never raised over the loop's own error
        logger.warning("ascend_tune: could not restore the NPU compile mode (jit_compile=%s): %s", previous, exc)
