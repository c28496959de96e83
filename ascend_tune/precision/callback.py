"""The ``precision=`` option of TrainingMonitor: the step clock brackets each selected step with a backend.

Before a selected step ``start``, after it ``stop`` + ``step``; other steps run with nothing hooked. After the last
selected step (or once ``overflow_nums`` overflows are found) dumping ends quietly: nothing ever raises into the
training loop, unlike ptdbg's loader hook, which ended training with an exception. A backend that fails is
reported once through ``ctx.warn`` and dumps no more; one that cannot write (a full disk, a deleted folder) is
reported once by the run's outputs (``ctx.outputs``: the file, the errno, summary.json's ``outputs_failed``).
"""

from __future__ import annotations

import contextlib
import logging
import os
from typing import TYPE_CHECKING, Any, Optional

from ..contract.callbacks import Callback
from ..errors import ConfigError, OutputError
from ..formats.dump_layout import step_of_dir
from ..formats.run_dir import OVERFLOW_JSON, rank_dir_name
from ..formats.writing import make_below, make_folder
from . import backends
from .config import ENV_DUMP, PrecisionConfig, first_common_step, precision_configs

if TYPE_CHECKING:
    from ..analysis.dumps.overflow import Overflow
    from ..analysis.dumps.replay import ReplayReport
    from ..contract.context import RunContext

logger = logging.getLogger("ascend_tune")


def build_callback(value: Any, ctx: RunContext) -> Optional[Callback]:
    """The monitor's factory for ``precision=``: a :class:`PrecisionCallback`, a :class:`PrecisionSet` when
    several configs are given, or None when off (or this rank dumps in none of them).

    ``value`` None falls back to ``ASCEND_TUNE_DUMP`` (e.g. ``task=statistics,level=L1,steps=0-2``; several
    configs separated by ``;``).
    """
    parts = []
    configs = precision_configs(value)
    for config in configs:
        config = config.with_first_step(ctx.start_step)
        if config.level in ("L0", "mix") and not ctx.models:
            raise ConfigError(
                f"precision level {config.level} dumps nn.Module calls and needs the model: pass it as "
                "TrainingMonitor(model, ...), or use level='L1' (API calls only)"
            )
        # beside other items, auto means the builtin engine (the one that shares a run: _check_together)
        several = len(configs) > 1 and config.backend == "auto"
        backend = "builtin" if several else backends.choose(config, ctx.device.kind)
        dump_path = config.dump_path or ctx.run_dir.dump_dir
        parts.append(PrecisionCallback(config, backend, dump_path, explicit_path=config.dump_path is not None))
    _check_together(parts, ctx.start_step)
    parts = [part for part in parts if part.config.selects_rank(ctx.rank)]
    if len(parts) > 1:
        return PrecisionSet(parts)
    return parts[0] if parts else None


def _check_together(parts: list, start: int) -> None:
    """Several configs run in the builtin engine only (msprobe and ptdbg patch torch for the rest of the process, keep
    one config per process, and compute their statistics with torch calls the builtin engine would record as the
    model's), and two of them may share a step only when they write different files there."""
    if len(parts) < 2:
        return
    for i, part in enumerate(parts):
        if part.backend_name != "builtin":
            raise ConfigError(
                f"precision item {i} ({part.config.task}) runs through {part.backend_name}, which patches torch for "
                "the whole process and holds one config: it cannot share a run with other precision items; pass "
                "backend='builtin' to it, or give it alone"
            )
    for i, a in enumerate(parts):
        for j in range(i + 1, len(parts)):
            b = parts[j]
            if a.dump_path == b.dump_path and a.config.task == b.config.task == "overflow_check":
                raise ConfigError(
                    f"precision items {i} and {j} both check for overflows into {a.dump_path}, and each writes the "
                    "run's overflow.json there; give one a dump_path of its own or merge their steps into one item"
                )
            step = first_common_step(a.config, b.config, start)
            if step is not None and a.dump_path == b.dump_path and (
                    (a.config.task == "replay") == (b.config.task == "replay")):
                raise ConfigError(
                    f"precision items {i} ({a.config.task}) and {j} ({b.config.task}) both run at step {step} into "
                    f"{a.dump_path} and would write the same files; give one a dump_path of its own or dump "
                    "different steps (a dump and a replay of one step may share it)"
                )


