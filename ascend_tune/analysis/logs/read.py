"""Training logs as arrays: :func:`read_log` reads any log :mod:`.detect` recognises into a
:class:`~.model.LossLog` (the frameworks' formats through :mod:`.hf`, :mod:`.lightning`, :mod:`.tensorboard`);
this module reads ascend_tune's own, the guide's ``log.txt`` lines and ``metrics.jsonl`` records.

``log.txt`` lines are found by :mod:`.scan` with numpy over the whole buffer (no per-line Python loop), so a
million-line log reads in a fraction of a second. The line may carry a timestamp or not, ANSI colour codes, and sit
among other lines (warnings, tracebacks); only lines that start like one (``(step=N``) but do not parse are
*malformed*, counted and reported, never fatal. ``metrics.jsonl`` keeps full precision (``%.4f`` in log.txt turns
a loss of 0.00071 into 0.0007), so a run folder or a ``log.txt`` with ``metrics.jsonl`` beside it is read from the
JSONL unless the guide's own input is asked for. A ``summary.json`` beside the log gives the run's warm-up
(``start_step``, ``warmup_steps``), which the throughput statistics leave out.

A killed run's log is read as it is (no ``summary.json``): a last line without its newline that does not parse is
the half line a killed writer left, skipped with a note (ascend_tune writes each line in one system call, so its
own logs lose whole lines only; other writers may tear one).
"""

from __future__ import annotations

import dataclasses
import json
import mmap
import os
import re
from typing import Optional

import numpy as np

from ...errors import InputError
from ...formats.log_line import ANSI, LINE, LOOKS_LIKE
from ...formats.run_dir import SUMMARY_JSON
from . import scan
from .detect import locate
from .formats import BY_NAME
from .model import LossLog
from .rates import WarmUp

_FIRST_CHAR = re.compile(rb"\S")
_MAP_FROM = 1 << 20  # files from 1 MiB are memory-mapped rather than copied
_EXAMPLES = 3


def read_log(path: str, prefer: str = "jsonl", format: Optional[str] = None, loss_key: Optional[str] = None,
             tag: Optional[str] = None) -> LossLog:
    """Read a run's log: a file or a run folder of any format :mod:`.detect` recognises.

    Parameters:
        path: the file or folder.
        prefer: ``"jsonl"`` reads ``metrics.jsonl`` when it sits beside (or instead of) ``log.txt``; ``"text"``
            reads ``log.txt`` when there is one (the guide's script's input, rounded to 4 decimals).
        format: force one of :data:`.formats.NAMES` (None: recognise it).
        loss_key: the key (trainer_state.json) or column (metrics.csv) read as the loss; None: the guess.
        tag: the TensorBoard scalar tag read as the loss; None: the guess.
    An ascend_tune log's ``warmup`` comes from the ``summary.json`` beside the file read, when there is one.
    """
    found = locate(path, prefer, format)
    fmt = BY_NAME[found.kind]
    choice = {"loss_key": loss_key, "tag": tag}.get(fmt.option or "")
    log = fmt.function("reader")(found.path, **({fmt.option: choice} if fmt.option else {}))
    if fmt.ours:
        warmup, notes = summary_warmup(os.path.dirname(found.path) or ".")
        log = dataclasses.replace(log, warmup=warmup, read_notes=log.read_notes + notes)
    return dataclasses.replace(log, read_notes=found.notes + log.read_notes) if found.notes else log


def is_jsonl(head: bytes, first_line: bytes, path: str) -> bool:
    """ascend_tune's metrics.jsonl: one JSON object a line (a lone ``{`` is a trainer state's document)."""
    return first_line.startswith(b"{") and first_line != b"{"


def read_summary(folder: str) -> tuple:
    """THE reader of a run's ``summary.json``: ``(its object, None)``, ``(None, None)`` when the run folder has none,
    or ``(None, what is wrong)`` when it cannot be read as JSON (a run interrupted while writing it)."""
    path = os.path.join(folder, SUMMARY_JSON)
    if not os.path.isfile(path):
        return None, None
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh), None
    except (OSError, ValueError) as exc:
        return None, f"{path} is not readable JSON ({exc})"


