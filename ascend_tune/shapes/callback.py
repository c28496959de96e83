"""The dynamic-shape detector (``shapes=`` / ``ASCEND_TUNE_SHAPES=1``): which ops change shape from step to step.

On an NPU an operator is compiled for the shapes it is called with (online compilation, ``jit_compile=True``), so
an op whose shapes keep changing recompiles step after step. Over the block's first ``steps`` steps (default 20)
the detector sees every listed torch API call and every submodule call of the model through the recording layer
(:mod:`ascend_tune.recording`: its mode, API catalog and names, user call stacks and module names) and keeps each
call's input and output tensor shapes. Then it removes everything it installed, so the steps after run with nothing
hooked, and writes ``shapes.csv`` (:mod:`ascend_tune.formats.shapes_csv`).

- An op is one row across steps: its name without the per-step call counter plus its user call stack, so the same
  op called from the same place with different shapes is one row with a range.
- It is *dynamic* when it had more than one distinct shape signature (input and output shapes) **and** a signature
  first appeared after the first step the op ran in. A loop over layers of different widths at one line has several
  signatures, but the same ones every step: an NPU compiles each once, so it is no dynamic op.
- Only dynamic ops are written, as the NPU toolkit's report lists only those; a run with fixed shapes writes the
  header alone. A warning (``ctx.warn``) names them with the fix.
- The monitor's own tensor work (``recording.frames.internal()``) and the loader fetching and collating a batch (a user
  ``collate_fn`` included) are not recorded.
- Under ``torch.compile`` (a compiled model, or compiled code run, when a watched step begins) the watched steps run
  eager (``torch.compiler.set_stance("force_eager")``) so dynamo never traces the detector, and there is no global
  module hook (it would make every ``OptimizedModule`` call warn): the report lists API calls only.
- With ``precision=`` on the same steps: the builtin dump runs alongside (it sees each call first, through the same
  mode, and records its statistics as internal work); msprobe and ptdbg compute their statistics with ordinary
  torch calls this detector would count as the model's, so that combination is refused.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import weakref
from types import FrameType
from typing import TYPE_CHECKING, Any, Callable, Optional

from ..contract.callbacks import Callback
from ..formats.run_dir import SHAPES_CSV
from ..formats.shapes_csv import ShapeRow, csv_bytes, shape_range, warning_text
from ..recording import catalog
from ..recording.compile import compile_in_use, run_eager
from ..recording.frames import in_internal, internal, on_behalf
from ..recording.modules import global_forward_hook, module_prefixes
from ..recording.subscribe import removal_pending, retry_removal, subscribe
from ..recording.tensors import tensors_in
from .config import ShapesConfig
from .watch import Op, refuse_foreign_dumps, shapes_of, user_stack

if TYPE_CHECKING:
    from ..contract.context import RunContext

__all__ = ["ShapesCallback", "build_callback"]

logger = logging.getLogger("ascend_tune")
# detectors with something installed; a DataLoader worker forked meanwhile drops what it inherited (below)
_installed: weakref.WeakSet = weakref.WeakSet()


def build_callback(value: Any, ctx: RunContext) -> Optional[ShapesCallback]:
    """The monitor's factory for ``shapes=``: a callback, or None when off (or when this rank writes no report).

    ``value`` None (the option not given) reads ``ASCEND_TUNE_SHAPES``; unset or ``0`` is off.
    """
    config = ShapesConfig.from_option(value)
    if config is None:
        return None
    if ctx.rank != 0 and ctx.world_size <= 1:
        return None  # only rank 0 writes shapes.csv when the run is not distributed
    return ShapesCallback(config)


class ShapesCallback(Callback):
    """Watches the first ``config.steps`` steps, then removes itself and writes shapes.csv (module docstring)."""

    name = "shapes"

    def __init__(self, config: ShapesConfig):
        self.config = config
        self.recording = False
        self._undo: Optional[contextlib.ExitStack] = None
        self._module_hook: Any = None
        self._eager = False  # compiled code runs eagerly while the detector watches
        self._finished = False
        self._ops: dict = {}
        self._names: dict = {}
        self._step = 0
        self._steps_seen: set = set()  # the steps in which something was recorded
        self._path: Optional[str] = None
        self._error: Optional[str] = None
        self._dynamic = 0
        self._ctx: Optional[RunContext] = None

    # --- the step clock -------------------------------------------------------------------------------------------

    def on_enter(self, ctx: RunContext, stack: contextlib.ExitStack) -> None:
        """Subscribe now, before any dump, so a dump subscribed later sees each call first (as it did when each had
        its own mode, the dump's above)."""
        self._ctx = ctx
        self._first = ctx.start_step
        self._last = ctx.start_step + self.config.steps - 1
        refuse_foreign_dumps(ctx, self._first, self._last)
        self._path = ctx.run_dir.shapes_csv if ctx.rank == 0 else ctx.run_dir.rank_path(ctx.rank, SHAPES_CSV)
        self._names = module_prefixes(list(ctx.models))
        stack.callback(self._remove)  # the undo travels with the block whatever happens next
        undo = contextlib.ExitStack()
        self._undo = undo
        if self._names and not compile_in_use(ctx.models):
            self._module_hook = global_forward_hook(self._on_module)
            undo.callback(self._module_hook.remove)
        subscribe(undo, self)
        _installed.add(self)

    def on_step_begin(self, ctx: RunContext, step: int) -> None:
        if self._finished:
            self._take_off()  # when the last step ended inside a torch call (see _take_off)
        elif self._first <= step <= self._last:
            self._step = step
            self.recording = self._error is None
            self._keep_out_of_compile()

    def on_step_end(self, ctx: RunContext, step: int) -> None:
        if not self._finished and step >= self._last:
            self._finish()

    def on_exit(self, ctx: RunContext, exc_type: Optional[type]) -> None:
        self._finish()  # the block ended within the watched steps: report what they showed
        self._remove()

    def summary(self) -> Optional[dict]:
        steps = [min(self._steps_seen), max(self._steps_seen)] if self._steps_seen else None
        return {"steps": steps, "ops": len(self._ops), "dynamic": self._dynamic, "path": self._path,
                "error": self._error}

    # --- recording (called by the recording layer's mode and the module hook) ------------------------------------

    @on_behalf
    def call_api(self, func: Any, api: tuple, args: tuple, kwargs: dict, caller: Optional[FrameType],
                 run: Callable) -> Any:
        """Run one listed API call and keep its shapes (a :class:`~..recording.subscribe.Subscriber`)."""
        if not self.recording:
            return run(*args, **kwargs)
        try:
            with internal():
                stack = user_stack(caller)
                if stack is not None:
                    name = catalog.base_name(api, caller)
                    inputs = shapes_of(tensors_in(args) + tensors_in(kwargs))
        except Exception as exc:
            self._fail(exc)
            stack = None
        if stack is None:
            return run(*args, **kwargs)
        out = run(*args, **kwargs)
        if self.recording:
            try:
                with internal():
                    self._record(name, stack, inputs, shapes_of(tensors_in(out)))
            except Exception as exc:
                self._fail(exc)
        return out

    def _on_module(self, module: Any, args: tuple, kwargs: dict, output: Any) -> None:
        known = self._names.get(id(module))
        if known is None or known[1] is not module or not self.recording or in_internal():
            return
        try:
            with internal():
                stack = user_stack(sys._getframe(1))
                if stack is not None:
                    inputs = shapes_of(tensors_in(args) + tensors_in(kwargs))
                    self._record(known[0] + "forward", stack, inputs, shapes_of(tensors_in(output)))
        except Exception as exc:
            self._fail(exc)

    def _record(self, name: str, stack: tuple, inputs: tuple, outputs: tuple) -> None:
        op = self._ops.get((name, stack))
        if op is None:
            op = self._ops[(name, stack)] = Op(name, stack, self._step)
        op.signatures.setdefault((inputs, outputs), self._step)
        self._steps_seen.add(self._step)

    def _keep_out_of_compile(self) -> None:
        """Once torch.compile is in use: watched steps run eager and the global module hook goes."""
        if self._eager or self._undo is None or not compile_in_use(self._ctx.models):
            return
        self._eager = run_eager(self._undo, self._ctx.models)
        if self._module_hook is not None:
            self._module_hook.remove()
            self._module_hook = None

    def _fail(self, exc: BaseException) -> None:
        self.recording = False
        if self._error is None:
            self._error = f"{type(exc).__name__}: {exc}"
            self._ctx.warn(f"shapes: the detector stopped recording ({self._error}); training goes on")

    # --- the end ----------------------------------------------------------------------------------------------------

    def _remove(self) -> None:
        self.recording = False
        undo, self._undo = self._undo, None
        if undo is not None:
            undo.close()
        self._take_off()

    def _take_off(self) -> None:
        """Take the mode off torch's function-mode stack, now or at the first chance (``recording.subscribe``): a
        step that ends inside ``loss.backward()`` (no optimizer) runs while torch holds the mode aside."""
        retry_removal()
        if not removal_pending():
            _installed.discard(self)

    def _finish(self) -> None:
        if self._finished:
            return
        self._finished = True
        self._remove()
        ctx = self._ctx
        dynamic = [op for op in self._ops.values() if op.dynamic]
        self._dynamic = len(dynamic)
        rows = [self._row(op) for op in dynamic]
        if not ctx.outputs.write(self._path, csv_bytes(rows)):  # warned; training goes on without the report
            return
        seen = self.summary()["steps"]
        steps = f"steps {seen[0]}-{seen[1]}" if seen else "no step"
        ctx.record_event("shapes", path=self._path, steps=seen, ops=len(self._ops), dynamic=len(dynamic))
        if not dynamic:
            logger.info("ascend_tune: shapes: no dynamic shapes over %s (%d ops); %s", steps, len(self._ops),
                        self._path)
            return
        ctx.warn(warning_text(rows, steps, self._path))

    def _row(self, op: Op) -> ShapeRow:
        frames = op.stack
        file, line = (frames[0][0], str(frames[0][1])) if frames else ("", "")
        signatures = list(op.signatures)
        return ShapeRow(
            name=op.name, stack=" <- ".join(f"{f}:{n} in {fn}" for f, n, fn in frames), file=file, line=line,
            input_range=shape_range([s[0] for s in signatures]), output_range=shape_range([s[1] for s in signatures]),
            distinct=len(signatures), new_steps=tuple(op.new_steps()),
        )


def _forget_in_child() -> None:
    # a DataLoader worker forked during the watched steps inherits the mode (it is thread state) and the hook; it
    # never sees the step that removes them, and would pay for them in every torch call for as long as it lives
    for detector in list(_installed):
        detector._remove()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)

