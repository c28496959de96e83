"""Precision debugging: dumps and overflow checks at chosen steps, read back in msprobe's layout.

``TrainingMonitor(precision=PrecisionConfig(...))`` (or ``ASCEND_TUNE_DUMP=task=statistics,steps=0-2``) dumps the
selected steps through ptdbg_ascend, msprobe or the built-in engine; :func:`read_dump` and :func:`find_overflows`
read any of their dumps. Names load on first use: the readers and the config do not import torch.
"""

from typing import Any

__all__ = ["Dump", "Overflow", "PrecisionConfig", "find_dumps", "find_overflows", "read_dump", "seed_all"]

_LAZY = {
    "PrecisionConfig": "ascend_tune.precision.config",
    "Dump": "ascend_tune.precision.reader",
    "find_dumps": "ascend_tune.precision.reader",
    "read_dump": "ascend_tune.precision.reader",
    "Overflow": "ascend_tune.precision.overflow",
    "find_overflows": "ascend_tune.precision.overflow",
    "seed_all": "ascend_tune.precision.seed",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'ascend_tune.precision' has no attribute {name!r}")


def __dir__() -> list:
    return sorted(__all__)
