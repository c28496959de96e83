"""Where the step clock's numbers go: one :class:`Sink` per output, apart from the maths in :mod:`.metrics`.

- :class:`TextLogSink` — ``log.txt`` in the seed's line format, flushed per line (the live view), echoed to the
  ``ascend_tune`` logger;
- :class:`JsonlSink` — ``metrics.jsonl``, the same facts at full precision plus context, and event lines;
- :class:`TensorBoardSink` — ``train/loss``, ``train/steps_per_sec``, ``train/samples_per_sec`` scalars under
  ``<log_dir>/tensorboard`` through ``torch.utils.tensorboard`` (the ``tensorboard`` extra, imported only when on).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
import time
from typing import Any, Optional, Protocol, TextIO

from .config import env_switch
from .errors import ConfigError, OutputError
from .formats import run_dir as names
from .formats.log_line import TIME_FORMAT, format_log_line
from .formats.run_dir import RunDir
from .metrics import Window

logger = logging.getLogger("ascend_tune")
# The console rule: log lines (and the few lines meant for the user's eyes, such as tuning's one line) go to
# ``ascend_tune.console``, which does not propagate: on rank 0, unless quiet, the monitor gives it a handler that
# writes to stderr for the block (echo_to_console), whatever the application did to ``logging``.
console = logging.getLogger("ascend_tune.console")
console.propagate = False
console.setLevel(logging.INFO)


class Sink(Protocol):
    """One output of the step clock."""

    def write(self, window: Window, record: dict) -> None:
        """One log window: ``record`` is its metrics.jsonl object (see :func:`window_record`)."""

    def write_event(self, record: dict) -> None:
        """An event line (``{"event": kind, ...}``); sinks that keep only numbers ignore it."""

    def close(self) -> None:
        """Flush and close; called once at the block's end."""


def window_record(window: Window, **context: Any) -> dict:
    """The metrics.jsonl object of a window: the log line's facts and the context the monitor adds."""
    record = {
        "step": window.last_step,
        "loss": window.loss,
        "steps_per_sec": window.steps_per_sec,
        "samples_per_sec": window.samples_per_sec,
        "time": window.end_time,
        "first_step": window.first_step,
        "window_steps": window.steps,
        "seconds": window.seconds,
        "samples": window.samples,
        "step_losses": list(window.losses),
        "nonfinite": window.nonfinite,
        "skipped": window.skipped,
    }
    record.update(context)
    return record


class TextLogSink:
    """``log.txt`` in the seed's format, one flushed line per log window; echoed to the console (``console``)."""

    def __init__(self, path: str, append: bool, echo: bool):
        self._file: TextIO = open(path, "a" if append else "w", buffering=1, encoding="utf-8")
        self._echo = echo

    def write(self, window: Window, record: dict) -> None:
        line = format_log_line(window.last_step, window.loss, window.steps_per_sec, window.end_time)
        self._file.write(line + "\n")
        if self._echo:
            console.info(line.split("] ", 1)[1])

    def write_event(self, record: dict) -> None:
        pass

    def close(self) -> None:
        self._file.close()


class JsonlSink:
    """``metrics.jsonl``: one JSON object per log line with full-precision values, and event lines.

    Flushed at most once a second (and at the end): a write to disk per line costs more than the line at
    ``log_every=1`` on slow filesystems, and log.txt, flushed per line, is the live view.
    """

    FLUSH_EVERY_S = 1.0

    def __init__(self, path: str, append: bool):
        self._file: TextIO = open(path, "a" if append else "w", encoding="utf-8")
        self._flushed = time.monotonic()

    def write(self, window: Window, record: dict) -> None:
        self.write_event(record)

    def write_event(self, record: dict) -> None:
        self._file.write(json.dumps(record, allow_nan=True, default=str) + "\n")
        now = time.monotonic()
        if now - self._flushed >= self.FLUSH_EVERY_S:
            self._file.flush()
            self._flushed = now

    def close(self) -> None:
        self._file.close()


class TensorBoardSink:
    """TensorBoard scalars, one point per log line at the line's step: ``train/loss``, ``train/steps_per_sec`` and,
    when samples are counted, ``train/samples_per_sec``."""

    def __init__(self, folder: str):
        from torch.utils.tensorboard import SummaryWriter  # needs the tensorboard package

        os.makedirs(folder, exist_ok=True)
        self._writer = SummaryWriter(log_dir=folder)

    def write(self, window: Window, record: dict) -> None:
        step, when = window.last_step, window.end_time
        self._writer.add_scalar("train/loss", window.loss, step, walltime=when)
        self._writer.add_scalar("train/steps_per_sec", window.steps_per_sec, step, walltime=when)
        if window.samples_per_sec is not None:
            self._writer.add_scalar("train/samples_per_sec", window.samples_per_sec, step, walltime=when)

    def write_event(self, record: dict) -> None:
        pass

    def close(self) -> None:
        self._writer.close()


