"""Fake ``torch_npu.npu``: device discovery and lazy initialisation, over the simulated host in ``torch_npu._C``.

``device_count`` follows the real rules: the host's NPUs (``ASCEND_TUNE_FAKE_NPU_COUNT``) masked by
``ASCEND_RT_VISIBLE_DEVICES``, re-read on every call until the runtime is initialised, cached afterwards.
"""

from __future__ import annotations

import os
from typing import Any, Optional, Union

import torch
from torch_npu import _C

from . import amp  # noqa: F401  (torch_npu.npu.amp, as in the real package)
from .memory import (
    empty_cache,
    max_memory_allocated,
    max_memory_reserved,
    memory_allocated,
    memory_reserved,
    memory_stats,
    reset_max_memory_allocated,
    reset_peak_memory_stats,
)
from .npu_config import _npuConfig, is_jit_compile_false, set_compile_mode, set_option
from .streams import Event
from .utils import _get_device_index, current_device, is_bf16_supported, set_device, synchronize

__all__ = [
    "is_initialized",
    "init",
    "is_available",
    "device_count",
    "current_device",
    "set_device",
    "get_device_name",
    "synchronize",
    "set_option",
    "set_compile_mode",
    "is_jit_compile_false",
    "is_bf16_supported",
    "Event",
    "memory_allocated",
    "max_memory_allocated",
    "memory_reserved",
    "max_memory_reserved",
    "memory_stats",
    "reset_peak_memory_stats",
    "reset_max_memory_allocated",
    "empty_cache",
    "config",
]

# Writing ``torch_npu.npu.config.allow_internal_format = False`` sets a runtime option, as in the real package.
config = _npuConfig()

_initialized = False
_cached_device_count: Optional[int] = None


def is_initialized() -> bool:
    """Whether the NPU runtime has been initialised in this process."""
    return _initialized


def _lazy_init() -> None:
    global _initialized
    if _initialized:
        return
    if device_count() == 0:
        # The real runtime fails the same way when ASCEND_RT_VISIBLE_DEVICES hides every device or none exist.
        raise RuntimeError("Initialize: NPU runtime initialization failed: no visible NPU device, error code is 107001")
    _C._npu_init()
    _initialized = True


def init() -> None:
    """Initialise the NPU runtime now instead of at first use."""
    _lazy_init()


def is_available() -> bool:
    """Whether at least one NPU is visible to this process."""
    return device_count() > 0


def _parse_visible_devices() -> list[int]:
    """The device ids in ``ASCEND_RT_VISIBLE_DEVICES``, read up to the first character that is not a digit or comma."""
    value = os.getenv("ASCEND_RT_VISIBLE_DEVICES")
    if value is None:
        return list(range(64))
    end = len(value)
    for i, char in enumerate(value):
        if not (char.isdigit() or char == ","):
            end = i
            break
    ids: list[int] = []
    for item in value[:end].split(","):
        if not item:
            return ids
        ids.append(int(item))
    return ids


def _visible_device_count() -> int:
    visible = _parse_visible_devices()
    if not visible or _C._raw_device_count <= 0:
        return 0
    for position, device_id in enumerate(visible):
        # The runtime wants ascending ids and stops at the first id the host lacks.
        if position > 0 and device_id <= visible[position - 1]:
            return 0
        if device_id >= _C._raw_device_count:
            return position
    return len(visible)


def device_count() -> int:
    """The number of NPUs visible to this process."""
    global _cached_device_count
    if _cached_device_count is not None:
        return _cached_device_count
    count = _visible_device_count()
    # Not cached before initialisation: ASCEND_RT_VISIBLE_DEVICES may still change until then.
    if _initialized:
        _cached_device_count = count
    return count


def get_device_name(device_name: Union[torch.device, str, int, None] = None) -> str:
    """The chip's name (e.g. ``Ascend910B2``); ``device_name`` is the device, as in the real signature."""
    device_id = _get_device_index(device_name, optional=True)
    if device_id < 0 or device_id >= device_count():
        raise AssertionError("Invalid device id")
    return _C._npu_getDeviceName()


def __getattr__(name: str) -> Any:
    # The count lives in the fake runtime; reading it through here keeps one source of truth.
    if name == "_synchronize_calls":
        return _C._synchronize_calls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
