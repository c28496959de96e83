"""Where the step clock's numbers go: one :class:`Sink` per output, apart from the maths in :mod:`.step_clock`.

- :class:`TextLogSink` — ``log.txt`` in the guide's line format, echoed to the console (``ascend_tune.console``);
- :class:`JsonlSink` — ``metrics.jsonl``, the same facts at full precision plus context, and event lines;
- :class:`TensorBoardSink` — ``train/loss``, ``train/steps_per_sec``, ``train/samples_per_sec`` scalars under
  ``<log_dir>/tensorboard`` through ``torch.utils.tensorboard`` (the ``tensorboard`` extra, imported only when on).

Each line of log.txt and metrics.jsonl reaches the OS in one ``os.write`` the moment it is made
(:class:`~ascend_tune.contract.outputs.LineFile`): a killed run loses at most the step being written, and nothing is
buffered in Python. A sink that cannot write is switched off through the run's
:class:`~ascend_tune.contract.outputs.Outputs` (one warning, recorded in summary.json); the others go on.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
from typing import Any, Optional, Protocol, TextIO

from ..config import env_switch
from ..contract.events import RunEvents
from ..contract.lines import console, json_line
from ..contract.outputs import LineFile, Outputs
from ..errors import ConfigError, OutputError
from ..formats import run_dir as names
from ..formats.log_line import TIME_FORMAT, format_log_line
from ..formats.run_dir import RunDir
from .step_clock import Window

logger = logging.getLogger("ascend_tune")


class Sink(Protocol):
    """One output of the step clock."""

    def write(self, window: Window, context: dict) -> None:
        """One log window; ``context`` is what the monitor adds to it (``window_record(window, **context)`` is its
        metrics.jsonl object)."""

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
    """``log.txt`` in the guide's format, one line per log window; echoed to the console (``console``)."""

    __slots__ = ("_file", "_echo")  # slots: the step path reads them where they lie

    def __init__(self, path: str, append: bool, echo: bool, outputs: Outputs):
        self._file = LineFile(path, append, outputs)
        self._echo = echo

    def write(self, window: Window, context: dict) -> None:
        line = format_log_line(window.last_step, window.loss, window.steps_per_sec, window.end_time)
        self._file.write((line + "\n").encode())
        if self._echo:
            console.info(line.split("] ", 1)[1])

    def write_event(self, record: dict) -> None:
        pass

    def close(self) -> None:
        self._file.close()


class JsonlSink:
    """``metrics.jsonl``: one JSON object per log line with full-precision values, and event lines."""

    __slots__ = ("_file",)  # slots: the step path reads it where it lies

    def __init__(self, path: str, append: bool, outputs: Outputs):
        self._file = LineFile(path, append, outputs)

    def write(self, window: Window, context: dict) -> None:
        self._file.write(metrics_line(window, context))

    def write_event(self, record: dict) -> None:
        self._file.write(json_line(record))

    def close(self) -> None:
        self._file.close()


# window_record's fields, in its order, as json writes them (tests/test_outputs.py holds the two to the same bytes)
_FAST_LINE = (
    '{"step":%d,"loss":%s,"steps_per_sec":%r,"samples_per_sec":%s,"time":%r,"first_step":%d,"window_steps":%d,'
    '"seconds":%r,"samples":%s,"step_losses":[%s],"nonfinite":%d,"skipped":%d,"epoch":%d,"rank":%d,'
    '"world_size":%d,"warmup":%s,"memory_mib":%s,"host_s":{"data":%s,"backward":%s}%s}\n'
)
_CONTEXT_KEYS = ("epoch", "rank", "world_size", "warmup", "memory_mib", "host_s")  # the monitor's own, first
_RECORD_KEYS = frozenset(("step", "loss", "steps_per_sec", "samples_per_sec", "time", "first_step", "window_steps",
                          "seconds", "samples", "step_losses", "nonfinite", "skipped", *_CONTEXT_KEYS))
_float = float.__repr__  # what json writes for a float


