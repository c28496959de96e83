"""The monitor's ``profile=`` option: a StepProfiler driven by the step clock, and the trace advisor at the end.

Under the monitor a step boundary is placed at the next module forward after the step ended, not inside
``optimizer.step()``: torch wraps that call in its own ``Optimizer.step#...`` range, and a boundary inside it
would make the two ranges overlap in the trace viewer.
"""

from __future__ import annotations

import contextlib
import os
from typing import TYPE_CHECKING, Any, Optional

from ..contract.callbacks import Callback
from .config import ProfileConfig
from .schedule import StepProfiler

if TYPE_CHECKING:
    from ..contract.context import RunContext


class ProfilerCallback(Callback):
    """The monitor's ``profile=`` option: a StepProfiler driven by the step clock."""

    name = "profile"

    def __init__(self, config: ProfileConfig):
        self.config = config
        self.session: Optional[StepProfiler] = None
        self.advice: Any = None  # the advisor's AdviceReport when config.advise ran
        self._boundary: Any = None  # the one-shot forward pre-hook of a step boundary not yet placed

    def on_enter(self, ctx: RunContext, stack: contextlib.ExitStack) -> None:
        self.session = StepProfiler(
            self.config,
            ctx.run_dir.profile_dir,
            rank=ctx.rank,
            start_step=ctx.start_step,
            device_kind=ctx.device.kind,
            on_event=lambda kind, fields: ctx.record_event(kind, **fields),
            warn=ctx.warn,
            outputs=ctx.outputs,
        )
        import torch.nn.modules.module as module_hooks

        self._register_boundary = module_hooks.register_module_forward_pre_hook
        self.session.start()
        # Registered right after a successful start, so a failure later in __enter__ still stops the profiler.
        stack.callback(self.session.stop)
        stack.callback(self._drop_boundary)
        if self.config.module_scopes:
            from .module_scopes import record_module_scopes

            record_module_scopes(ctx.models, stack, before=self._place_boundary)

    def on_step_end(self, ctx: RunContext, step: int) -> None:
        self._place_boundary()  # a step with no module forward since the previous one
        if self.session is not None and self.session.running:
            self._boundary = self._register_boundary(self._on_forward)

    def on_exit(self, ctx: RunContext, exc_type: Optional[type]) -> None:
        self._place_boundary()
        if self.session is not None:
            self.session.stop()
            if self.config.advise and self.session.traces:
                self._advise(ctx)

    def summary(self) -> Optional[dict]:
        if self.session is None:
            return None
        out = self.session.summary()
        if self.advice is not None:
            out["advice"] = {"html": self.advice.html_path, "findings": len(self.advice.findings),
                             "exit_code": self.advice.exit_code}
        return out

    def _advise(self, ctx: RunContext) -> None:
        from ..analysis.advisor.analyse import advise_traces
        from ..analysis.advisor.render import write_html
        from ..errors import AscendTuneError
        from ..formats.run_dir import ADVICE_HTML

        folder = self.session.rank_dir
        page = os.path.join(folder, ADVICE_HTML)
        if not ctx.outputs.ok(folder) or not ctx.outputs.ok(page):
            return  # tracing or the page already failed to write: nothing is retried
        try:
            with ctx.outputs:
                self.advice = write_html(advise_traces([t.path for t in self.session.traces], out_dir=folder), folder)
        except OSError as exc:  # a full disk: the page is the output lost
            ctx.outputs.fail(page, exc)
            return
        except AscendTuneError as exc:  # advice is a bonus: a trace it cannot read must not fail the run
            ctx.warn(f"the trace advisor could not run on {folder}: {exc}")
            return
        for finding in self.advice.findings:
            if finding.severity != "info":
                ctx.warn(f"advisor: {finding.title} (see {self.advice.html_path})")
        ctx.record_event("advice", html=self.advice.html_path, findings=len(self.advice.findings))

    def _on_forward(self, module: Any, args: Any) -> None:
        self._place_boundary()

    def _place_boundary(self) -> None:
        if self._boundary is not None:
            self._drop_boundary()
            if self.session is not None:
                self.session.step()

    def _drop_boundary(self) -> None:
        handle, self._boundary = self._boundary, None
        if handle is not None:
            handle.remove()


def build_callback(value: Any, ctx: RunContext) -> Optional[ProfilerCallback]:
    """The monitor's factory: ``value`` is the ``profile=`` option; None reads ``ASCEND_TUNE_PROFILE`` (unset: off)."""
    config = ProfileConfig.from_option(value)
    return ProfilerCallback(config) if config is not None else None
