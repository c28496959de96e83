"""``torch.compile`` and recording: whether compiled code may run, and running it eager for a recorded step."""

from __future__ import annotations

import contextlib
import logging
import sys
from typing import Any

import torch

logger = logging.getLogger("ascend_tune")


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
