"""Fake ``torch_npu.profiler``: the NPU profiler API, recording host ops through torch's CPU profiler."""

from torch_npu._fake_release import API_2_1

from . import experimental_config
from .experimental_config import (
    AiCMetrics,
    ExportType,
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
]
if not API_2_1:  # torch-npu 2.1.0 has no host samplers
    HostSystem = experimental_config.HostSystem
    __all__.append("HostSystem")
