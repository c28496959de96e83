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


class HostTimes:
    """Sums of host seconds since the last :meth:`take`."""

    __slots__ = ("data", "backward")

    def __init__(self) -> None:
        self.data = 0.0  # seconds the loop waited in the loader's ``next`` (added by the step path's batch call)
        self.backward = 0.0  # seconds inside the loss's ``backward()`` (added at its end)

    def take(self) -> dict:
        """The sums (metrics.jsonl's ``host_s``), reset."""
        out = {"data": self.data, "backward": self.backward}
        self.data = self.backward = 0.0
        return out
