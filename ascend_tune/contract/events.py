"""The run's events: event lines for metrics.jsonl, the warnings of the run, and the failures of our own parts.

A part of the monitor or a feature that raises costs that part, never the run (:meth:`RunEvents.contained`,
:meth:`RunEvents.failed`): one warning per part, recorded as an event line like any warning.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable

logger = logging.getLogger("ascend_tune")


class RunEvents:
    """The run's :class:`~ascend_tune.contract.context.EventRecorder`: event lines go to every sink added (the
    JSONL ones)."""

    def __init__(self, rank: int):
        self._rank = rank
        self._sinks: list = []
        self._failed: set = set()

    def add(self, sink: Any) -> None:
        """Send event lines to ``sink`` too (its ``write_event(record)``)."""
        self._sinks.append(sink)

    def record_event(self, kind: str, **fields: Any) -> None:
        """Add ``{"event": kind, "time": ..., "rank": ..., **fields}`` to each sink."""
        record = {"event": kind, "time": time.time(), "rank": self._rank, **fields}
        for sink in self._sinks:
            sink.write_event(record)

    def warn(self, message: str) -> None:
        """Warn through the ``ascend_tune`` logger and record the warning."""
        logger.warning("ascend_tune: %s", message)
        self.record_event("warning", message=message)

    def contained(self, what: str, run: Callable, *args: Any) -> Any:
        """``run(*args)``; when it raises, that part of the run is lost (:meth:`failed`) and None is returned."""
        try:
            return run(*args)
        except Exception as exc:
            self.failed(what, exc)
            return None

    def failed(self, what: str, exc: Exception) -> None:
        """A bug of ours costs that part (``what``), never the run: one warning per part."""
        if what not in self._failed:
            self._failed.add(what)
            self.warn(f"{what}: {type(exc).__name__}: {exc}; training goes on")