def summary_warmup(folder: str) -> tuple:
    """``(WarmUp or None, notes)``: the warm-up the ``summary.json`` in ``folder`` records (None without one).

    Parameters:
        folder: a run folder (TrainingMonitor's ``log_dir``).
    """
    summary, problem = read_summary(folder)
    if summary is None:
        return None, () if problem is None else (f"{problem}; warm-up from --exclude-first",)
    path = os.path.join(folder, SUMMARY_JSON)
    try:
        start, steps = summary["start_step"], summary["warmup_steps"]
    except (TypeError, KeyError):
        return None, (f"{path} has no start_step / warmup_steps; warm-up from --exclude-first",)
    if not (_is_number(start) and _is_number(steps)):
        return None, (f"{path} has no start_step / warmup_steps numbers; warm-up from --exclude-first",)
    return WarmUp(int(start), int(steps)), ()


def read_log_file(path: str) -> LossLog:
    """Read one log file, telling ``metrics.jsonl`` (JSON objects) from seed-format text by its first line."""
    raw = _read_bytes(path)
    try:
        if b"\x00" in raw[:8192]:
            raise InputError(f"{path} is a binary file, not a training log; pass a log.txt or a metrics.jsonl")
        body, notes = raw, ()
        cut = _torn_tail(raw)
        if cut < len(raw):  # type: ignore[arg-type]
            body = raw[:cut]  # type: ignore[index]
            notes = (f"{path}: its last line is incomplete (the run was killed while writing it); skipped",)
        first = _FIRST_CHAR.search(body)
        if first is None:
            raise InputError(f"{path} is empty; pass the log of a run that logged at least one step")
        if first.group() == b"{":
            log = _parse_jsonl(path, bytes(body).decode("utf-8", errors="replace"))
        else:
            log = _parse_text(path, body)
        return dataclasses.replace(log, read_notes=log.read_notes + notes) if notes else log
    finally:
        if isinstance(raw, mmap.mmap):
            raw.close()


def _torn_tail(raw: object) -> int:
    """Where a last line without its newline starts when it is no whole record (a JSON object or a loss line that
    does not parse): the half line of a killed writer. Else the buffer's length."""
    size = len(raw)  # type: ignore[arg-type]
    if not size or raw[size - 1:size] == b"\n":  # type: ignore[index]
        return size
    start = raw.rfind(b"\n") + 1  # type: ignore[attr-defined]
    tail = bytes(raw[start:]).strip()  # type: ignore[index]
    if not tail:
        return size
    if tail.startswith(b"{"):
        try:
            json.loads(tail)
        except ValueError:
            return start
        return size
    return size if LINE.search(ANSI.sub(b"", tail)) or not LOOKS_LIKE.search(tail) else start


def _read_bytes(path: str) -> object:
    """The file's bytes: a read-only memory map for a large file (no copy), else a bytes object."""
    try:
        with open(path, "rb") as fh:
            if os.fstat(fh.fileno()).st_size >= _MAP_FROM:
                try:
                    return mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
                except (OSError, ValueError):  # a file system without mmap: read it
                    pass
            return fh.read()
    except IsADirectoryError:
        raise InputError(f"{path} is a folder; pass a log file or a run folder holding log.txt") from None
    except OSError as exc:
        raise InputError(f"cannot read {path} ({exc.strerror or exc}); check the path and its permissions") from None


def _parse_text(path: str, raw: object) -> LossLog:
    steps, losses, rates, markers = scan.scan(raw)
    if not steps.size:
        raise InputError(
            f"{path} has no loss lines; expected the guide's format "
            "'[time] (step=0000042) Train Loss: 1.2345, Train Steps/Sec: 9.87' or a metrics.jsonl"
        )
    if markers == steps.size:
        malformed, examples = 0, ()
    else:  # a "(step=" that starts no loss line: find those lines, one by one
        malformed, examples = _malformed(raw)
    nan = np.full(steps.size, np.nan)
    return LossLog(path, "text", steps, losses, rates, nan, None, None, malformed, examples, 0)


def _malformed(raw: object) -> tuple:
    """(count, first few) of the lines that start like loss lines (``(step=N``) but do not parse."""
    count, shown = 0, []
    for number, line in enumerate(bytes(raw).splitlines(), 1):  # type: ignore[call-overload]
        line = ANSI.sub(b"", line)
        if LOOKS_LIKE.search(line) and not LINE.search(line):
            count += 1
            if len(shown) < _EXAMPLES:
                shown.append(f"line {number}: {line.strip()[:80].decode('utf-8', errors='replace')!r}")
    return count, tuple(shown)


