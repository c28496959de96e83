"""ProfileConfig: what the profiler traces (the schedule, the profiler's switches) and where, checked up front."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional

from ..config import FeatureConfig
from ..errors import ConfigError

ENV_PROFILE = "ASCEND_TUNE_PROFILE"

# Names of torch_npu.profiler.ProfilerLevel / AiCMetrics attributes; checked here so a typo fails before training.
PROFILER_LEVELS = ("Level_none", "Level0", "Level1", "Level2")
AIC_METRICS = (
    "PipeUtilization", "ArithmeticUtilization", "Memory", "MemoryL0", "MemoryUB", "ResourceConflictRatio",
    "L2Cache", "MemoryAccess", "AiCoreNone",
)


@dataclass(frozen=True)
class ProfileConfig(FeatureConfig):
    """What to trace and where. The schedule defaults are the guide's ``get_profiler_context``; the NPU ones are
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
    module_scopes: while the profiler records, each forward of a module of the monitored model runs inside an
    ``ascend_tune.module#<path>`` range, so ``ascend-tune compare-trace`` can say which module got slower.

    ``from_any`` / ``from_text`` (:class:`~ascend_tune.config.FeatureConfig`) read the option and the
    ``ASCEND_TUNE_PROFILE`` text (``"1"``, ``"0"`` or ``"wait=1,warmup=1,active=2,repeat=1,skip_first=5"``).
    """

    OPTION = "profile"
    ENV = ENV_PROFILE
    EXAMPLE = "wait=1,warmup=1,active=2,repeat=1,skip_first=5"
    RUN_FLAGS = {"profile": "profiler traces on a schedule (SPEC: e.g. wait=1,warmup=1,active=2)"}

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
    module_scopes: bool = True

    def __post_init__(self) -> None:
        for name, minimum in (("wait", 0), ("warmup", 0), ("active", 1), ("repeat", 0), ("skip_first", 0)):
            self.check_int(name, minimum)
        self.check_bool("record_shapes", "profile_memory", "with_stack", "with_modules", "gzip", "l2_cache",
                        "data_simplification", "advise", "module_scopes")
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
