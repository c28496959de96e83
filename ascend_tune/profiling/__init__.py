"""Profiler traces on a schedule: one ProfileConfig drives torch.profiler (cpu, cuda) or torch_npu.profiler (npu).

- :mod:`.config`: ``ProfileConfig``, what to trace and where (``profile=`` / ``ASCEND_TUNE_PROFILE``);
- :mod:`.schedule`: ``StepProfiler``, the profiler over training steps, and ``step_profiler`` for a hand-written
  loop (``NullProfiler`` when profiling is off);
- :mod:`.backends`: the torch.profiler and torch_npu.profiler objects it drives;
- :mod:`.retention`: which traces stay on disk (``keep_last``, the ``max_trace_mb`` budget), ``TraceRecord``;
- :mod:`.callback`: the monitor's ``profile=`` feature (``build_callback``), with the trace advisor at the end.
"""

from .callback import ProfilerCallback, build_callback
from .config import AIC_METRICS, ENV_PROFILE, PROFILER_LEVELS, ProfileConfig
from .retention import TraceRecord
from .schedule import NullProfiler, StepProfiler, step_profiler

__all__ = ["AIC_METRICS", "ENV_PROFILE", "NullProfiler", "PROFILER_LEVELS", "ProfileConfig", "ProfilerCallback",
           "StepProfiler", "TraceRecord", "build_callback", "step_profiler"]
