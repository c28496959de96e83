"""The rows of a replayed step, replay.csv's lines in execution order: a check that runs later keeps its place."""

from __future__ import annotations

import threading
from typing import NamedTuple, Optional, Union

import torch

from ..analysis.dumps.differences import ReplayError
from ..analysis.dumps.replay import SKIPPED, ReplayRow
from ..analysis.dumps.tolerance import Standard


class Described(NamedTuple):
    """What a row names of a result that is not kept: its dtype and shape."""

    dtype: torch.dtype
    shape: tuple


Like = Union[torch.Tensor, Described, None]  # what a row takes its dtype and shape from


class ReplayRows:
    """One step's :class:`ReplayRow` list, filled under ``lock`` (backward hooks may run on the autograd engine's
    threads); ``None`` holds the place of a check still to run."""

    def __init__(self, lock: threading.RLock):
        self._lock = lock
        self.rows: list = []

    def reserve(self) -> int:
        """Keep the next row's place for a check that runs later; its index."""
        with self._lock:
            self.rows.append(None)
            return len(self.rows) - 1

    def add(self, name: str, like: Like, verdict: str, metrics: Optional[ReplayError] = None,
            standard: Optional[Standard] = None, reason: str = "", frames: tuple = (),
            at: Optional[int] = None) -> None:
        """Add a row (``at``: the place :meth:`reserve` kept for it); ``like``: the tensor whose dtype and shape
        it names."""
        dtype, shape = _dtype(like), _shape(like)
        with self._lock:
            index = len(self.rows) if at is None else at
            row = ReplayRow(index, name, dtype, shape, verdict, metrics, standard, reason, frames)
            if at is None:
                self.rows.append(row)
            else:
                self.rows[at] = row

    def skipped(self, name: str, like: Like, reason: str, at: Optional[int] = None) -> None:
        """Add a skipped row with its reason."""
        self.add(name, like, SKIPPED, reason=reason, at=at)


_DTYPE_NAMES: dict = {}


def _dtype(t: Like) -> str:
    if not isinstance(t, (torch.Tensor, Described)):
        return ""
    name = _DTYPE_NAMES.get(t.dtype)
    if name is None:
        name = _DTYPE_NAMES[t.dtype] = str(t.dtype).replace("torch.", "")
    return name


def _shape(t: Like) -> tuple:
    return tuple(t.shape) if isinstance(t, (torch.Tensor, Described)) else ()
