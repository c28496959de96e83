"""Fake ``torch_npu.npu.memory``: the caching allocator's statistics, all zero because tensors live in host memory.

The real functions also read 0 (and ``memory_stats`` ``{}``) until the runtime is initialised.
"""

from __future__ import annotations

from typing import Any, Union

import torch

__all__ = [
    "memory_stats",
    "memory_allocated",
    "max_memory_allocated",
    "memory_reserved",
    "max_memory_reserved",
    "reset_peak_memory_stats",
    "reset_max_memory_allocated",
    "empty_cache",
]

_Device = Union[torch.device, str, int, None]


def memory_stats(device: _Device = None) -> dict[str, Any]:
    """The allocator's statistics for a device (empty: nothing is allocated on a device)."""
    return {}


def memory_allocated(device: _Device = None) -> int:
    """Bytes currently held by tensors on the device."""
    return 0


def max_memory_allocated(device: _Device = None) -> int:
    """Peak bytes held by tensors since the start or the last reset."""
    return 0


def memory_reserved(device: _Device = None) -> int:
    """Bytes the caching allocator currently holds."""
    return 0


def max_memory_reserved(device: _Device = None) -> int:
    """Peak bytes the caching allocator held since the start or the last reset."""
    return 0


def reset_peak_memory_stats(device: _Device = None) -> None:
    """Restart the peak counters."""


def reset_max_memory_allocated(device: _Device = None) -> None:
    """Restart the peak-allocated counter."""


def empty_cache() -> None:
    """Return cached, unused blocks to the device."""