def metrics_line(window: Window, context: dict) -> bytes:
    """The metrics.jsonl line of a window: ``json_line(window_record(window, **context))``, formatted by hand.

    Building the record and json's encoder cost about as much as the rest of a log line at ``log_every=1``: the
    monitor's own context (epoch, rank, world_size, warmup, memory_mib, host_s) is one ``%`` format, and what follows
    it (each optimizer's loss, the fields features add: numbers, None, lists and dicts of them) is written the way
    json writes it (:func:`_fields`); any other context, a non-finite number or a step without a loss takes the
    record's path.
    """
    try:
        c = context
        epoch, rank, world, warmup, memory = c["epoch"], c["rank"], c["world_size"], c["warmup"], c["memory_mib"]
        host = c["host_s"]
        if len(host) != 2 or not type(epoch) is type(rank) is type(world) is int or type(warmup) is not bool:
            raise TypeError  # what %d or the test below would write otherwise than json does
        if len(c) != len(_CONTEXT_KEYS):
            more = _fields(c)
        elif tuple(c) == _CONTEXT_KEYS:  # window_record's order is the context's
            more = ""
        else:
            raise KeyError
        sps, samples, losses = window.samples_per_sec, window.samples, window.losses
        loss = _float(window.loss)
        line = _FAST_LINE % (
            window.last_step, loss, window.steps_per_sec, "null" if sps is None else _float(sps),
            window.end_time, window.first_step, len(losses), window.seconds,
            "null" if samples is None else int.__repr__(samples),
            loss if len(losses) == 1 else ",".join(map(_float, losses)), window.nonfinite,
            window.skipped, epoch, rank, world, "true" if warmup else "false",
            "null" if memory is None else _float(memory), _float(host["data"]), _float(host["backward"]), more,
        )
    except (KeyError, TypeError):  # other context, a value of another type, a step without a loss
        return json_line(window_record(window, **context))
    if "nan" in line or "inf" in line:  # no field name holds either: a non-finite number, spelt as json does
        return json_line(window_record(window, **context))
    return line.encode()


def _fields(context: dict) -> str:
    """``,"key":value`` for each entry of ``context`` after the monitor's own, as json writes it; KeyError / TypeError
    when the monitor's own do not come first or an entry is not one :func:`_value` writes."""
    keys = tuple(context)
    if keys[:_OWN] != _CONTEXT_KEYS:  # window_record's order is the context's: the monitor's own first
        raise KeyError(keys)
    added = keys[_OWN:]
    if added not in _PLAIN_FIELDS:
        for key in added:
            if key in _RECORD_KEYS or type(key) is not str or not _plain(key):
                raise KeyError(key)  # a field over a window's own (json keeps its place), or one json escapes
        if len(_PLAIN_FIELDS) < 256:  # a feature's fields are the same few names, line after line
            _PLAIN_FIELDS.add(added)
    text, last, said = "", _UNSET, ""
    for key in added:
        value = context[key]
        kind = type(value)
        # a feature's usual fields inline: a number, a count, one window's numbers (at log_every=1 the one number
        # of the window, the same float as the field before it: written once)
        if kind is float:
            last, said = value, _float(value)
            text += f',"{key}":{said}'
        elif kind is int:
            text += f',"{key}":{int.__repr__(value)}'
        elif kind is list and len(value) == 1 and value[0] is last:
            text += f',"{key}":[{said}]'
        elif kind is list and set(map(type, value)) == _FLOAT:
            text += f',"{key}":[{",".join(map(_float, value))}]'
        else:
            text += f',"{key}":{_value(value)}'
    return text


_OWN = len(_CONTEXT_KEYS)
_UNSET = object()  # no float written yet
_FLOAT = {float}
_PLAIN_FIELDS: set = set()  # the names of features' fields found plain (and none of a window's own), as tuples


def _plain(key: str) -> bool:
    """Whether json writes ``key`` between quotes as it is (printable ASCII, no quote, no backslash)."""
    return key.isascii() and key.isprintable() and '"' not in key and "\\" not in key


def _value(value: Any) -> str:
    """``value`` as json writes it, for None, bool, int, float and lists, tuples and plain-keyed dicts of them
    (exact types: a subclass may write itself otherwise); TypeError for anything else."""
    kind = type(value)
    if kind is float:
        return _float(value)
    if value is None:
        return "null"
    if kind is int:
        return int.__repr__(value)
    if kind is bool:
        return "true" if value else "false"
    if kind is list or kind is tuple:
        return "[" + ",".join(map(_value, value)) + "]"
    if kind is dict and all(type(k) is str and _plain(k) for k in value):
        return "{" + ",".join(f'"{k}":{_value(v)}' for k, v in value.items()) + "}"
    raise TypeError(kind)


# fields a feature adds to a window's line (Callback.on_window) that TensorBoard shows as ``train/<field>``
TENSORBOARD_FIELDS = ("grad_norm",)


