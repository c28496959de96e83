"""Profiler traces on a schedule: one ProfileConfig drives torch.profiler (cpu, cuda) or torch_npu.profiler (npu).

- :mod:`.config`: ``ProfileConfig``, what to trace and where (``profile=`` / ``ASCEND_TUNE_PROFILE``);
- :mod:`.schedule`: ``StepProfiler``, the profiler over training steps, and ``step_profiler`` for a hand-written
  loop (``NullProfiler`` when profiling is off);
- :mod:`.backends`: the torch.profiler and torch_npu.profiler objects it drives;
- :mod:`.retention`: which traces stay on disk (``keep_last``, the ``max_trace_mb`` budget), ``TraceRecord``;
- :mod:`.callback`: the monitor's ``profile=`` feature (``build_callback``), with the trace advisor at the end.
"""

from ..lazy import lazy_names

__all__ = ["AIC_METRICS", "ENV_PROFILE", "NullProfiler", "PROFILER_LEVELS", "ProfileConfig", "ProfilerCallback",
           "StepProfiler", "TraceRecord", "build_callback", "step_profiler"]

__getattr__, __dir__ = lazy_names(__name__, {
    "ProfilerCallback": "ascend_tune.profiling.callback", "build_callback": "ascend_tune.profiling.callback",
    "AIC_METRICS": "ascend_tune.profiling.config", "ENV_PROFILE": "ascend_tune.profiling.config",
    "PROFILER_LEVELS": "ascend_tune.profiling.config", "ProfileConfig": "ascend_tune.profiling.config",
    "TraceRecord": "ascend_tune.profiling.retention", "NullProfiler": "ascend_tune.profiling.schedule",
    "StepProfiler": "ascend_tune.profiling.schedule", "step_profiler": "ascend_tune.profiling.schedule",
})
