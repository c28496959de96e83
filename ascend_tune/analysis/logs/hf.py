"""A Hugging Face ``Trainer``'s ``trainer_state.json`` as a :class:`~.model.LossLog`.

The Trainer writes the file at each checkpoint (``checkpoint-N/trainer_state.json``) and, when the script calls
``trainer.save_state()``, into ``output_dir``. Its ``log_history`` holds one record per logging step
(``{"loss", "grad_norm", "learning_rate", "epoch", "step"}``), the evaluation records (``eval_loss``,
``eval_runtime``, ...) and, last, the run's summary (``train_runtime``, ``train_steps_per_second``,
``train_loss``). ``step`` is the ``global_step``: optimizer steps done, so the first step is 1. ``loss`` is the
mean over the steps since the previous logged one (``logging_steps`` of them); the state records no wall time, so
the only rate is the whole run's (``train_steps_per_second``). Records without the loss key are skipped and
counted: evaluation records as validation, the summary and anything else as records that are not steps.
"""

from __future__ import annotations

import json
from typing import Optional

import numpy as np

from ...errors import InputError
from .formats import TRAINER_STATE
from .keys import is_validation, pick_loss_key
from .model import LossLog, RunRate, floats, is_number, nan_column


def is_trainer_state(head: bytes, first_line: bytes, path: str) -> bool:
    """A trainer_state.json: a JSON document whose first line is a lone ``{`` (json.dump with indent)."""
    return first_line == b"{"
STEP_ORIGIN = 1  # global_step after the first optimizer step
WINDOW_MEAN_KEY = "loss"  # the one key the Trainer averages over its logging window; others are the step's value
_NOT_LOSSES = ("step", "epoch")
_RUN_SUMMARY = "train_runtime"


def read_trainer_state(path: str, loss_key: Optional[str] = None) -> LossLog:
    """Read a ``trainer_state.json``.

    Parameters:
        path: the file.
        loss_key: the ``log_history`` key read as the loss (default: the guess, ``loss``).
    """
    try:
        with open(path, encoding="utf-8") as fh:
            state = json.load(fh)
    except ValueError as exc:
        raise InputError(f"{path} is not valid JSON ({exc}); pass a trainer_state.json the Trainer wrote") from None
    history = state.get("log_history") if isinstance(state, dict) else None
    if not isinstance(history, list):
        raise InputError(
            f"{path} has no log_history list, so it is no Hugging Face Trainer state; pass a "
            f"checkpoint-N/{TRAINER_STATE} or the output_dir of a run that logged (logging_steps)"
        )
    records = [r for r in history if isinstance(r, dict)]
    names = [k for r in records if _RUN_SUMMARY not in r for k, v in r.items() if k not in _NOT_LOSSES and is_number(v)]
    key = pick_loss_key(names, loss_key, "--loss-key", path, "key")
    rows, validation, events, malformed, run_rate = [], 0, len(history) - len(records), [], None
    for n, r in enumerate(records):
        if key.name in r and is_number(r.get("step")):
            rows.append(r)
        elif key.name in r:
            malformed.append(f"log_history[{n}]: no step number")
        elif _RUN_SUMMARY in r:
            events += 1
            run_rate = RunRate(*(r.get(k) if is_number(r.get(k)) else None for k in (
                "train_steps_per_second", "train_samples_per_second", _RUN_SUMMARY)))
        elif any(is_validation(k) for k in r):
            validation += 1
        else:
            events += 1
    if not rows:
        raise InputError(
            f"{path}: no log_history record has {key.name!r} and a step; pass a run that logged training steps "
            "(logging_steps) or name the loss with --loss-key"
        )
    steps = np.array([int(r["step"]) for r in rows], dtype=np.int64)
    losses = floats([r[key.name] for r in rows])
    first = np.empty(steps.size, dtype=np.float64)  # a window starts after the previous logged step
    first[0] = min(STEP_ORIGIN, int(steps[0]))
    first[1:] = steps[:-1] + 1
    first = np.where(first <= steps, first, steps)  # a restarted run: the step is a window of its own
    per_step = key.name != WINDOW_MEAN_KEY or bool(np.all(first == steps))
    graded = [r for r in rows if is_number(r.get("grad_norm"))]  # the logging step's own gradient norm
    grad_steps = np.array([int(r["step"]) for r in graded], dtype=np.int64) if graded else None
    grad_norms = floats([r["grad_norm"] for r in graded]) if graded else None
    return LossLog(
        path, "hf", steps, losses, nan_column(steps.size), nan_column(steps.size),
        steps if per_step else None, losses if per_step else None, len(malformed), tuple(malformed[:3]), events,
        recorded_first_steps=first, step_origin=STEP_ORIGIN, loss_key=key, validation=validation, run_rate=run_rate,
        grad_steps=grad_steps, grad_norms=grad_norms,
    )
