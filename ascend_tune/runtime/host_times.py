"""Host time of each log window split by where the training loop spent it, measured without a device sync.

- ``data``: time inside the loader's ``next`` (the wrapped loader times it), the loop waiting for its batch;
- ``backward``: time inside the loss's ``backward()`` call. Under DDP on CPU / gloo this includes the wait for the
  gradient all-reduce (the reducer waits for its buckets before backward returns), so a rank that others wait for
  spends the least here; on CUDA / NPU backward returns once kernels are queued and the collective wait happens on
  the device, where only a profiler trace sees it (``ascend-tune`` reads traces of every rank for that);
- the rest of the window's wall time is the step's own host work (forward, optimizer, the user's code).

``ascend-tune perf`` reads these per rank (``rank{R}/metrics.jsonl``) to name the rank the others wait for.
"""

from __future__ import annotations

import time
from typing import Optional


class HostTimes:
    """Sums of host seconds since the last :meth:`take`."""

    __slots__ = ("data", "backward", "_backward_from")

    def __init__(self) -> None:
        self.data = 0.0
        self.backward = 0.0
        self._backward_from: Optional[float] = None

    def add_data(self, seconds: float) -> None:
        """Time the loop waited in the loader's ``next``."""
        self.data += seconds

    def backward_begins(self) -> None:
        self._backward_from = time.perf_counter()

    def backward_ends(self) -> None:
        if self._backward_from is not None:
            self.backward += time.perf_counter() - self._backward_from
            self._backward_from = None

    def take(self) -> dict:
        """The sums (metrics.jsonl's ``host_s``), reset."""
        out = {"data": self.data, "backward": self.backward}
        self.data = self.backward = 0.0
        return out
