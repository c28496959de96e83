"""Which traces stay on disk: this run's traces in one rank folder, ``keep_last`` and the ``max_trace_mb`` budget.

The first trace's size predicts the next ones: after each trace, when the kept traces plus one more would exceed
``max_trace_mb``, a warning says so and tracing stops after that cycle (``keep_last`` deletes this run's oldest
traces first, so a trace it will delete does not count). Traces an earlier run left in the folder are neither
counted nor deleted.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import logging
import os
import shutil
from dataclasses import dataclass
from typing import Callable, Optional

from ..errors import OutputError
from .config import ProfileConfig

logger = logging.getLogger("ascend_tune")


@dataclass(frozen=True)
class TraceRecord:
    """One trace written by the profiler.

    path: the trace file (torch) or ``*_ascend_pt`` folder (torch_npu); first_step / last_step: the completed
    steps it recorded (None when the run ended before one completed); size_bytes: on disk; complete: all the
    cycle's ``active`` steps completed (False when the run ended inside the cycle).
    """

    path: str
    first_step: Optional[int]
    last_step: Optional[int]
    size_bytes: int
    complete: bool

    @property
    def size_mb(self) -> float:
        """The size in MiB."""
        return self.size_bytes / 2**20

    def as_dict(self) -> dict:
        """A JSON-ready dict (metrics.jsonl events, summary.json)."""
        out = dataclasses.asdict(self)
        out["size_mb"] = round(self.size_mb, 6)
        return out


class TraceRetention:
    """This run's traces in ``rank_dir``: the kept ones, the ones ``keep_last`` deleted, and whether to stop.

    Parameters:
        config: the ProfileConfig (``active``, ``repeat``, ``keep_last``, ``max_trace_mb``).
        rank_dir: the folder the backend writes this rank's traces into.
        rank: this process's global rank (for messages).
        warn: called with a warning's text.
        event: called ``(kind, **fields)`` for each trace written or removed.
    """

    def __init__(
        self,
        config: ProfileConfig,
        rank_dir: str,
        rank: int,
        warn: Callable[[str], None],
        event: Callable[..., None],
    ):
        self.config = config
        self.rank_dir = rank_dir
        self.rank = rank
        self.traces: list = []  # kept on disk, oldest first
        self.removed: list = []  # deleted by keep_last
        self.stopped_by_budget = False
        self.halted = False  # no more traces: the budget is spent, or one could not be written
        self._warn = warn
        self._event = event
        self._first_mb: Optional[float] = None
        self._known: set = set()

    @property
    def written(self) -> int:
        """Traces this run wrote, kept or since deleted."""
        return len(self.traces) + len(self.removed)

    def open(self) -> None:
        """Create the rank folder and note what an earlier run left there."""
        try:
            os.makedirs(self.rank_dir, exist_ok=True)
            self._known = set(os.listdir(self.rank_dir))
        except OSError as exc:
            raise OutputError(
                f"cannot write profiler traces to {self.rank_dir!r} ({exc.strerror or exc}); "
                "pass a writable profile out_dir"
            ) from None

    def unfinished(self) -> Optional[OSError]:
        """Why the trace the backend just wrote is not whole, or None: torch leaves ``<name>.tmp`` when it could not
        write a plain trace, and writes nothing when the rank folder is gone."""
        try:
            new = set(os.listdir(self.rank_dir)) - self._known
        except OSError as exc:
            return exc
        torn = sorted(name for name in new if name.endswith(".tmp"))
        if not torn:
            return None
        path = os.path.join(self.rank_dir, torn[0])
        try:
            full = os.statvfs(self.rank_dir).f_bavail == 0
        except OSError:
            full = False
        code = errno.ENOSPC if full else errno.EIO
        return OSError(code, f"{os.strerror(code)} (the profiler left an incomplete trace)", path)

    def discard_new(self) -> None:
        """Remove what appeared in the rank folder since the last trace collected (an incomplete trace)."""
        try:
            new = set(os.listdir(self.rank_dir)) - self._known
        except OSError:
            return
        for name in new:
            path = os.path.join(self.rank_dir, name)
            with contextlib.suppress(OSError):
                if os.path.isdir(path) and not os.path.islink(path):
                    shutil.rmtree(path)
                else:
                    os.remove(path)

    def collect(self, steps: list) -> None:
        """Record what the backend just wrote for a cycle that recorded ``steps``; apply keep_last and the budget."""
        try:
            present = set(os.listdir(self.rank_dir))
        except OSError:
            present = set()
        new = sorted(present - self._known)
        self._known |= present
        if not new:
            self._warn(f"the profiler finished a cycle but wrote nothing under {self.rank_dir}")
            return
        for name in new:
            path = os.path.join(self.rank_dir, name)
            record = TraceRecord(
                path=path,
                first_step=steps[0] if steps else None,
                last_step=steps[-1] if steps else None,
                size_bytes=disk_size(path),
                complete=len(steps) == self.config.active,
            )
            self.traces.append(record)
            span = f"steps {record.first_step}-{record.last_step}" if steps else "no completed step"
            logger.info("ascend_tune: profiler trace of %s (%.2f MB): %s", span, record.size_mb, path)
            self._event("profile_trace", **record.as_dict())
        self._keep_last()
        self._check_budget()

    def _keep_last(self) -> None:
        keep = self.config.keep_last
        while keep is not None and len(self.traces) > keep:
            old = self.traces.pop(0)
            try:
                if os.path.isdir(old.path):
                    shutil.rmtree(old.path)
                else:
                    os.remove(old.path)
            except OSError as exc:
                self._warn(f"could not delete the old trace {old.path} ({exc.strerror or exc})")
                continue
            self.removed.append(old)
            self._event("profile_trace_removed", path=old.path, first_step=old.first_step,
                        last_step=old.last_step, reason=f"keep_last={keep}")

    def _check_budget(self) -> None:
        """Halt after this cycle when the next trace, as large as the first, would take the kept ones over budget."""
        budget = self.config.max_trace_mb
        if budget is None or self.halted or not self.traces:
            return
        if self._first_mb is None:
            self._first_mb = self.traces[-1].size_mb
        used = sum(t.size_mb for t in self.traces)
        more = self.config.repeat == 0 or self.written < self.config.repeat
        projected = used
        if more:
            replaced = self.config.keep_last is not None and len(self.traces) >= self.config.keep_last
            projected += self._first_mb - (self.traces[0].size_mb if replaced else 0.0)
        if projected <= budget:
            return
        self.halted = True  # one warning: nothing is checked once halted
        kept = f"{len(self.traces)} trace(s) kept on rank {self.rank} take {used:.3g} MB"
        fix = "raise max_trace_mb, set keep_last, or trace fewer steps (active, repeat, record_shapes)"
        if more:
            self.stopped_by_budget = True
            self._warn(
                f"profiler traces would exceed max_trace_mb={budget:g}: {kept} and the next would add about "
                f"{self._first_mb:.3g} MB; tracing stops after this cycle. To trace more, {fix}"
            )
        else:
            self._warn(f"profiler traces exceed max_trace_mb={budget:g}: {kept}. Next time, {fix}")


def disk_size(path: str) -> int:
    """Bytes on disk of a trace file, or of every file under a trace folder."""
    if not os.path.isdir(path):
        return os.path.getsize(path)
    total = 0
    for folder, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.path.getsize(os.path.join(folder, name))
    return total


__all__ = ["TraceRecord", "TraceRetention", "disk_size"]
