"""Precision debugging: dumps and overflow checks at chosen steps, read back in msprobe's layout.

``TrainingMonitor(precision=PrecisionConfig(...))`` (or ``ASCEND_TUNE_DUMP=task=statistics,steps=0-2``) dumps the
selected steps through ptdbg_ascend, msprobe or the built-in engine; :func:`read_dump` and :func:`find_overflows`
(from :mod:`ascend_tune.analysis.dumps`, the one reader and overflow rule) read any of their dumps, and
:func:`replay_verdict` the suspects of a replayed step (``task="replay"``). Names load on
first use: the readers and the config do not import torch.
"""

from ..lazy import lazy_names

__all__ = ["Dump", "Overflow", "PrecisionConfig", "PrecisionCallback", "build_callback", "find_dumps", "find_overflows",
           "read_dump", "replay_verdict"]

_LAZY = {
    "PrecisionConfig": "ascend_tune.precision.config",
    "Dump": "ascend_tune.analysis.dumps.model",
    "find_dumps": "ascend_tune.analysis.dumps.sources",
    "read_dump": "ascend_tune.analysis.dumps.read",
    "Overflow": "ascend_tune.analysis.dumps.overflow",
    "find_overflows": "ascend_tune.analysis.dumps.overflow",
    "replay_verdict": "ascend_tune.analysis.dumps.replay",
    "PrecisionCallback": "ascend_tune.precision.callback",
    "build_callback": "ascend_tune.precision.callback",
}

__getattr__, __dir__ = lazy_names(__name__, _LAZY)
