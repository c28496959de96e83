"""Fake ``torch_npu.profiler.experimental_config``: what to collect on the device, and the export format.

The option values are the real strings (``ProfilerLevel.Level0 == "Level0"``, ``ExportType.Text == "text"``).
Invalid values are reset with a warning, as in the real class; the device options change nothing on the fake.
"""

from __future__ import annotations

import inspect
import warnings
from typing import Any, Optional, Union

from torch_npu._fake_release import API_2_1, narrowed

from ._constant import Constant, print_info_msg, print_warn_msg

__all__ = [
    "_ExperimentalConfig",
    "supported_profiler_level",
    "supported_ai_core_metrics",
    "supported_export_type",
    "ProfilerLevel",
    "AiCMetrics",
    "ExportType",
    "HostSystem",
]


class ProfilerLevel:
    """How much device data to collect: Level0 (ops, cheapest) to Level2; Level_none collects only mstx marks."""

    Level0 = Constant.LEVEL0
    Level1 = Constant.LEVEL1
    Level2 = Constant.LEVEL2
    Level_none = Constant.LEVEL_NONE


class AiCMetrics:
    """AI Core hardware counter groups (collected from Level1 on)."""

    PipeUtilization = Constant.AicPipeUtilization
    ArithmeticUtilization = Constant.AicArithmeticUtilization
    Memory = Constant.AicMemory
    MemoryL0 = Constant.AicMemoryL0
    MemoryUB = Constant.AicMemoryUB
    ResourceConflictRatio = Constant.AicResourceConflictRatio
    L2Cache = Constant.AicL2Cache
    MemoryAccess = Constant.AicMemoryAccess
    AiCoreNone = Constant.AicMetricsNone


class ExportType:
    """Output format: Text (trace_view.json and CSV files) or Db (one SQLite file)."""

    Db = Constant.Db
    Text = Constant.Text


class HostSystem:
    """Host-side samplers."""

    CPU = Constant.CPU
    MEM = Constant.MEM
    DISK = Constant.DISK
    NETWORK = Constant.NETWORK
    OSRT = Constant.OSRT
    NUMA = Constant.NUMA


def supported_profiler_level() -> set[str]:
    """Every ProfilerLevel value."""
    return {ProfilerLevel.Level0, ProfilerLevel.Level1, ProfilerLevel.Level2, ProfilerLevel.Level_none}


def supported_ai_core_metrics() -> set[str]:
    """Every AiCMetrics value."""
    return {value for name, value in vars(AiCMetrics).items() if not name.startswith("_")}


def supported_export_type() -> set[str]:
    """Every ExportType value."""
    return {ExportType.Db, ExportType.Text}


