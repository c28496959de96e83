"""THE registry of training-log formats: one row each (its ``--format`` name, what it is and who writes it, its file
in a run folder, its reader, how a file of it is told by its content, where its framework puts it one level down,
what it lacks for steps/sec). :mod:`.detect`, :mod:`.read`, :mod:`.model`, :mod:`.throughput` and the CLI's
``--format`` read this table; a new format is its reader module and one row here.

Functions are named ``"module:function"`` inside this package and imported when used, so the table loads nothing.
A ``sniff(head, first_line, path)`` tells the format from a file's first 64 kB (the formats' rules exclude each
other; a file none claims is the guide's text); a ``nested(folder)`` returns a :class:`~.detect.Located` or None.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Optional

from ...formats.run_dir import LOG_TXT, METRICS_JSONL

TRAINER_STATE = "trainer_state.json"  # Hugging Face Trainer's state, in output_dir and each checkpoint-N/
LIGHTNING_CSV = "metrics.csv"  # Lightning's CSVLogger, in save_dir/name/version_N/


@dataclass(frozen=True)
class LogFormat:
    """One training-log format (see the module docstring)."""

    name: str  # the --format choice and LossLog.kind
    title: str  # what kind of log it is, as the tools print it
    writer: str  # who writes it, in words
    file: Optional[str]  # its file in a run folder; None: event files, whatever their names
    reader: str  # "module:function" reading (path[, option]) into a LossLog
    option: Optional[str] = None  # the reader's keyword for the user's choice of loss (loss_key, tag)
    sniff: Optional[str] = None  # "module:function" (head, first_line, path) -> bool; None: the fallback
    nested: Optional[str] = None  # "module:function" (folder) -> Located or None
    lacks_rate: str = "{source} records no steps/sec"  # what it would need for steps/sec ({source}, {loss})
    ours: bool = False  # ascend_tune's own: one loss, nothing to pick

    def function(self, field: str) -> Any:
        """The function a ``"module:function"`` field names, imported now."""
        module, name = getattr(self, field).split(":")
        return getattr(importlib.import_module(f"{__package__}.{module}"), name)


FORMATS = (
    LogFormat("text", "log.txt (the guide's line)", "ascend_tune", LOG_TXT, "read:read_log_file", ours=True),
    LogFormat("jsonl", "metrics.jsonl (ascend_tune)", "ascend_tune", METRICS_JSONL, "read:read_log_file",
              sniff="read:is_jsonl", ours=True),
    LogFormat("hf", "trainer_state.json (Hugging Face Trainer)", "Hugging Face Trainer", TRAINER_STATE,
              "hf:read_trainer_state", option="loss_key", sniff="hf:is_trainer_state",
              nested="detect:newest_checkpoint",
              lacks_rate="{source} records no wall time and no train_runtime record (the Trainer adds it after "
                         "train(), in the output_dir/trainer_state.json trainer.save_state() writes); pass that file "
                         "or run under TrainingMonitor"),
    LogFormat("lightning", "metrics.csv (Lightning CSVLogger)", "Lightning", LIGHTNING_CSV,
              "lightning:read_metrics_csv", option="loss_key", sniff="lightning:is_metrics_csv",
              nested="detect:newest_csv_logger_version",
              lacks_rate="{source} records no steps/sec and no wall time (Lightning's CSVLogger writes neither); add "
                         "Lightning's ThroughputMonitor callback (it logs train/time) or run under TrainingMonitor"),
    LogFormat("tensorboard", "TensorBoard events", "TensorBoard", None, "tensorboard:read_events", option="tag",
              sniff="tensorboard:is_event_file", nested="detect:tensorboard_folder",
              lacks_rate="{source} has a single {loss} point: no window to time"),
)
NAMES = tuple(f.name for f in FORMATS)
BY_NAME = {f.name: f for f in FORMATS}


def what(fmt: LogFormat) -> str:
    """How a message names a log of ``fmt``: its file, or what its files are."""
    return fmt.file or "TensorBoard event file (events.out.tfevents.*)"
