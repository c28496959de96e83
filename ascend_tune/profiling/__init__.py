"""Profiler traces on a schedule: one ProfileConfig drives torch.profiler (cpu, cuda) or torch_npu.profiler (npu)."""

from .schedule import (
    ENV_PROFILE,
    NullProfiler,
    ProfileConfig,
    ProfilerCallback,
    StepProfiler,
    TraceRecord,
    build_callback,
    step_profiler,
)

__all__ = ["ENV_PROFILE", "NullProfiler", "ProfileConfig", "ProfilerCallback", "StepProfiler", "TraceRecord",
           "build_callback", "step_profiler"]
