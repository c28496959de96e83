"""Fake ``torch_npu.npu.streams``: an ``Event`` that times with the host clock, since CPU work is synchronous."""

from __future__ import annotations

import time
from typing import Any, Optional

__all__ = ["Event"]


class Event:
    """An NPU event: ``record`` marks a point in the work, ``elapsed_time`` gives milliseconds between two marks."""

    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False):
        self.enable_timing = enable_timing
        self.blocking = blocking
        self.interprocess = interprocess
        self._recorded_ns: Optional[int] = None

    def record(self, stream: Any = None) -> None:
        """Mark the current point of the stream's work (on the fake, the current host time)."""
        self._recorded_ns = time.perf_counter_ns()

    def wait(self, stream: Any = None) -> None:
        """Make the stream's later work wait for this event (a no-op: CPU work never runs ahead)."""

    def query(self) -> bool:
        """Whether the work before the event has finished (always, on the fake)."""
        return True

    def synchronize(self) -> None:
        """Block until the work before the event has finished (already true on the fake)."""

    def elapsed_time(self, end_event: Event) -> float:
        """Milliseconds from this event's record to ``end_event``'s."""
        if not (self.enable_timing and end_event.enable_timing):
            raise RuntimeError("Both events must be created with argument 'enable_timing=True'.")
        if self._recorded_ns is None or end_event._recorded_ns is None:
            raise RuntimeError("Both events must be recorded before calculating elapsed time.")
        return (end_event._recorded_ns - self._recorded_ns) / 1e6

    def __repr__(self) -> str:
        state = "recorded" if self._recorded_ns is not None else "uninitialized"
        return f"<torch_npu.npu.Event {state}>"