class TensorBoardSink:
    """TensorBoard scalars, one point per log line at the line's step: ``train/loss``, ``train/steps_per_sec`` and,
    when samples are counted, ``train/samples_per_sec``; ``train/grad_norm`` when the health feature is on.

    TensorBoard writes from a thread of its own: a full disk ends that thread with a traceback on stderr and shows
    at the next ``add_scalar``. While the sink is open, such an error of its writer thread is the sink's failure
    (one warning through the run's outputs), not a traceback; other threads' errors go to the hook that was there.
    """

    def __init__(self, folder: str, outputs: Outputs):
        from torch.utils.tensorboard import SummaryWriter  # needs the tensorboard package

        os.makedirs(folder, exist_ok=True)
        self._folder = folder
        self._outputs = outputs
        self._writer: Any = SummaryWriter(log_dir=folder)
        self._previous_hook = threading.excepthook
        threading.excepthook = self._thread_failed

    def write(self, window: Window, context: dict) -> None:
        writer = self._writer
        if writer is None:
            return
        step, when = window.last_step, window.end_time
        try:
            writer.add_scalar("train/loss", window.loss, step, walltime=when)
            writer.add_scalar("train/steps_per_sec", window.steps_per_sec, step, walltime=when)
            if window.samples_per_sec is not None:
                writer.add_scalar("train/samples_per_sec", window.samples_per_sec, step, walltime=when)
            for key in TENSORBOARD_FIELDS:
                if context.get(key) is not None:
                    writer.add_scalar(f"train/{key}", context[key], step, walltime=when)
        except Exception as exc:  # its writer thread's error (a full disk) shows here, as any error of its own
            self._fail(exc)

    def write_event(self, record: dict) -> None:
        pass

    def close(self) -> None:
        writer, self._writer = self._writer, None
        if writer is not None:
            try:
                writer.close()
            except Exception as exc:
                self._fail(exc)
        if threading.excepthook == self._thread_failed:
            threading.excepthook = self._previous_hook

    def _thread_failed(self, args: Any) -> None:
        tb = args.exc_traceback
        while tb is not None:
            if f"tensorboard{os.sep}summary{os.sep}writer" in tb.tb_frame.f_code.co_filename:
                self._fail(args.exc_value, close=False)  # closing would wait for this very thread
                return
            tb = tb.tb_next
        self._previous_hook(args)

    def _fail(self, exc: BaseException, close: bool = True) -> None:
        writer, self._writer = self._writer, None
        self._outputs.fail(self._folder, exc, what="TensorBoard logging")
        if writer is not None and close:
            with contextlib.suppress(Exception):
                writer.close()


def open_step_sinks(run: RunDir, rank: int, world_size: int, *, resume: bool, echo: bool,
                    tensorboard: Optional[bool], events: RunEvents, outputs: Outputs) -> list:
    """The sinks of this rank, opened: rank 0 writes log.txt, metrics.jsonl and, when asked, TensorBoard scalars;
    with several ranks every rank also keeps ``rank{R}/metrics.jsonl``. Earlier outputs are set aside (a resumed
    run, ``resume``, appends to its logs instead). Raises :class:`OutputError` when the folder is not writable
    now; a write that fails later costs only that sink (``outputs``)."""
    wanted = tensorboard_wanted(tensorboard) if rank == 0 else False
    opened: list = []
    try:
        os.makedirs(run.root, exist_ok=True)
        if rank == 0:
            run.set_aside([names.SUMMARY_JSON] if resume else list(names.STEP_LOG_FILES), "logs")
            opened.append(TextLogSink(run.log_txt, append=resume, echo=echo, outputs=outputs))
            opened.append(JsonlSink(run.metrics_jsonl, append=resume, outputs=outputs))
            events.add(opened[-1])
        if world_size > 1:
            rank_run = RunDir(run.path(names.rank_dir_name(rank)))
            os.makedirs(rank_run.root, exist_ok=True)
            if not resume:
                rank_run.set_aside([names.METRICS_JSONL], "logs")
            opened.append(JsonlSink(rank_run.metrics_jsonl, append=resume, outputs=outputs))
            events.add(opened[-1])
        if wanted:
            opened.append(TensorBoardSink(run.tensorboard_dir, outputs))
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
    wanted = env_switch(names.ENV_TENSORBOARD) if from_env else option
    if not wanted:
        return False
    why_not = tensorboard_available()
    if why_not is None:
        return True
    if not from_env:
        raise ConfigError(f"tensorboard=True needs {why_not}; pip install 'ascend-tune[tensorboard]'")
    logger.warning("ascend_tune: %s is set but %s; no TensorBoard scalars", names.ENV_TENSORBOARD, why_not)
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


def echo_to_console(stack: contextlib.ExitStack) -> None:
    """Show log lines on stderr as the guide did, for the block: one rule in every framework, whatever the
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