class PrecisionCallback(Callback):
    """Drives one precision backend from the monitor's step clock (see the module docstring)."""

    name = "precision"

    def __init__(self, config: PrecisionConfig, backend: str, dump_path: str, explicit_path: bool = True):
        self.config = config
        self.backend_name = backend
        self.dump_path = dump_path
        self._explicit_path = explicit_path
        self._backend: Any = None
        self._active: Optional[int] = None
        self._done = False
        self._dumped: list = []
        self._checked: list = []
        self._overflows: list = []
        self._replays: list = []
        self._error: Optional[str] = None
        self._ctx: Optional[RunContext] = None
        self._armed: set = set()  # steps another feature asked for (dump_step)
        self._begun: Optional[int] = None

    # --- the step clock -------------------------------------------------------------------------------------------

    def on_enter(self, ctx: RunContext, stack: contextlib.ExitStack) -> None:
        self._ctx = ctx
        self._rank = ctx.rank
        self._set_aside_earlier_dumps(ctx)
        make_folder(self.dump_path)
        self._backend = backends.create(
            self.backend_name, self.config, self.dump_path, ctx.rank, list(ctx.models), self._backend_failed,
        )
        stack.callback(self._close)
        if self.backend_name == "builtin" and ctx.world_size > 1:
            from ..recording.catalog import collectives_unseen

            why = collectives_unseen()
            if why:
                logger.info("ascend_tune: %s", why)

    def on_step_begin(self, ctx: RunContext, step: int) -> None:
        self._begun = step
        if self._done or self._active is not None or not (self.config.selects_step(step) or step in self._armed):
            return
        try:
            self._backend.start(step)
        except Exception as exc:
            self._give_up(f"the {self.backend_name} dump could not start at step {step}: {type(exc).__name__}: {exc}",
                          exc)
            with contextlib.suppress(Exception):
                self._backend.stop()
            return
        self._active = step

    def on_step_end(self, ctx: RunContext, step: int) -> None:
        if self._active == step:
            self._end_step()

    def dump_step(self, step: int) -> bool:
        """Dump step ``step`` too: another feature asks (the health feature, after a spike). When ``step`` has begun
        and is not dumped, the dump starts now (the caller knows the step's forward has not). False when this
        callback cannot dump any more (a failed backend) or is no dump (an overflow check, a replay)."""
        if self._error is not None or getattr(self._backend, "failed", None) or self.config.task not in (
                "statistics", "tensor"):
            return False
        self._armed.add(step)
        self._done = False
        if step == self._begun and self._active is None and self._ctx is not None:
            self.on_step_begin(self._ctx, step)
        return True

    def on_exit(self, ctx: RunContext, exc_type: Optional[type]) -> None:
        if self._active is not None:
            self._end_step()  # the block ended inside a selected step: keep what it recorded
        if self.config.task == "overflow_check":
            self._write_overflows()

    def summary(self) -> Optional[dict]:
        out = {"backend": self.backend_name, "task": self.config.task, "level": self.config.level,
               "dump_path": self.dump_path, "steps_dumped": self._dumped, "error": self._error}
        if self.config.task == "overflow_check":
            out["overflows"] = len(self._overflows)
            out["first_overflow"] = self._overflows[0].name if self._overflows else None
        if self.config.task == "replay":
            first = next((r.first_suspect.name for r in self._replays if r.first_suspect), None)
            out["replay"] = {"checked": sum(r.checked for r in self._replays),
                             "skipped": sum(r.skipped for r in self._replays),
                             "suspects": sum(len(r.suspects) for r in self._replays), "first_suspect": first}
        return out

    # --- one step -------------------------------------------------------------------------------------------------

    def _end_step(self) -> None:
        step, self._active = self._active, None
        limit = self.config.overflow_nums
        remaining = -1 if limit == -1 else max(limit - len(self._overflows), 0)
        try:
            self._backend.stop()
            outcome = self._backend.step(remaining)
        except Exception as exc:
            self._give_up(f"the {self.backend_name} dump failed at the end of step {step}: {type(exc).__name__}: {exc}",
                          exc)
            return
        self._checked.append(step)
        if outcome.path is not None:
            self._dumped.append(step)
            self._ctx.record_event("precision_dump", step=step, path=outcome.path, backend=self.backend_name)
        if outcome.replay is not None:
            self._replayed(step, outcome.replay)
        if outcome.overflows:
            first = not self._overflows
            self._overflows.extend(outcome.overflows)
            self._write_overflows()
            if first:
                self._ctx.warn(_overflow_message(outcome.overflows[0], self._overflow_path()))
        last = self.config.last_step()
        self._armed.discard(step)
        if (last is not None and step >= last and not self._armed) or (limit != -1 and len(self._overflows) >= limit):
            self._done = True
        if getattr(self._backend, "failed", None):
            self._done = True

    def _replayed(self, step: int, report: ReplayReport) -> None:
        """The one line a replayed step ends with: calls checked, the first suspect and where it was called."""
        self._replays.append(report)
        first = report.first_suspect
        self._ctx.record_event("precision_replay", step=step, checked=report.checked, skipped=report.skipped,
                               suspects=len(report.suspects), first_suspect=first.name if first else None,
                               path=report.source)
        counts = f"{report.checked} call(s) checked on the CPU in float64, {report.skipped} skipped"
        if first is None:
            logger.info("ascend_tune: replay step %d: %s; no suspect (%s)", step, counts, report.source)
            return
        where = f" at {first.stack[0].file}:{first.stack[0].line} ({first.stack[0].code})" if first.stack else ""
        self._ctx.warn(f"replay step {step}: {counts}; {len(report.suspects)} suspect(s), the first "
                       f"{first.name}{where}: {first.reason}; all in {report.source}")

    def _close(self) -> None:
        if self._backend is not None:
            with contextlib.suppress(Exception):
                if self._active is not None:
                    self._backend.stop()
                self._backend.close()
        self._active = None

    def _backend_failed(self, reason: str, exc: BaseException) -> None:
        self._give_up(f"the builtin dump stopped recording: {reason}", exc)

    def _give_up(self, message: str, exc: BaseException) -> None:
        self._done = True
        if self._error is None:
            self._error = message
            if isinstance(exc, OSError):  # the disk or the folder: the dump is the output lost, said once
                self._ctx.outputs.fail(self.dump_path, exc, what="the precision dump")
            else:
                self._ctx.warn(message + "; training goes on without dumps")

    # --- files ----------------------------------------------------------------------------------------------------

    def _overflow_path(self) -> str:
        return os.path.join(self.dump_path, rank_dir_name(self._rank), OVERFLOW_JSON)

    def _write_overflows(self) -> None:
        path = self._overflow_path()
        try:
            make_below(self.dump_path, rank_dir_name(self._rank))
        except OSError as exc:
            self._ctx.outputs.fail(path, exc)
            return
        self._ctx.outputs.write_json(path, {
            "rank": self._rank, "backend": self.backend_name, "overflow_nums": self.config.overflow_nums,
            "steps_checked": self._checked, "steps_kept": self._dumped,
            "overflows": [o.as_dict() for o in self._overflows],
        })

    def _set_aside_earlier_dumps(self, ctx: RunContext) -> None:
        """Never write into an earlier dump of a selected step: move it aside (default path) or refuse."""
        if not os.path.isdir(self.dump_path):
            return
        taken = []
        for name in sorted(os.listdir(self.dump_path)):
            step = step_of_dir(name)
            if step is None or not self.config.selects_step(step):
                continue
            step_dir = os.path.join(self.dump_path, name)
            target = os.path.join(step_dir, rank_dir_name(ctx.rank)) if ctx.world_size > 1 else step_dir
            if os.path.isdir(target) and os.listdir(target):
                taken.append(target)
        if self.config.task == "overflow_check" and os.path.exists(self._overflow_path()):
            taken.append(os.path.dirname(self._overflow_path()))
        if not taken:
            return
        if self._explicit_path:
            where = os.path.relpath(taken[0], self.dump_path)
            raise OutputError(
                f"dump_path {self.dump_path!r} already holds a dump ({where}{' and more' if len(taken) > 1 else ''})"
                "; pass a new dump_path or move that folder away (nothing was overwritten)"
            )
        # the default dump_path lies in the run folder: its earlier dumps go aside with the monitor's earlier logs
        ctx.run_dir.set_aside([os.path.relpath(t, ctx.log_dir) for t in taken], "dump")


