"""Fake ``torch_npu.profiler``: the NPU profiler API, recording host ops through torch's CPU profiler."""

from .experimental_config import (
    AiCMetrics,
    ExportType,
    HostSystem,
    ProfilerLevel,
    _ExperimentalConfig,
    supported_ai_core_metrics,
    supported_export_type,
    supported_profiler_level,
)
from .profiler import profile, tensorboard_trace_handler
from .profiler_interface import ProfilerActivity, supported_activities
from .scheduler import ProfilerAction
from .scheduler import Schedule as schedule

__all__ = [
    "profile",
    "ProfilerActivity",
    "supported_activities",
    "tensorboard_trace_handler",
    "schedule",
    "ProfilerAction",
    "_ExperimentalConfig",
    "supported_profiler_level",
    "supported_ai_core_metrics",
    "supported_export_type",
    "ProfilerLevel",
    "AiCMetrics",
    "ExportType",
    "HostSystem",
]
