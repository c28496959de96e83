"""TensorBoard event files (``events.out.tfevents.*``) as a :class:`~.model.LossLog`, read with tensorboard's own
record reader (the ``tensorboard`` extra, imported inside the functions that need it).

A run folder holds one event file per writer session, read in name order (the names start with the creation
time), as TensorBoard reads them. Each scalar point (``SummaryWriter.add_scalar``'s ``simple_value``, or a scalar
tensor as TF2's ``tf.summary.scalar`` writes) has a tag, a step and a wall time; the loss is the guessed tag (see
:mod:`.keys`) or ``--tag``. The step is what the script passed as ``global_step``, taken as counted from 0 (the
``enumerate`` of a loop, ascend_tune's own TensorBoard sink). A point at every step is that step's loss; sparser
points are log windows: the loss of the steps since the previous point, as the PyTorch tutorial's
``running_loss / k`` logs it. Steps/sec is a ``..steps_per_sec`` tag's value where the run logged one (ascend_tune's
sink does), else the wall times' (the tools derive it). Points of validation tags and events that are no scalar
(the file version, graphs, histograms) are counted, not read. A file whose last record is cut or whose checksums
fail is refused: TensorBoard itself stops there without a word.
"""

from __future__ import annotations

import os
import re
from typing import Optional

import numpy as np

from ...errors import ConfigError, InputError
from .keys import is_validation, pick_loss_key
from .model import LossLog

EVENTS_MARK = "tfevents"  # in every event file's name, as TensorBoard recognises them
STEP_ORIGIN = 0
_HEADER = 12  # a record: u64 length, u32 masked crc32c of it, the data, u32 masked crc32c of the data
_FOOTER = 4
_STEP_RATE = re.compile(r"(?i)steps_per_sec(ond)?$")
_SAMPLE_RATE = re.compile(r"(?i)samples_per_sec(ond)?$")


def event_files(folder: str) -> list:
    """The event files directly in ``folder``, in name order (= creation order)."""
    return sorted(os.path.join(folder, n) for n in os.listdir(folder)
                  if EVENTS_MARK in n and os.path.isfile(os.path.join(folder, n)))


def is_event_record(head: bytes) -> bool:
    """Whether ``head`` (a file's first bytes) starts with a TFRecord header whose checksum holds."""
    if len(head) < _HEADER:
        return False
    try:
        from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c
    except ImportError:
        return False
    return masked_crc32c(head[:8]) == int.from_bytes(head[8:12], "little")


def is_event_file(head: bytes, first_line: bytes, path: str) -> bool:
    """An event file: ``tfevents`` in its name (TensorBoard's own rule), or a TFRecord header whose checksum holds."""
    return EVENTS_MARK in os.path.basename(path) or (b"\x00" in head[:8192] and is_event_record(head))


def read_events(path: str, tag: Optional[str] = None) -> LossLog:
    """Read a TensorBoard run: one event file or a folder of them.

    Parameters:
        path: an ``events.out.tfevents.*`` file or the folder holding a run's event files.
        tag: the scalar tag read as the loss (default: the guess, e.g. ``train/loss``).
    """
    files = event_files(path) if os.path.isdir(path) else [path]
    if not files:
        raise InputError(f"{path} holds no TensorBoard event file (events.out.tfevents.*)")
    points: dict = {}  # tag -> [(step, wall time, value)] in file order
    other = 0
    for name in files:
        other += _read_file(name, points)
    key = pick_loss_key(list(points), tag, "--tag", path, "tag")
    series = points[key.name]
    steps = np.array([p[0] for p in series], dtype=np.int64)
    losses = np.array([p[2] for p in series], dtype=np.float64)
    walls = np.array([p[1] for p in series], dtype=np.float64)
    validation = sum(len(v) for t, v in points.items() if t != key.name and is_validation(t))
    per_step = steps.size > 1 and bool(np.all(np.diff(steps) == 1))
    source = files[0] if len(files) == 1 else path
    tags = {what: next((t for t in points if pattern.search(t) and not is_validation(t)), None)
            for what, pattern in (("steps/sec", _STEP_RATE), ("samples/sec", _SAMPLE_RATE))}
    notes = [f"read {len(files)} event files of {path} in name order"] if len(files) > 1 else []
    notes += [f"{source}: {what} from tag {tag!r}" for what, tag in tags.items() if tag is not None]
    return LossLog(
        source, "tensorboard", steps, losses, _joined(points, steps, tags["steps/sec"]),
        _joined(points, steps, tags["samples/sec"]), steps if per_step else None, losses if per_step else None, 0,
        (), other, step_origin=STEP_ORIGIN, loss_key=key, validation=validation, wall_times=walls,
        read_notes=tuple(notes),
    )


def _read_file(path: str, points: dict) -> int:
    """Add the scalar points of one event file to ``points``; return how many events hold no scalar."""
    try:
        from tensorboard.backend.event_processing.event_file_loader import RawEventFileLoader
        from tensorboard.compat.proto import event_pb2
        from tensorboard.util import tensor_util
    except ImportError:
        raise ConfigError("reading TensorBoard event files needs tensorboard: pip install 'ascend_tune[tensorboard]'"
                          ) from None
    size = os.path.getsize(path)
    read, other = 0, 0
    for record in RawEventFileLoader(path).Load():  # stops quietly at a cut or corrupt record: see below
        read += _HEADER + len(record) + _FOOTER
        try:
            event = event_pb2.Event.FromString(record)
        except Exception:  # protobuf's DecodeError: a record of another kind of file
            raise InputError(f"{path} holds a record that is no TensorBoard event; pass an events.out.tfevents.* "
                             "file") from None
        if not event.HasField("summary"):
            other += 1
            continue
        scalars = 0
        for value in event.summary.value:
            number = _scalar(value, tensor_util)
            if number is not None:
                points.setdefault(value.tag, []).append((int(event.step), float(event.wall_time), number))
                scalars += 1
        other += scalars == 0
    if read != size:
        what = "is cut short" if read < size else "does not add up"
        raise InputError(
            f"{path} {what}: its records end at byte {read} of {size} (a writer killed mid-record, or a corrupt "
            "copy); copy the file again from the run, or pass the run's other event files"
        )
    return other


def _scalar(value: object, tensor_util: object) -> Optional[float]:
    """A summary value's number: ``simple_value``, or a one-element numeric tensor; None for anything else."""
    if value.HasField("simple_value"):  # type: ignore[attr-defined]
        return float(value.simple_value)  # type: ignore[attr-defined]
    if value.HasField("tensor"):  # type: ignore[attr-defined]
        try:
            array = tensor_util.make_ndarray(value.tensor)  # type: ignore[attr-defined]
        except Exception:  # a tensor dtype tensorboard cannot decode: not a scalar we read
            return None
        if array.size == 1 and array.dtype.kind in "fiu":
            return float(array.reshape(-1)[0])
    return None


def _joined(points: dict, steps: np.ndarray, tag: Optional[str]) -> np.ndarray:
    """``tag``'s values at each of ``steps`` (its last value there; NaN where it has none, or no tag)."""
    if tag is None:
        return np.full(steps.size, np.nan)
    at = {step: value for step, _, value in points[tag]}
    return np.array([at.get(int(s), np.nan) for s in steps], dtype=np.float64)
