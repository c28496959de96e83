"""The one place that recognises a training log: a file by what it holds, a run folder by the files in it.

The formats are the rows of :data:`.formats.FORMATS` (``--format`` names): ``text`` (the guide's ``log.txt``),
``jsonl`` (ascend_tune's ``metrics.jsonl``), ``hf`` (a Hugging Face ``trainer_state.json``), ``lightning`` (a
Lightning ``CSVLogger`` ``metrics.csv``), ``tensorboard`` (``events.out.tfevents.*`` files).

A file is told by its content, whatever its name, by each format's ``sniff`` (rules that exclude each other): a
TFRecord header whose checksum holds (or ``tfevents`` in the name, TensorBoard's own rule) is TensorBoard; a JSON
document whose first line is a lone ``{`` is a trainer state (``metrics.jsonl`` has one object a line); a first line
of comma-separated names, ``step`` among them or in a ``.csv`` file, is a logger's CSV unless a seed line
``(step=`` follows; a first line starting with ``{`` is ascend_tune's JSONL; anything else is seed-format text.

A folder is read from the first of these it holds: ``metrics.jsonl`` / ``log.txt`` (the jsonl unless the guide's
text is asked for), ``trainer_state.json``, ``metrics.csv``, event files; else, one level down, the layouts the
frameworks write: the newest ``checkpoint-N/trainer_state.json`` of a Trainer's ``output_dir``, the newest
``version_N/metrics.csv`` of a CSVLogger's folder or of its one ``name/`` subfolder (``lightning_logs/``), the
event files of a run folder's ``tensorboard/`` or the newest of a Trainer's ``runs/*/``. What was chosen, and what
else was there, is said in the notes.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Optional

from ...errors import InputError
from ...formats.run_dir import LOG_TXT, METRICS_JSONL, TENSORBOARD_DIR
from .formats import BY_NAME, FORMATS, LIGHTNING_CSV, NAMES, TRAINER_STATE, what
from .tensorboard import event_files

_HEAD = 64 * 1024
_NUMBERED = re.compile(r"^(checkpoint-|version_)(\d+)$")
_NESTED = tuple(f for f in FORMATS if f.nested)  # the formats a framework writes one level down, in this order


@dataclass(frozen=True)
class Located:
    """What :func:`locate` found: the file (or, for TensorBoard, the folder of event files) and its format."""

    path: str
    kind: str
    notes: tuple = ()


def check_format(format: Optional[str]) -> Optional[str]:
    """``format`` when it is one of :data:`.formats.NAMES` (None and ``auto`` mean "recognise"), else an
    InputError."""
    if format in (None, "auto"):
        return None
    if format not in NAMES:
        raise InputError(f"unknown log format {format!r}; use one of: auto, {', '.join(NAMES)}")
    return format


def locate(path: str, prefer: str = "jsonl", format: Optional[str] = None) -> Located:
    """The log :func:`~.read.read_log` reads for ``path`` (a file or a run folder) and its format.

    Parameters:
        path: the file or folder.
        prefer: ``"jsonl"`` reads ``metrics.jsonl`` when it sits beside (or instead of) ``log.txt``; ``"text"``
            reads ``log.txt`` when there is one (the guide's script's input, rounded to 4 decimals).
        format: force one of :data:`.formats.NAMES` (None: recognise it).
    """
    if prefer not in ("jsonl", "text"):
        raise ValueError(f"prefer must be 'jsonl' or 'text', got {prefer!r}")
    format = check_format(format)
    if not os.path.exists(path):
        raise InputError(f"{path} does not exist; pass a log file or a run folder")
    if os.path.isdir(path):
        return _in_folder(path, prefer, format)
    if format is not None:
        return Located(path, format)
    beside = os.path.join(os.path.dirname(path), METRICS_JSONL)
    if prefer == "jsonl" and os.path.basename(path) == LOG_TXT and os.path.isfile(beside):
        return Located(beside, "jsonl")
    return Located(path, file_kind(path))


def file_kind(path: str) -> str:
    """The format of one file, told by what it holds (each format's ``sniff``; see the module docstring)."""
    if BY_NAME["tensorboard"].function("sniff")(b"", b"", path):  # by its name, before anything is read
        return "tensorboard"
    try:
        with open(path, "rb") as fh:
            head = fh.read(_HEAD)
    except OSError as exc:
        raise InputError(f"cannot read {path} ({exc.strerror or exc}); check the path and its permissions") from None
    binary = b"\x00" in head[:8192]  # only an event file may be: any other is text, which says "binary"
    first_line = head.lstrip().split(b"\n", 1)[0].strip()
    for fmt in FORMATS:
        if fmt.sniff and (fmt.name == "tensorboard" or not binary) and fmt.function("sniff")(head, first_line, path):
            return fmt.name
    return "text"


def _in_folder(path: str, prefer: str, format: Optional[str]) -> Located:
    found = _direct(path, prefer)
    if format is not None:
        if format in found:
            return Located(found[format], format)
        nested = _nested(path, format)
        if nested is None:
            raise InputError(f"{path} holds no {what(BY_NAME[format])}, neither directly nor in the folders its "
                             "framework writes; pass that file, or --format auto for this input")
        return nested
    if found:
        kind = next(iter(found))
        others = [what(BY_NAME[k]) for k in found if k != kind and not (BY_NAME[k].ours and BY_NAME[kind].ours)]
        notes = (f"{path} also holds {', '.join(others)}; --format picks another",) if others else ()
        return Located(found[kind], kind, notes)
    for fmt in _NESTED:
        nested = _nested(path, fmt.name)
        if nested is not None:
            return nested
    raise InputError(
        f"{path} holds no {_every_log()}; "
        "pass a run folder (TrainingMonitor's log_dir, a Trainer's output_dir, a CSVLogger version folder) or a log"
    )


def _every_log() -> str:
    names = [f.file or "TensorBoard event file" for f in FORMATS]
    return f"{', '.join(names[:-1])} or {names[-1]}"


def _direct(path: str, prefer: str) -> dict:
    """format -> file (or folder, for TensorBoard) of the logs directly in ``path``, in the order they are read."""
    ours = [f for f in FORMATS if f.ours]
    ours.sort(key=lambda f: f.name != prefer)  # the preferred one of ours first
    found = {}
    for fmt in ours + [f for f in FORMATS if not f.ours]:
        if fmt.file is None:
            if event_files(path):
                found[fmt.name] = path
        elif os.path.isfile(os.path.join(path, fmt.file)):
            found[fmt.name] = os.path.join(path, fmt.file)
    return found


def _nested(path: str, kind: str) -> Optional[Located]:
    """The log of ``kind`` one level down in ``path``, in the layout its framework writes (its format's
    ``nested``); None without one."""
    fmt = BY_NAME[kind]
    return fmt.function("nested")(path) if fmt.nested else None


def newest_checkpoint(path: str) -> Optional[Located]:
    """A Trainer's output_dir: the newest ``checkpoint-N/trainer_state.json``."""
    return _newest(path, "checkpoint-", TRAINER_STATE, "hf")


def newest_csv_logger_version(path: str) -> Optional[Located]:
    """CSVLogger(save_dir, name): the newest ``version_N/metrics.csv`` in ``path`` or in its one ``name/``."""
    found = _newest(path, "version_", LIGHTNING_CSV, "lightning")
    if found is not None:
        return found
    named = [hit for n in sorted(os.listdir(path)) if os.path.isdir(os.path.join(path, n))
             and (hit := _newest(os.path.join(path, n), "version_", LIGHTNING_CSV, "lightning")) is not None]
    return named[0] if len(named) == 1 else None


def tensorboard_folder(path: str) -> Optional[Located]:
    """A run folder's ``tensorboard/``, or the newest of a Trainer's ``runs/*/`` (report_to="tensorboard")."""
    ours = os.path.join(path, TENSORBOARD_DIR)
    if os.path.isdir(ours) and event_files(ours):
        return Located(ours, "tensorboard")
    runs = os.path.join(path, "runs")
    if os.path.isdir(runs):
        stamped = sorted(n for n in os.listdir(runs) if os.path.isdir(os.path.join(runs, n))
                         and event_files(os.path.join(runs, n)))
        if stamped:
            notes = (f"read the newest of {len(stamped)} runs in {runs}",) if len(stamped) > 1 else ()
            return Located(os.path.join(runs, stamped[-1]), "tensorboard", notes)
    return None


def _newest(path: str, prefix: str, name: str, kind: str) -> Optional[Located]:
    """``path/<prefix>N/name`` with the largest N, noting how many there were; None without one."""
    numbered = []
    for entry in os.listdir(path):
        m = _NUMBERED.match(entry)
        if m and m.group(1) == prefix and os.path.isfile(os.path.join(path, entry, name)):
            numbered.append((int(m.group(2)), entry))
    if not numbered:
        return None
    numbered.sort()
    chosen = os.path.join(path, numbered[-1][1], name)
    notes = (f"read {chosen}, the newest of {len(numbered)} {prefix}N folders",) if len(numbered) > 1 else ()
    return Located(chosen, kind, notes)


def find_runs(path: str) -> list:
    """The run logs under ``path``: the path itself when it is a log file or a run folder (see :func:`locate`),
    else its subfolders that are (the guide walked ``runs/*/log.txt``), sorted by name."""
    if not os.path.exists(path):
        raise InputError(f"{path} does not exist; pass a log file, a run folder or a folder of run folders")
    if os.path.isfile(path) or _recognised(path):
        return [path]
    runs = sorted(os.path.join(path, n) for n in os.listdir(path) if _recognised(os.path.join(path, n)))
    if not runs:
        raise InputError(f"{path} holds no training log ({_every_log()}), nor run folders that do")
    return runs


def _recognised(folder: str) -> bool:
    if not os.path.isdir(folder):
        return False
    return bool(_direct(folder, "jsonl")) or any(_nested(folder, f.name) for f in _NESTED)