class PrecisionSet(Callback):
    """Several precision configs in one run (``precision=[...]``), e.g. a statistics dump and a replay of the same
    step. Each part runs as it would alone and writes its own files; at a step they share, a later part's mode sits
    above an earlier one's and passes each call down to it, so each sees the user's calls and none sees another's
    work. Steps begin in the order given and end in the reverse one; summary.json's ``precision`` is the list of the
    parts' entries."""

    name = "precision"

    def __init__(self, parts: list):
        self.parts = tuple(parts)

    def on_enter(self, ctx: RunContext, stack: contextlib.ExitStack) -> None:
        for part in self.parts:
            part.on_enter(ctx, stack)

    def on_step_begin(self, ctx: RunContext, step: int) -> None:
        for part in self.parts:
            part.on_step_begin(ctx, step)

    def on_step_end(self, ctx: RunContext, step: int) -> None:
        for part in reversed(self.parts):
            part.on_step_end(ctx, step)

    def on_exit(self, ctx: RunContext, exc_type: Optional[type]) -> None:
        for part in reversed(self.parts):
            part.on_exit(ctx, exc_type)

    def summary(self) -> list:
        return [part.summary() for part in self.parts]


def parts_of(feature: Optional[Callback]) -> tuple:
    """The precision callbacks of the ``precision`` feature (``ctx.feature("precision")``): none, one or several."""
    if feature is None:
        return ()
    return tuple(getattr(feature, "parts", (feature,)))


def _overflow_message(first: Overflow, path: str) -> str:
    where = ""
    if first.stack:
        frame = first.stack[0]
        where = f" at {frame.file}:{frame.line} ({frame.code})"
    what = "produced" if first.produced_here else "received (from code the dump does not record) and passed on"
    return (f"overflow: {first.name} {what} inf/nan in {first.tensor} at step {first.step}{where}; "
            f"all overflows in {path}")


__all__ = ["ENV_DUMP", "PrecisionCallback", "PrecisionSet", "build_callback", "parts_of"]
