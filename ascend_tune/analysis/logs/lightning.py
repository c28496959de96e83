"""A Lightning ``CSVLogger``'s ``metrics.csv`` as a :class:`~.model.LossLog`.

``CSVLogger(save_dir, name)`` writes ``save_dir/name/version_N/metrics.csv``: a header of every key logged
(``epoch``, ``step`` and one column per ``self.log`` name, ``train_loss_step`` / ``train_loss_epoch`` when logged
with ``on_epoch=True``), then one row per ``log_metrics`` call with the cells of the other keys empty. ``step`` is
the trainer's ``global_step`` at that point, counted from 0, and a training-step row holds that step's own value
(not a window mean; with ``accumulate_grad_batches`` the last micro-batch's). Rows without the loss are skipped and
counted: those holding a validation / test column as validation, the rest (epoch aggregates, learning-rate rows)
as records that are not steps. The logger records no time; a column named ``time`` (or ``.../time``: Lightning's
``ThroughputMonitor`` logs ``train/time``) gives wall times, a ``..steps_per_sec`` or ``..batches_per_sec`` column
steps/sec and a ``..samples_per_sec`` column samples/sec, each taken from the row of the same step.
"""

from __future__ import annotations

import csv
import re
from typing import Optional

import numpy as np

from ...errors import InputError
from .keys import is_validation, pick_loss_key
from .model import LossLog


def is_metrics_csv(head: bytes, first_line: bytes, path: str) -> bool:
    """A logger's CSV: a first line of comma-separated names, ``step`` among them or in a ``.csv`` file, and no
    seed line ``(step=`` after it."""
    cells = [cell.strip().strip(b'"') for cell in first_line.split(b",")]
    return len(cells) > 1 and (b"step" in cells or path.lower().endswith(".csv")) and b"(step=" not in head
STEP_ORIGIN = 0
_NOT_LOSSES = ("step", "epoch")
_TIME = re.compile(r"(?i)(^|[/|_.])(time|wall_time|timestamp)$")
_STEP_RATE = re.compile(r"(?i)(steps|batches)_per_sec(ond)?$")
_SAMPLE_RATE = re.compile(r"(?i)samples_per_sec(ond)?$")


def read_metrics_csv(path: str, loss_key: Optional[str] = None) -> LossLog:
    """Read a ``metrics.csv`` written by Lightning's ``CSVLogger`` (or a CSV of the same shape).

    Parameters:
        path: the file.
        loss_key: the column read as the loss (default: the guess, see :mod:`.keys`).
    """
    with open(path, newline="", encoding="utf-8", errors="replace") as fh:
        rows = list(csv.reader(fh))
    if not rows or "step" not in rows[0]:
        raise InputError(
            f"{path} has no 'step' column, so it is no logger's metrics.csv; pass the metrics.csv Lightning's "
            "CSVLogger wrote (save_dir/name/version_N/metrics.csv)"
        )
    header = rows[0]
    at_step = header.index("step")
    values = [[_number(cell) for cell in row] for row in rows[1:]]
    numeric = [name for i, name in enumerate(header)
               if name not in _NOT_LOSSES and any(i < len(v) and v[i] is not None for v in values)]
    key = pick_loss_key(numeric or [n for n in header if n not in _NOT_LOSSES], loss_key, "--loss-key", path,
                        "column")
    at_loss = header.index(key.name)
    validation_columns = [i for i, name in enumerate(header) if is_validation(name) and i != at_loss]
    steps, losses, malformed, validation, events = [], [], [], 0, 0
    by_step: dict = {}  # step -> {column: value}, for the time and rate columns logged in rows of their own
    for line, (row, cells) in enumerate(zip(rows[1:], values), 2):
        step = cells[at_step] if at_step < len(cells) else None
        step = step if step is not None and np.isfinite(step) else None
        if step is not None:
            by_step.setdefault(int(step), {}).update(
                (header[i], v) for i, v in enumerate(cells) if v is not None and i < len(header))
        loss_text = row[at_loss].strip() if at_loss < len(row) else ""
        if loss_text and (step is None or cells[at_loss] is None):
            malformed.append(f"line {line}: {','.join(row)[:80]!r}")
        elif loss_text:
            steps.append(int(step))
            losses.append(cells[at_loss])
        elif any(i < len(cells) and cells[i] is not None for i in validation_columns):
            validation += 1
        else:
            events += 1
    if not steps:
        raise InputError(f"{path}: no row has a {key.name!r} value and a step; name the loss column with --loss-key")
    step_array = np.array(steps, dtype=np.int64)
    loss_array = np.array(losses, dtype=np.float64)
    columns = {what: _column(header, pattern) for what, pattern in (
        ("steps/sec", _STEP_RATE), ("samples/sec", _SAMPLE_RATE), ("wall times", _TIME))}
    joined = {what: _joined(by_step, steps, name) for what, name in columns.items()}
    used = [f"{what} from column {name!r}" for what, name in columns.items() if name is not None]
    return LossLog(
        path, "lightning", step_array, loss_array, joined["steps/sec"], joined["samples/sec"], step_array, loss_array,
        len(malformed), tuple(malformed[:3]), events, step_origin=STEP_ORIGIN, loss_key=key, validation=validation,
        wall_times=joined["wall times"] if columns["wall times"] else None,
        read_notes=(f"{path}: {', '.join(used)}",) if used else (),
    )


def _column(header: list, pattern: re.Pattern) -> Optional[str]:
    """The first training column whose name matches ``pattern``, else None."""
    return next((name for name in header if pattern.search(name) and not is_validation(name)), None)


def _joined(by_step: dict, steps: list, column: Optional[str]) -> np.ndarray:
    """``column`` read at each of ``steps`` from the row of that step (NaN where none has a value, or no column)."""
    if column is None:
        return np.full(len(steps), np.nan)
    return np.array([by_step.get(s, {}).get(column, np.nan) for s in steps], dtype=np.float64)


def _number(cell: str) -> Optional[float]:
    try:
        value = float(cell)
    except ValueError:
        return None
    return value
