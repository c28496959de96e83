"""Fake ``torch_npu.profiler.profiler_interface``: one profiling run, from its folder to its trace files.

The real class drives the NPU profiler in C++; the fake records host ops with a real ``torch.profiler.profile``
(CPU only) and converts them to torch_npu's formats when the run is finalised.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Iterable
from enum import Enum
from typing import Any, Callable, Optional

import torch
import torch_npu

from ._constant import Constant, print_warn_msg
from ._profiler_path_creator import prof_path_creator
from ._trace_view import framework_events, metadata_events
from .experimental_config import ExportType, _ExperimentalConfig

__all__ = ["supported_activities"]


class ProfilerActivity(Enum):
    """What to profile: host ops (CPU) or device tasks (NPU). The real one is a pybind enum in ``torch_npu._C``."""

    CPU = 0
    NPU = 1


def supported_activities() -> set[ProfilerActivity]:
    """The activities this build can profile."""
    return {ProfilerActivity.CPU, ProfilerActivity.NPU}


class _ProfInterface:
    """One profiler configuration, run as init → (warmup) → start → stop → finalize → analyse, possibly repeatedly."""

    def __init__(
        self,
        activities: Optional[Iterable[ProfilerActivity]] = None,
        record_shapes: bool = False,
        profile_memory: bool = False,
        with_stack: bool = False,
        with_flops: bool = False,
        with_modules: bool = False,
        experimental_config: Optional[_ExperimentalConfig] = None,
        schedule: Optional[Callable[[int], Any]] = None,
    ) -> None:
        self.prof_path = ""
        self.activities = set(activities) if activities else supported_activities()
        self.record_shapes = record_shapes
        self.profile_memory = profile_memory
        self.with_stack = with_stack
        self.with_flops = with_flops
        self.with_modules = with_modules
        if experimental_config is None:
            experimental_config = _ExperimentalConfig()
        elif not isinstance(experimental_config, _ExperimentalConfig):
            print_warn_msg("Invalid parameter experimental_config, reset it to default.")
            experimental_config = _ExperimentalConfig()
        self.experimental_config = experimental_config
        self.schedule = schedule
        # The finished run's events, in trace_view.json's format: what analyse() and export_chrome_trace() write.
        self.trace_events: list[dict[str, Any]] = []
        self._torch_prof: Optional[torch.profiler.profile] = None
        self._recording = False
        self._start_monotonic = 0

    def init_trace(self) -> None:
        """Open a new run: its folder, and a torch CPU profiler for the host ops."""
        self.prof_path = prof_path_creator().create_prof_dir() or ""
        self.trace_events = []
        self._recording = False
        self._torch_prof = None
        if ProfilerActivity.CPU in self.activities:
            self._torch_prof = torch.profiler.profile(
                activities=[torch.profiler.ProfilerActivity.CPU],
                record_shapes=self.record_shapes,
                profile_memory=self.profile_memory,
                with_stack=self.with_stack,
                with_flops=self.with_flops,
                with_modules=self.with_modules,
            )

    def warmup_trace(self) -> None:
        """Get the profilers ready without recording."""
        if self._torch_prof is not None:
            self._torch_prof.prepare_trace()

    def start_trace(self) -> None:
        """Start recording."""
        self._start_monotonic = time.monotonic_ns()
        if self._torch_prof is not None:
            if self._torch_prof.profiler is None:
                self._torch_prof.prepare_trace()
            self._torch_prof.start_trace()
            self._recording = True

    def stop_trace(self) -> None:
        """Stop recording; device work is drained first when NPU activity is profiled."""
        if ProfilerActivity.NPU in self.activities:
            torch_npu.npu.synchronize()
        if self._torch_prof is not None and self._recording:
            self._torch_prof.stop_trace()

    def finalize_trace(self) -> None:
        """Close the run: convert what was recorded and write ``profiler_info.json`` into the run folder."""
        host_events: list[dict[str, Any]] = []
        if self._torch_prof is not None and self._recording:
            with tempfile.TemporaryDirectory() as tmp:
                path = os.path.join(tmp, "torch_trace.json")
                self._torch_prof.export_chrome_trace(path)
                with open(path, encoding="utf-8") as fh:
                    host_events = framework_events(json.load(fh))
        self.trace_events = host_events + metadata_events(host_events) if host_events else []
        self._torch_prof = None
        self._recording = False
        if self.prof_path:
            self._dump_profiler_info()
        prof_path_creator().is_prof_inited = False

    def delete_prof_dir(self) -> None:
        """Remove the run folder of a run that recorded nothing."""
        prof_path_creator().delete_prof_dir()
        self.prof_path = ""

    def analyse(
        self, analysis_type: str = "tensorboard_trace_handler", output_path: Optional[str] = None, **kwargs: Any
    ) -> None:
        """Write the run's parsed results (``export_chrome_trace``: the trace alone, to ``output_path``)."""
        if analysis_type == "export_chrome_trace":
            _write_json(output_path, self.trace_events)
            return
        if not self.prof_path:
            return
        if ExportType.Text in self.experimental_config.export_type:
            output_dir = os.path.join(self.prof_path, Constant.OUTPUT_DIR)
            os.makedirs(output_dir, mode=0o750, exist_ok=True)
            _write_json(os.path.join(output_dir, Constant.TRACE_VIEW), self.trace_events)
        if ExportType.Db in self.experimental_config.export_type:
            print_warn_msg("The fake torch_npu does not write the db export; only the text export is simulated.")

    def _dump_profiler_info(self) -> None:
        rank = os.environ.get("RANK")
        if rank is None and torch.distributed.is_available() and torch.distributed.is_initialized():
            rank = str(torch.distributed.get_rank())
        info: dict[str, Any] = {
            "config": {
                "common_config": {
                    "activities": sorted(str(a) for a in self.activities),
                    "schedule": getattr(self.schedule, "__dict__", None) or None,
                    "record_shapes": self.record_shapes,
                    "profile_memory": self.profile_memory,
                    "with_stack": self.with_stack,
                    "with_flops": self.with_flops,
                    "with_modules": self.with_modules,
                },
                "experimental_config": dict(vars(self.experimental_config)),
            },
            "start_info": {
                "syscnt_enable": False,
                "freq": 100,
                "start_cnt": 0,
                "start_monotonic": self._start_monotonic,
            },
            "end_info": {"collectionTimeEnd": time.time_ns(), "MonotonicTimeEnd": time.monotonic_ns()},
            "torch_npu_version": torch_npu.__version__,
            "cann_version": torch_npu._C._get_cann_version("CANN"),
        }
        name = "profiler_info.json" if rank is None else f"profiler_info_{rank}.json"
        if rank is not None:
            info["rank_id"] = int(rank)
        _write_json(os.path.join(self.prof_path, name), info, indent=4)


def _write_json(path: Optional[str], data: Any, indent: Optional[int] = None) -> None:
    if not path:
        print_warn_msg("Invalid profiling path.")
        return
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=indent)
