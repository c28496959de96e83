"""The one model every log reader returns: :class:`LossLog`, a run's losses and rates as arrays.

Readers (one module per format) fill it: :mod:`.read` for the guide's ``log.txt`` and ascend_tune's
``metrics.jsonl``, :mod:`.hf` for a Hugging Face ``trainer_state.json``, :mod:`.lightning` for a Lightning
``CSVLogger`` ``metrics.csv``, :mod:`.tensorboard` for TensorBoard event files. numpy only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple, Optional

import numpy as np

from .formats import FORMATS
from .rates import WarmUp, window_first_steps

# What each kind of log is and who wrote it, as the tools print them (the registry's rows, .formats)
KIND_NAMES = {f.name: f.title for f in FORMATS}
WRITERS = {f.name: f.writer for f in FORMATS}
OURS = tuple(f.name for f in FORMATS if f.ours)  # ascend_tune's own logs: one loss, nothing to pick


class LossKey(NamedTuple):
    """Which key, column or scalar tag of a log was read as the loss, and whether it was guessed."""

    name: str
    guessed: bool
    option: str  # the option that picks another: "--loss-key" or "--tag"
    others: tuple  # the other numeric keys / columns / tags the log holds


class RunRate(NamedTuple):
    """A rate recorded only for the whole run (a Hugging Face Trainer's final ``train_runtime`` record)."""

    steps_per_sec: Optional[float]
    samples_per_sec: Optional[float]
    seconds: Optional[float]


@dataclass(frozen=True, eq=False)
class LossLog:
    """One run's log as arrays, one entry per log line (``log.txt``) or record (every other format).

    ``steps`` is the step number of each line (the last step of its log window) in the format's own counting, which
    starts at ``step_origin`` (0 for ascend_tune, Lightning and TensorBoard writers, 1 for the Hugging Face Trainer's
    ``global_step``); ``losses`` the line's loss (the window mean), ``steps_per_sec`` / ``samples_per_sec`` its
    rates (NaN where unknown). ``step_numbers`` / ``step_losses`` hold one entry per optimizer step when the log
    records each step's own loss (metrics.jsonl's ``step_losses``; a record per step; Lightning's step values),
    else None. ``recorded_first_steps`` is each line's first step where the format records it (NaN where missing),
    ``warmup`` the run's warm-up from the ``summary.json`` beside the log (None without one). ``wall_times`` are
    the records' wall-clock seconds where the format has them and no rate (TensorBoard), ``run_rate`` a rate of
    the whole run only (Hugging Face). ``events`` counts records that are not steps (metrics.jsonl events, a
    Trainer's final summary, TensorBoard's non-scalar events), ``validation`` the validation / evaluation rows
    skipped, ``loss_key`` what was read as the loss where the format has a choice. ``grad_steps`` / ``grad_norms``
    are each step's gradient norm where the log records it (metrics.jsonl's ``step_grad_norms``, a Trainer's
    ``grad_norm``), else None.
    """

    source: str
    kind: str  # a key of KIND_NAMES
    steps: np.ndarray
    losses: np.ndarray
    steps_per_sec: np.ndarray
    samples_per_sec: np.ndarray
    step_numbers: Optional[np.ndarray]
    step_losses: Optional[np.ndarray]
    malformed: int
    malformed_examples: tuple
    events: int
    recorded_first_steps: Optional[np.ndarray] = None
    warmup: Optional[WarmUp] = None
    read_notes: tuple = ()
    step_origin: int = 0
    loss_key: Optional[LossKey] = None
    validation: int = 0
    wall_times: Optional[np.ndarray] = None
    run_rate: Optional[RunRate] = None
    grad_steps: Optional[np.ndarray] = None  # the steps whose gradient norm the log records (its own counting)
    grad_norms: Optional[np.ndarray] = None  # each one's gradient norm (the health feature's, a Trainer's grad_norm)

    @property
    def lines(self) -> int:
        return int(self.steps.size)

    @property
    def first_steps(self) -> np.ndarray:
        """The first step of each line's window (see :func:`.rates.window_first_steps`)."""
        return window_first_steps(self.steps, self.recorded_first_steps)

    @property
    def kind_name(self) -> str:
        """What kind of log this is, in words."""
        return KIND_NAMES.get(self.kind, self.kind)

    @property
    def writer(self) -> str:
        """Who wrote this kind of log, in words."""
        return WRITERS.get(self.kind, self.kind)

    def as_dict(self) -> dict:
        """What was read, JSON-ready (no arrays): the source, its format, the loss key and what was skipped."""
        key = self.loss_key
        return {"source": self.source, "format": self.kind, "step_origin": self.step_origin,
                "loss_key": key.name if key else None, "loss_key_guessed": key.guessed if key else None,
                "validation_skipped": self.validation, "non_step_skipped": self.events}

    def notes(self) -> list:
        """What a reader should know about this log: malformed lines (the first few shown), records skipped, an
        unreadable summary."""
        out = list(self.read_notes)
        skipped = []
        if self.validation:
            skipped.append(f"{self.validation} validation / evaluation record(s)")
        if self.events and self.kind not in OURS:
            skipped.append(f"{self.events} record(s) that are not training steps")
        if skipped:
            out.insert(0, f"{self.source}: skipped {' and '.join(skipped)}")
        if self.malformed:
            shown = "; ".join(self.malformed_examples)
            out.insert(0, f"{self.source}: {self.malformed} malformed line(s) skipped ({shown})")
        return out


def floats(values: list) -> np.ndarray:
    """A float64 array of ``values``: numbers as they are, anything else (None, text, a bool) NaN."""
    return np.array([float(v) if is_number(v) else np.nan for v in values], dtype=np.float64)


def is_number(value: object) -> bool:
    """Whether ``value`` is an int or float (not a bool)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def nan_column(size: int) -> np.ndarray:
    """``size`` NaNs: the rate of a format that records none."""
    return np.full(size, np.nan)
