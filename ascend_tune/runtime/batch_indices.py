"""The sample indices of the batches a wrapped DataLoader hands out: what the loader wrap (:mod:`.capture`) records
for a feature that asks (the health feature names the batch of a spike). No torch import beyond tensors of indices.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from typing import Any

import torch


class BatchIndices:
    """The sample indices of the batches a wrapped ``DataLoader`` hands out, once a feature :meth:`start`s it.

    The loader's index sampler (its ``batch_sampler``, or its ``sampler`` without automatic batching) is iterated in
    the main process, in order, also when workers load the batches, and an in-order loader hands the batches out in
    that order: each index batch the sampler yields is queued, and each batch handed out takes the oldest. The data is
    untouched (the same sampler, iterated once, as the loader would). Off (the default) it costs nothing; a loader
    with ``in_order=False`` or without an index sampler (an ``IterableDataset``) gives no indices (None).
    """

    def __init__(self) -> None:
        self.on = False
        self._queue: deque = deque()
        self._handed: list = []

    def start(self) -> None:
        """Record from the next pass over the loader on."""
        self.on = True

    def handed_out(self) -> None:
        """A batch was handed to the loop: it takes the oldest index batch queued (None when none is)."""
        self._handed.append(self._queue.popleft() if self._queue else None)

    def take(self) -> list:
        """The index batches handed out since the last call, in order (an entry None: not known)."""
        handed, self._handed = self._handed, []
        return handed

    @property
    def pending(self) -> int:
        """Batches handed out since the last :meth:`take`."""
        return len(self._handed)

    def recording(self, sampler: Any) -> Any:
        """``sampler`` as the loader's iterators will see it while recording."""
        return _RecordingSampler(sampler, self._queue)


class _RecordingSampler:
    """An index sampler that queues what it yields (:class:`BatchIndices`)."""

    def __init__(self, sampler: Any, queue: deque):
        self._sampler = sampler
        self._queue = queue

    def __iter__(self) -> Iterator:
        self._queue.clear()  # a new pass: what an earlier one prefetched is not handed out any more
        for index in self._sampler:
            self._queue.append(_plain(index))
            yield index

    def __len__(self) -> int:
        return len(self._sampler)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sampler, name)


def _plain(index: Any) -> Any:
    """An index or index batch as plain ints where it is made of ints (tensors of indices too), else None."""
    if isinstance(index, int):
        return index
    if isinstance(index, torch.Tensor):
        return index.tolist()
    if isinstance(index, (list, tuple)) and all(isinstance(i, int) for i in index):
        return list(index)
    return None