class _ExperimentalConfig:
    """NPU-side profiler options; the defaults are the real ones (Level0, no AI Core metrics at Level0, text)."""

    def __init__(
        self,
        profiler_level: str = Constant.LEVEL0,
        aic_metrics: str = Constant.AicPipeUtilization,
        l2_cache: bool = False,
        msprof_tx: bool = False,
        mstx: bool = False,
        data_simplification: bool = True,
        record_op_args: bool = False,
        op_attr: bool = False,
        gc_detect_threshold: Optional[float] = None,
        export_type: Union[str, list] = ExportType.Text,
        host_sys: Optional[list] = None,
        mstx_domain_include: Optional[list] = None,
        mstx_domain_exclude: Optional[list] = None,
        sys_io: bool = False,
        sys_interconnection: bool = False,
    ):
        self._profiler_level = profiler_level
        self._aic_metrics = aic_metrics
        self._l2_cache = l2_cache
        self._msprof_tx = msprof_tx
        self._mstx = mstx
        self._data_simplification = data_simplification
        self.record_op_args = record_op_args
        self._export_type = self._export_type_list(export_type)
        self._host_sys = host_sys if host_sys else []
        self._op_attr = op_attr
        self._gc_detect_threshold = gc_detect_threshold
        self._mstx_domain_include = mstx_domain_include if mstx_domain_include else []
        self._mstx_domain_exclude = mstx_domain_exclude if mstx_domain_exclude else []
        self._sys_io = sys_io
        self._sys_interconnection = sys_interconnection
        self._check_params()

    @property
    def export_type(self) -> list[str]:
        """The export formats, as a list."""
        return self._export_type

    @property
    def with_gc(self) -> bool:
        """Whether garbage-collection pauses are recorded."""
        return self._gc_detect_threshold is not None

    @property
    def gc_detect_threshold(self) -> Optional[float]:
        """The shortest GC pause recorded, in ms (None: GC not recorded)."""
        return self._gc_detect_threshold

    @property
    def tx_enabled(self) -> bool:
        """Whether mstx (or the older msprof_tx) marks are collected."""
        return self._msprof_tx or self._mstx

    @staticmethod
    def _export_type_list(export_type: Any) -> list[str]:
        if isinstance(export_type, str) and export_type:
            return [export_type]
        if isinstance(export_type, list) and export_type:
            return list(set(export_type))
        print_warn_msg(f"Invalid parameter export_type: {export_type}, reset it to text.")
        return [ExportType.Text]

    def _check_params(self) -> None:
        if self._profiler_level not in supported_profiler_level():
            print_warn_msg("Invalid parameter profiler_level, reset it to ProfilerLevel.Level0.")
            self._profiler_level = ProfilerLevel.Level0
        if self._aic_metrics not in supported_ai_core_metrics():
            print_warn_msg("Invalid parameter aic_metrics, reset it to default.")
            level0 = self._profiler_level == ProfilerLevel.Level0
            self._aic_metrics = AiCMetrics.AiCoreNone if level0 else AiCMetrics.PipeUtilization
        if self._profiler_level in (ProfilerLevel.Level0, ProfilerLevel.Level_none) and (
            self._aic_metrics != AiCMetrics.AiCoreNone
        ):
            # The default aic_metrics meets the default level here, so a default config prints this line too.
            print_warn_msg("Please use level1 or level2 if you want to collect aic metrics, reset aic metrics to None!")
            self._aic_metrics = AiCMetrics.AiCoreNone
        flags = ("_l2_cache", "_msprof_tx", "_mstx", "record_op_args", "_op_attr", "_sys_io", "_sys_interconnection")
        for name in flags:
            if not isinstance(getattr(self, name), bool):
                print_warn_msg(f"Invalid parameter {name.lstrip('_')}, which must be of bool type, reset it to False.")
                setattr(self, name, False)
        if self._msprof_tx:
            warnings.warn(
                "The parameter msprof_tx will be deprecated. Please use the new parameter mstx instead.", stacklevel=3
            )
        if self._profiler_level == ProfilerLevel.Level_none and not (self._msprof_tx or self._mstx):
            print_warn_msg("Parameter mstx or msprof_tx must be True if profiler_level is set to Level_none.")
            self._mstx = True
        if not all(kind in supported_export_type() for kind in self._export_type):
            print_warn_msg("Invalid parameter export_type, reset it to text.")
            self._export_type = [ExportType.Text]
        if self._op_attr and ExportType.Db not in self._export_type:
            print_warn_msg("op_attr switch is invalid with export type set as text.")
            self._op_attr = False
        threshold = self._gc_detect_threshold
        if threshold is not None:
            if not isinstance(threshold, (int, float)) or threshold < 0:
                print_warn_msg("Parameter gc_detect_threshold is invalid, reset it to default.")
                self._gc_detect_threshold = None
            elif threshold == 0:
                print_info_msg("Parameter gc_detect_threshold is set to 0, it will collect all gc events.")


if API_2_1:
    # torch-npu 2.1.0.post8: no host samplers, no mstx switches, no MemoryAccess counters, no tx_enabled; aic_metrics
    # defaults to none and becomes PipeUtilization from Level1 on.
    del HostSystem, AiCMetrics.MemoryAccess, _ExperimentalConfig.tx_enabled
    __all__.remove("HostSystem")
    _full_init = _ExperimentalConfig.__init__

    def _init_2_1(self: _ExperimentalConfig, profiler_level: str = Constant.LEVEL0,
                  aic_metrics: str = Constant.AicMetricsNone, **kwargs: Any) -> None:
        if profiler_level not in (Constant.LEVEL0, Constant.LEVEL_NONE) and aic_metrics == Constant.AicMetricsNone:
            aic_metrics = Constant.AicPipeUtilization
        _full_init(self, profiler_level, aic_metrics, **kwargs)

    _init_2_1.__signature__ = inspect.signature(_full_init)  # type: ignore[attr-defined]
    _ExperimentalConfig.__init__ = narrowed(  # type: ignore[method-assign]
        _init_2_1,
        ("self", "profiler_level", "aic_metrics", "l2_cache", "msprof_tx", "data_simplification", "record_op_args",
         "op_attr", "gc_detect_threshold", "export_type"),
        aic_metrics=Constant.AicMetricsNone,
    )
