"""Names, console messages and time formatting shared by the fake profiler (the real ones live in ``analysis``)."""

from __future__ import annotations

import functools
import os
import time
from typing import Any, Callable, TypeVar

_F = TypeVar("_F", bound=Callable[..., Any])


class Constant:
    """Directory, file and option names the real profiler writes."""

    OUTPUT_DIR = "ASCEND_PROFILER_OUTPUT"
    ASCEND_WORK_PATH = "ASCEND_WORK_PATH"
    PROFILING_WORK_PATH = "profiling_data"
    TRACE_VIEW = "trace_view.json"
    MAX_WORKER_NAME_LENGTH = 226
    LEVEL0 = "Level0"
    LEVEL1 = "Level1"
    LEVEL2 = "Level2"
    LEVEL_NONE = "Level_none"
    AicPipeUtilization = "ACL_AICORE_PIPE_UTILIZATION"
    AicArithmeticUtilization = "ACL_AICORE_ARITHMETIC_UTILIZATION"
    AicMemory = "ACL_AICORE_MEMORY_BANDWIDTH"
    AicMemoryL0 = "ACL_AICORE_L0B_AND_WIDTH"
    AicMemoryUB = "ACL_AICORE_MEMORY_UB"
    AicResourceConflictRatio = "ACL_AICORE_RESOURCE_CONFLICT_RATIO"
    AicL2Cache = "ACL_AICORE_L2_CACHE"
    AicMemoryAccess = "ACL_AICORE_MEMORY_ACCESS"
    AicMetricsNone = "ACL_AICORE_NONE"
    Db = "db"
    Text = "text"
    CPU = "cpu"
    MEM = "mem"
    DISK = "disk"
    NETWORK = "network"
    OSRT = "osrt"
    NUMA = "numa"


def _should_print_warning() -> bool:
    # The real switches: TORCH_NPU_WARNING_DISABLE=1 silences warnings, and only rank 0 prints them.
    if os.environ.get("TORCH_NPU_WARNING_DISABLE", os.environ.get("TORCH_NPU_DISABLED_WARNING")) == "1":
        return False
    return os.environ.get("RANK", "0") == "0"


def _print(level: str, message: str) -> None:
    stamp = time.strftime("[%Y-%m-%d %H:%M:%S]", time.localtime())
    print(f"{stamp} [{level}] [{os.getpid()}] profiler.py: {message}", flush=True)


def print_info_msg(message: str) -> None:
    """Print an INFO line the way the real profiler does (stdout)."""
    _print("INFO", message)


def print_warn_msg(message: str) -> None:
    """Print a WARNING line the way the real profiler does (stdout, rank 0 only)."""
    if _should_print_warning():
        _print("WARNING", message)


def print_error_msg(message: str) -> None:
    """Print an ERROR line the way the real profiler does (stdout)."""
    _print("ERROR", message)


def no_exception_func(default_ret: Any = None) -> Callable[[_F], _F]:
    """Swallow any exception into an ERROR line, as the real profiler's public methods do.

    This includes exceptions raised by a user's ``on_trace_ready`` during ``step()`` or ``stop()``.
    """

    def decorator(func: _F) -> _F:
        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            try:
                return func(*args, **kwargs)
            except Exception as exc:
                print_error_msg(f"Call {func.__name__} failed. Exception: {exc}")
                return default_ret

        return wrapper  # type: ignore[return-value]

    return decorator


def convert_ns2us_str(ns: int) -> str:
    """Nanoseconds as a microsecond string with three decimals: the real trace's ``ts`` format."""
    digits = str(ns)
    if len(digits) <= 3:
        return "0." + digits.zfill(3)
    return digits[:-3] + "." + digits[-3:]