def jsonl_objects(text: str) -> tuple:
    """THE parse of a metrics.jsonl's text: ``([(line number, object)], [broken line, shown])``."""
    lines = [(n, line) for n, line in enumerate(text.splitlines(), 1) if line.strip()]
    try:  # one parser call for the whole file; line by line only when some line is broken
        objects = json.loads("[" + ",".join(line for _, line in lines) + "]")
        return [(n, obj) for (n, _), obj in zip(lines, objects)], []
    except ValueError:
        parsed, broken = [], []
        for n, line in lines:
            try:
                parsed.append((n, json.loads(line)))
            except ValueError:
                broken.append(f"line {n}: {line.strip()[:80]!r}")
        return parsed, broken


def window_records(path: str) -> list:
    """The window records (dicts with a ``step``, no ``event``) of a metrics.jsonl; none when it cannot be read."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            parsed, _ = jsonl_objects(fh.read())
    except OSError:
        return []
    return [obj for _, obj in parsed if isinstance(obj, dict) and "event" not in obj and "step" in obj]


def _parse_jsonl(path: str, text: str) -> LossLog:
    parsed, broken = jsonl_objects(text)
    records, events = [], 0
    for n, obj in parsed:
        if isinstance(obj, dict) and "event" in obj:
            events += 1
        elif isinstance(obj, dict) and _is_number(obj.get("step")) and _is_number(obj.get("loss"), allow_none=True):
            records.append(obj)
        else:
            broken.append(f"line {n}: not a metrics record")
    if not records:
        raise InputError(
            f"{path} has no metrics records (objects with 'step' and 'loss'); pass a metrics.jsonl written by "
            "ascend_tune or a log.txt in the guide's format"
        )
    steps = np.array([r["step"] for r in records], dtype=np.int64)
    losses = np.array([_float(r.get("loss")) for r in records], dtype=np.float64)
    rates = np.array([_float(r.get("steps_per_sec")) for r in records], dtype=np.float64)
    samples = np.array([_float(r.get("samples_per_sec")) for r in records], dtype=np.float64)
    first = np.array([_float(r.get("first_step")) for r in records], dtype=np.float64)
    per_step = _per_step(records)
    step_numbers, step_losses = per_step if per_step else (None, None)
    grad_steps, grad_norms = _grad_norms(records)
    return LossLog(
        path, "jsonl", steps, losses, rates, samples, step_numbers, step_losses,
        len(broken), tuple(broken[:_EXAMPLES]), events, first, grad_steps=grad_steps, grad_norms=grad_norms,
    )


def _grad_norms(records: list) -> tuple:
    """(steps, gradient norms) from the health feature's ``step_grad_norms`` (each record's steps ``first_step`` ..
    ``step``), or (None, None) when no record has them."""
    numbers: list = []
    values: list = []
    for r in records:
        first, last, per = r.get("first_step"), r.get("step"), r.get("step_grad_norms")
        if _is_number(first) and isinstance(per, list) and len(per) == last - first + 1:
            numbers.extend(range(int(first), int(last) + 1))
            values.extend(_float(v) for v in per)
    if not numbers:
        return None, None
    return np.array(numbers, dtype=np.int64), np.array(values, dtype=np.float64)


def _per_step(records: list) -> Optional[tuple]:
    """One (step, loss) per optimizer step from each record's ``first_step`` and ``step_losses``, if all have them."""
    numbers: list = []
    values: list = []
    for r in records:
        first, last, per = r.get("first_step"), r.get("step"), r.get("step_losses")
        if not (_is_number(first) and isinstance(per, list) and len(per) == last - first + 1):
            return None
        numbers.extend(range(int(first), int(last) + 1))
        values.extend(_float(v) for v in per)
    return np.array(numbers, dtype=np.int64), np.array(values, dtype=np.float64)


def _is_number(value: object, allow_none: bool = False) -> bool:
    if value is None:
        return allow_none
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _float(value: object) -> float:
    return float(value) if _is_number(value) else float("nan")
