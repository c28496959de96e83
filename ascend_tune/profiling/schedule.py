"""Profiler traces on a schedule: one ProfileConfig drives torch.profiler (cpu, cuda) or torch_npu.profiler (npu).

How steps line up with the log:
- the profiler steps once per training step and its step counter starts at the run's first step (``start_step``),
  so ``ProfilerStep#N`` in a trace is step N of ``log.txt``, also after a resume;
- the schedule counts from the first step this process runs: ``skip_first`` skips the first steps after a resume
  too, when caches and allocators are cold again;
- under the monitor a step boundary is placed at the next module forward after the step ended, not inside
  ``optimizer.step()``: torch wraps that call in its own ``Optimizer.step#...`` range, and a boundary inside it
  would make the two ranges overlap in the trace viewer.

Each finished cycle goes through the backend's ``tensorboard_trace_handler`` into ``out_dir/rank{R}``: one
``*.pt.trace.json(.gz)`` file from torch, one ``*_ascend_pt`` folder from torch_npu. The first trace's size
predicts the next ones: after each trace, when the kept traces plus one more would exceed ``max_trace_mb``,
a warning says so and tracing stops after that cycle (``keep_last`` deletes this run's oldest traces first).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import shutil
import socket
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Optional, Union

from ..callbacks import Callback
from ..config import FeatureConfig
from ..errors import ConfigError, DeviceError, OutputError
from ..formats.run_dir import PROFILE_DIR, rank_dir_name

if TYPE_CHECKING:
    from ..context import RunContext

ENV_PROFILE = "ASCEND_TUNE_PROFILE"
logger = logging.getLogger("ascend_tune")

# Names of torch_npu.profiler.ProfilerLevel / AiCMetrics attributes; checked here so a typo fails before training.
PROFILER_LEVELS = ("Level_none", "Level0", "Level1", "Level2")
AIC_METRICS = (
    "PipeUtilization", "ArithmeticUtilization", "Memory", "MemoryL0", "MemoryUB", "ResourceConflictRatio",
    "L2Cache", "MemoryAccess", "AiCoreNone",
)
_RECORDING = ("RECORD", "RECORD_AND_SAVE")  # action names shared by torch's and torch_npu's ProfilerAction enums


@dataclass(frozen=True)
class ProfileConfig(FeatureConfig):
    """What to trace and where. The schedule defaults are the seed's ``get_profiler_context``; the NPU ones are
    the Ascend migration sample's (Level1, PipeUtilization, no L2 cache, no simplification).

    Schedule (torch.profiler's meaning): skip ``skip_first`` steps, then ``repeat`` cycles of ``wait`` idle,
    ``warmup`` and ``active`` recorded steps (``repeat=0``: cycles until the run ends). One trace per cycle.
    record_shapes / profile_memory / with_stack / with_modules: passed to the profiler (stacks are costly on NPU).
    out_dir: traces go to ``out_dir/rank{R}``; None means ``<log_dir>/profile``.
    gzip: torch traces written as ``.json.gz`` (torch_npu writes a folder, never gzipped).
    keep_last: traces of this run kept per rank; older ones are deleted (None keeps all).
    max_trace_mb: disk budget of this run's kept traces per rank; None disables the check.
    aic_metrics / profiler_level / l2_cache / data_simplification: torch_npu's ``_ExperimentalConfig`` (NPU only);
    the two names are attributes of ``torch_npu.profiler.AiCMetrics`` / ``ProfilerLevel``.
    advise: at the end of the block, run the trace advisor on this rank's traces and write ``advice.html`` beside
    them (findings also go to the log and ``summary.json``).

    ``from_any`` / ``from_text`` (:class:`~ascend_tune.config.FeatureConfig`) read the option and the
    ``ASCEND_TUNE_PROFILE`` text (``"1"``, ``"0"`` or ``"wait=1,warmup=1,active=2,repeat=1,skip_first=5"``).
    """

    OPTION = "profile"
    ENV = ENV_PROFILE
    EXAMPLE = "wait=1,warmup=1,active=2,repeat=1,skip_first=5"

    wait: int = 1
    warmup: int = 1
    active: int = 2
    repeat: int = 1
    skip_first: int = 10
    record_shapes: bool = True
    profile_memory: bool = False
    with_stack: bool = False
    with_modules: bool = False
    out_dir: Optional[str] = None
    gzip: bool = True
    keep_last: Optional[int] = None
    max_trace_mb: Optional[float] = 500.0
    aic_metrics: str = "PipeUtilization"
    profiler_level: str = "Level1"
    l2_cache: bool = False
    data_simplification: bool = False
    advise: bool = False

    def __post_init__(self) -> None:
        for name, minimum in (("wait", 0), ("warmup", 0), ("active", 1), ("repeat", 0), ("skip_first", 0)):
            self.check_int(name, minimum)
        self.check_bool("record_shapes", "profile_memory", "with_stack", "with_modules", "gzip", "l2_cache",
                        "data_simplification", "advise")
        if self.out_dir is not None:
            if not isinstance(self.out_dir, (str, os.PathLike)) or not os.fspath(self.out_dir):
                raise ConfigError(f"profile option out_dir must be a folder path, got {self.out_dir!r}")
            object.__setattr__(self, "out_dir", os.fspath(self.out_dir))
        if self.keep_last is not None:
            self.check_int("keep_last", 1)
        budget = self.max_trace_mb
        if budget is not None and (isinstance(budget, bool) or not isinstance(budget, (int, float)) or budget <= 0):
            raise ConfigError(f"profile option max_trace_mb must be a number of MB > 0 or None, got {budget!r}")
        self.check_choice("profiler_level", PROFILER_LEVELS)
        self.check_choice("aic_metrics", AIC_METRICS)

    @property
    def cycle(self) -> int:
        """Steps in one cycle (wait + warmup + active)."""
        return self.wait + self.warmup + self.active

    def traced_steps(self, start_step: int = 0, cycles: int = 10) -> list:
        """The ``(first, last)`` recorded steps of the first ``cycles`` cycles of a run starting at ``start_step``."""
        count = min(self.repeat, cycles) if self.repeat else cycles
        first = start_step + self.skip_first + self.wait + self.warmup
        return [(first + k * self.cycle, first + k * self.cycle + self.active - 1) for k in range(count)]


@dataclass(frozen=True)
class TraceRecord:
    """One trace written by the profiler.

    path: the trace file (torch) or ``*_ascend_pt`` folder (torch_npu); first_step / last_step: the completed
    steps it recorded (None when the run ended before one completed); size_bytes: on disk; complete: all the
    cycle's ``active`` steps completed (False when the run ended inside the cycle).
    """

    path: str
    first_step: Optional[int]
    last_step: Optional[int]
    size_bytes: int
    complete: bool

    @property
    def size_mb(self) -> float:
        """The size in MiB."""
        return self.size_bytes / 2**20

    def as_dict(self) -> dict:
        """A JSON-ready dict (metrics.jsonl events, summary.json)."""
        out = dataclasses.asdict(self)
        out["size_mb"] = round(self.size_mb, 6)
        return out


class NullProfiler:
    """Profiling off: a context whose ``step()`` does nothing."""

    backend = None
    traces: tuple = ()

    def __enter__(self) -> NullProfiler:
        return self

    def __exit__(self, *exc: Any) -> bool:
        return False

    def step(self) -> None:
        """Nothing to do."""


class StepProfiler:
    """A profiler over training steps: enter it, call ``step()`` after each step, leave it.

    Parameters:
        config: the ProfileConfig.
        out_dir: the folder holding the ``rank{R}`` folders (``config.out_dir`` wins when set).
        rank: this process's global rank.
        start_step: the number of the first step (``ProfilerStep#start_step``); the schedule starts there.
        device_kind: ``cpu`` | ``cuda`` | ``npu``; None asks the device layer.
        on_event: called ``(kind, fields)`` for each trace written or removed (the monitor's metrics.jsonl).
        warn: called with a warning's text (default: the ``ascend_tune`` logger).
    """

    def __init__(
        self,
        config: ProfileConfig,
        out_dir: Union[str, os.PathLike] = PROFILE_DIR,
        *,
        rank: int = 0,
        start_step: int = 0,
        device_kind: Optional[str] = None,
        on_event: Optional[Callable[[str, dict], None]] = None,
        warn: Optional[Callable[[str], None]] = None,
    ):
        self.config = config
        self.out_dir = config.out_dir or os.fspath(out_dir)
        self.rank = rank
        self.rank_dir = os.path.join(self.out_dir, rank_dir_name(rank))
        self.start_step = start_step
        self.device_kind = device_kind
        self.backend: Optional[str] = None
        self.traces: list = []  # kept on disk, oldest first
        self.removed: list = []  # deleted by keep_last
        self.stopped_by_budget = False
        self._on_event = on_event
        self._warn = warn or (lambda message: logger.warning("ascend_tune: %s", message))
        self._prof: Any = None
        self._halted = False
        self._first_mb: Optional[float] = None  # the first trace's size predicts the next ones
        self._cycle_steps: list = []
        self._known: set = set()

    def __enter__(self) -> StepProfiler:
        self.start()
        return self

    def __exit__(self, *exc: Any) -> bool:
        self.stop()
        return False

    def start(self) -> None:
        """Build the backend's profiler and start it at ``start_step``."""
        if self._prof is not None:
            return
        try:
            os.makedirs(self.rank_dir, exist_ok=True)
            self._known = set(os.listdir(self.rank_dir))  # earlier runs' traces are neither counted nor deleted
        except OSError as exc:
            raise OutputError(
                f"cannot write profiler traces to {self.rank_dir!r} ({exc.strerror or exc}); "
                "pass a writable profile out_dir"
            ) from None
        kind = self.device_kind
        if kind is None:
            from ..device import detect_device

            kind = detect_device().kind
        prof = _build_npu(self) if kind == "npu" else _build_torch(self, kind)
        # The profiler numbers ProfilerStep#N from step_num; the schedule itself is shifted to match (_schedule).
        prof.step_num = self.start_step
        prof.start()
        self._prof = prof
        self._event(
            "profile_start",
            backend=self.backend,
            out_dir=self.rank_dir,
            schedule={k: getattr(self.config, k) for k in ("wait", "warmup", "active", "repeat", "skip_first")},
            planned=[list(r) for r in self.config.traced_steps(self.start_step)],
        )

    @property
    def running(self) -> bool:
        """True from ``start()`` until ``stop()``, or until the schedule has nothing left to record."""
        return self._prof is not None

    def step(self) -> None:
        """The step ``ProfilerStep#N`` stands for has ended; the next one begins."""
        prof = self._prof
        if prof is None:
            return
        if prof.current_action.name in _RECORDING:
            self._cycle_steps.append(prof.step_num)
        prof.step()
        cycles_done = len(self.traces) + len(self.removed)
        if self._halted or (self.config.repeat and cycles_done >= self.config.repeat):
            self.stop()  # the remaining steps cost nothing, not even a ProfilerStep range

    def stop(self) -> None:
        """Stop the profiler; a cycle still recording is saved as an incomplete trace."""
        prof, self._prof = self._prof, None
        if prof is not None:
            prof.stop()

    def summary(self) -> dict:
        """What summary.json reports: the backend, the folder and the traces kept."""
        return {
            "backend": self.backend,
            "out_dir": self.rank_dir,
            "traces": [t.as_dict() for t in self.traces],
            "removed": len(self.removed),
            "stopped_by_budget": self.stopped_by_budget,
        }

    # --- called by the backend profiler --------------------------------------------------------------------------

    def _schedule(self, inner: Callable[[int], Any], none: Any) -> Callable[[int], Any]:
        """The backend's schedule, counted from ``start_step`` and switched off once the budget says stop.

        A plain function, not an object: torch_npu writes the schedule's ``__dict__`` into its profiler_info.json.
        """
        offset = self.start_step

        def schedule(step_num: int) -> Any:
            if self._halted:
                return none
            # The profiler asks for step 0 once before step_num is set to start_step: answer for start_step.
            return inner(max(step_num - offset, 0))

        return schedule

    def _on_trace_ready(self, backend_handler: Callable[[Any], None]) -> Callable[[Any], None]:
        def on_trace_ready(prof: Any) -> None:
            steps, self._cycle_steps = self._cycle_steps, []
            if self._halted and self.stopped_by_budget:
                return  # a cycle begun before the budget check (wait=0, warmup=0): keep the disk promise
            try:
                backend_handler(prof)
            except Exception as exc:  # a trace that cannot be written must not end the training run
                self._halted = True
                self._warn(f"profiler trace could not be written to {self.rank_dir} ({exc}); tracing stops")
                return
            self._collect(steps)

        return on_trace_ready

    def _collect(self, steps: list) -> None:
        try:
            present = set(os.listdir(self.rank_dir))
        except OSError:
            present = set()
        new = sorted(present - self._known)
        self._known |= present
        if not new:
            self._warn(f"the profiler finished a cycle but wrote nothing under {self.rank_dir}")
            return
        for name in new:
            path = os.path.join(self.rank_dir, name)
            record = TraceRecord(
                path=path,
                first_step=steps[0] if steps else None,
                last_step=steps[-1] if steps else None,
                size_bytes=_disk_size(path),
                complete=len(steps) == self.config.active,
            )
            self.traces.append(record)
            span = f"steps {record.first_step}-{record.last_step}" if steps else "no completed step"
            logger.info("ascend_tune: profiler trace of %s (%.2f MB): %s", span, record.size_mb, path)
            self._event("profile_trace", **record.as_dict())
        self._keep_last()
        self._check_budget()

    def _keep_last(self) -> None:
        keep = self.config.keep_last
        while keep is not None and len(self.traces) > keep:
            old = self.traces.pop(0)
            try:
                if os.path.isdir(old.path):
                    shutil.rmtree(old.path)
                else:
                    os.remove(old.path)
            except OSError as exc:
                self._warn(f"could not delete the old trace {old.path} ({exc.strerror or exc})")
                continue
            self.removed.append(old)
            self._event("profile_trace_removed", path=old.path, first_step=old.first_step,
                        last_step=old.last_step, reason=f"keep_last={keep}")

    def _check_budget(self) -> None:
        """Stop after this cycle when the next trace, as large as the first, would take the kept ones over budget."""
        budget = self.config.max_trace_mb
        if budget is None or self._halted or not self.traces:
            return
        if self._first_mb is None:
            self._first_mb = self.traces[-1].size_mb
        used = sum(t.size_mb for t in self.traces)
        written = len(self.traces) + len(self.removed)
        more = self.config.repeat == 0 or written < self.config.repeat
        projected = used
        if more:
            replaced = self.config.keep_last is not None and len(self.traces) >= self.config.keep_last
            projected += self._first_mb - (self.traces[0].size_mb if replaced else 0.0)
        if projected <= budget:
            return
        self._halted = True  # one warning: nothing is checked once halted
        kept = f"{len(self.traces)} trace(s) kept on rank {self.rank} take {used:.3g} MB"
        fix = "raise max_trace_mb, set keep_last, or trace fewer steps (active, repeat, record_shapes)"
        if more:
            self.stopped_by_budget = True
            self._warn(
                f"profiler traces would exceed max_trace_mb={budget:g}: {kept} and the next would add about "
                f"{self._first_mb:.3g} MB; tracing stops after this cycle. To trace more, {fix}"
            )
        else:
            self._warn(f"profiler traces exceed max_trace_mb={budget:g}: {kept}. Next time, {fix}")

    def _event(self, kind: str, **fields: Any) -> None:
        if self._on_event is not None:
            self._on_event(kind, fields)


def step_profiler(
    value: Any,
    out_dir: Union[str, os.PathLike] = PROFILE_DIR,
    *,
    rank: Optional[int] = None,
    start_step: int = 0,
) -> Union[StepProfiler, NullProfiler]:
    """A profiler context for a hand-written loop: call ``prof.step()`` after each training step.

    Parameters:
        value: anything ``ProfileConfig.from_any`` takes; None / False give a NullProfiler.
        out_dir: the folder holding ``rank{R}`` (``out_dir`` in the config wins).
        rank: this process's global rank; else ``RANK`` (0 when unset).
        start_step: the first step's number, to continue a resumed run.
    """
    config = ProfileConfig.from_any(value)
    if config is None:
        return NullProfiler()
    if rank is None:
        try:
            rank = int(os.environ.get("RANK", "0"))
        except ValueError:
            raise ConfigError(f"RANK={os.environ['RANK']!r} is not an integer; pass rank=") from None
    return StepProfiler(config, out_dir, rank=rank, start_step=start_step)


# --- the monitor's feature ----------------------------------------------------------------------------------------


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
        )
        import torch.nn.modules.module as module_hooks

        self._register_boundary = module_hooks.register_module_forward_pre_hook
        self.session.start()
        # Registered right after a successful start, so a failure later in __enter__ still stops the profiler.
        stack.callback(self.session.stop)
        stack.callback(self._drop_boundary)

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

        folder = self.session.rank_dir
        try:
            self.advice = write_html(advise_traces([t.path for t in self.session.traces], out_dir=folder), folder)
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


# --- backends -----------------------------------------------------------------------------------------------------


def _build_torch(session: StepProfiler, kind: str) -> Any:
    import torch.profiler as tp

    cfg = session.config
    activities = [tp.ProfilerActivity.CPU]
    if kind == "cuda":
        activities.append(tp.ProfilerActivity.CUDA)
    inner = tp.schedule(
        wait=cfg.wait, warmup=cfg.warmup, active=cfg.active, repeat=cfg.repeat, skip_first=cfg.skip_first
    )
    handler = tp.tensorboard_trace_handler(
        session.rank_dir, worker_name=f"rank{session.rank}_{socket.gethostname()}_{os.getpid()}", use_gzip=cfg.gzip
    )
    session.backend = "torch.profiler"
    return tp.profile(
        activities=activities,
        schedule=session._schedule(inner, tp.ProfilerAction.NONE),
        on_trace_ready=session._on_trace_ready(handler),
        record_shapes=cfg.record_shapes,
        profile_memory=cfg.profile_memory,
        with_stack=cfg.with_stack,
        with_modules=cfg.with_modules,
    )


def _build_npu(session: StepProfiler) -> Any:
    from ..device import torch_npu_module

    torch_npu = torch_npu_module()
    if torch_npu is None:
        raise DeviceError("profiling on the NPU needs torch_npu, which is not usable here; run `ascend-tune device`")
    npu_prof = torch_npu.profiler
    cfg = session.config
    # torch_npu's schedule takes (wait, active, warmup, ...) positionally, torch's (wait, warmup, active): keywords.
    inner = npu_prof.schedule(
        wait=cfg.wait, warmup=cfg.warmup, active=cfg.active, repeat=cfg.repeat, skip_first=cfg.skip_first
    )
    experimental = npu_prof._ExperimentalConfig(
        aic_metrics=_npu_constant(npu_prof, "AiCMetrics", cfg.aic_metrics),
        profiler_level=_npu_constant(npu_prof, "ProfilerLevel", cfg.profiler_level),
        l2_cache=cfg.l2_cache,
        data_simplification=cfg.data_simplification,
    )
    # The handler configures torch_npu's process-wide output path when it is created: create it right here.
    handler = npu_prof.tensorboard_trace_handler(
        dir_name=session.rank_dir, worker_name=f"rank{session.rank}_{socket.gethostname()}"
    )
    session.backend = "torch_npu.profiler"
    return npu_prof.profile(
        activities=[npu_prof.ProfilerActivity.CPU, npu_prof.ProfilerActivity.NPU],
        schedule=session._schedule(inner, npu_prof.ProfilerAction.NONE),
        on_trace_ready=session._on_trace_ready(handler),
        record_shapes=cfg.record_shapes,
        profile_memory=cfg.profile_memory,
        with_stack=cfg.with_stack,
        with_modules=cfg.with_modules,
        experimental_config=experimental,
    )


def _npu_constant(npu_prof: Any, group: str, name: str) -> Any:
    try:
        return getattr(getattr(npu_prof, group), name)
    except AttributeError:
        raise ConfigError(
            f"this torch_npu has no profiler.{group}.{name}; choose another profile option value "
            f"({'profiler_level' if group == 'ProfilerLevel' else 'aic_metrics'})"
        ) from None


# --- small facts --------------------------------------------------------------------------------------------------

def _disk_size(path: str) -> int:
    if not os.path.isdir(path):
        return os.path.getsize(path)
    total = 0
    for folder, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.path.getsize(os.path.join(folder, name))
    return total


__all__ = ["ENV_PROFILE", "NullProfiler", "ProfileConfig", "ProfilerCallback", "StepProfiler", "TraceRecord",
           "build_callback", "step_profiler"]