def open_step_sinks(run: RunDir, rank: int, world_size: int, *, resume: bool, echo: bool,
                    tensorboard: Optional[bool], events: EventLog) -> list:
    """The sinks of this rank, opened: rank 0 writes log.txt, metrics.jsonl and, when asked, TensorBoard scalars;
    with several ranks every rank also keeps ``rank{R}/metrics.jsonl``. Earlier outputs are set aside (a resumed
    run, ``resume``, appends to its logs instead). Raises :class:`OutputError` when the folder is not writable."""
    wanted = tensorboard_wanted(tensorboard) if rank == 0 else False
    opened: list = []
    try:
        os.makedirs(run.root, exist_ok=True)
        if rank == 0:
            run.set_aside([names.SUMMARY_JSON] if resume else list(names.STEP_LOG_FILES), "logs")
            opened.append(TextLogSink(run.log_txt, append=resume, echo=echo))
            opened.append(JsonlSink(run.metrics_jsonl, append=resume))
            events.add(opened[-1])
        if world_size > 1:
            rank_run = RunDir(run.path(names.rank_dir_name(rank)))
            os.makedirs(rank_run.root, exist_ok=True)
            if not resume:
                rank_run.set_aside([names.METRICS_JSONL], "logs")
            opened.append(JsonlSink(rank_run.metrics_jsonl, append=resume))
            events.add(opened[-1])
        if wanted:
            opened.append(TensorBoardSink(run.tensorboard_dir))
    except OSError as exc:
        for sink in opened:
            sink.close()
        raise OutputError(
            f"cannot write to log_dir {run.root!r} ({exc.strerror or exc}); pass a writable folder"
        ) from None
    return opened


def tensorboard_wanted(option: Optional[bool]) -> bool:
    """``tensorboard=True`` (or, when not given, ``ASCEND_TUNE_TENSORBOARD=1``): refused at the start when the
    package is missing, warned and left off when only the environment asked for it."""
    from_env = option is None
    wanted = env_switch("ASCEND_TUNE_TENSORBOARD") if from_env else option
    if not wanted:
        return False
    why_not = tensorboard_available()
    if why_not is None:
        return True
    if not from_env:
        raise ConfigError(f"tensorboard=True needs {why_not}; pip install 'ascend-tune[tensorboard]'")
    logger.warning("ascend_tune: ASCEND_TUNE_TENSORBOARD is set but %s; no TensorBoard scalars", why_not)
    return False


def tensorboard_available() -> Optional[str]:
    """None when ``torch.utils.tensorboard`` can be used, else why not (one line).

    The sink's own import is tried: it needs the tensorboard package, and torch 2.1's also needs ``packaging``
    (vendored into torch from 2.2).
    """
    try:
        import tensorboard  # noqa: F401
    except Exception as exc:  # a broken install raises more than ImportError
        return f"the tensorboard package cannot be imported ({type(exc).__name__}: {exc})"
    try:
        from torch.utils.tensorboard import SummaryWriter  # noqa: F401
    except Exception as exc:
        return f"torch.utils.tensorboard cannot be imported ({type(exc).__name__}: {exc})"
    return None


class EventLog:
    """The run's :class:`~ascend_tune.context.EventRecorder`: event lines go to every JSONL sink added."""

    def __init__(self, rank: int):
        self._rank = rank
        self._sinks: list = []

    def add(self, sink: Sink) -> None:
        """Send event lines to ``sink`` too."""
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


def echo_to_console(stack: contextlib.ExitStack) -> None:
    """Show log lines on stderr as the seed did, for the block: one rule in every framework, whatever the
    application configured (a ``basicConfig`` at WARNING hid them, an INFO root handler doubled them). The monitor
    calls this on rank 0 unless ``quiet=True``; log.txt and metrics.jsonl are written either way."""
    if any(isinstance(h, _StderrHandler) for h in console.handlers):
        return  # an enclosing monitor shows them already
    handler = _StderrHandler()
    handler.setFormatter(logging.Formatter("[%(asctime)s] %(message)s", TIME_FORMAT))
    console.addHandler(handler)
    stack.callback(console.removeHandler, handler)


class _StderrHandler(logging.StreamHandler):
    """A StreamHandler on whatever ``sys.stderr`` is when a line is written (a redirect made later is followed)."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property  # type: ignore[override]
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, value: TextIO) -> None:
        pass
