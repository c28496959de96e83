"""The run folder (``log_dir``): the name of every file a monitored run writes, and the one set-aside.

```
log_dir/
  log.txt  metrics.jsonl  summary.json        the step clock (rank 0)
  rank{R}/metrics.jsonl                       every rank, when there are several
  config.json                                 the settings that change the numbers (compare-config)
  tuning.json  shapes.csv                     tuning and the dynamic-shape detector
  profile/[rank{R}/]...  advice.html          profiler traces, the advisor's page
  report.html  report.md                      `ascend-tune report`'s page and its markdown twin
  dump/step{N}/[rank{R}/]  overflow.json      precision dumps (layout in formats.dump_layout)
  tensorboard/events.out.tfevents.*           the TensorBoard sink
  anomalies.jsonl  health/modules.jsonl       the health feature: spikes, per-module statistics
  (rank{R}/ holds the same two for each rank > 0)
  previous-<YYYYmmdd-HHMMSS>[-n]/             what an earlier run left, moved aside, never overwritten
```
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import time
from typing import Optional, Union

LOG_TXT = "log.txt"
METRICS_JSONL = "metrics.jsonl"
SUMMARY_JSON = "summary.json"
TUNING_JSON = "tuning.json"
CONFIG_JSON = "config.json"  # the experiment= feature: the settings that change the run's numbers
SHAPES_CSV = "shapes.csv"
OVERFLOW_JSON = "overflow.json"
ADVICE_HTML = "advice.html"
REPORT_HTML = "report.html"
PROFILE_DIR = "profile"
DUMP_DIR = "dump"
TENSORBOARD_DIR = "tensorboard"
ENV_TENSORBOARD = "ASCEND_TUNE_TENSORBOARD"  # tensorboard= when not given: the sink reads it, the launcher sets it
ANOMALIES_JSONL = "anomalies.jsonl"
HEALTH_DIR = "health"
MODULES_JSONL = "modules.jsonl"
PREVIOUS_PREFIX = "previous-"
STEP_LOG_FILES = (LOG_TXT, METRICS_JSONL, SUMMARY_JSON)

_RANK_DIR = re.compile(r"^rank(\d+)$")
logger = logging.getLogger("ascend_tune")


def rank_dir_name(rank: int) -> str:
    """``rank{R}``: the per-rank subfolder of traces, dumps and multi-rank metrics."""
    return f"rank{rank}"


def rank_of_dir(name: str) -> Optional[int]:
    """The rank a ``rank{R}`` folder name stands for, else None."""
    m = _RANK_DIR.match(name)
    return int(m.group(1)) if m else None


class RunDir:
    """One run folder: the path of each of its files (``log_txt``, ``metrics_jsonl``, ``summary_json``,
    ``tuning_json``, ``shapes_csv``, ``profile_dir``, ``dump_dir``, ``tensorboard_dir``). Nothing is created until
    asked (:meth:`set_aside`, the writers)."""

    def __init__(self, root: Union[str, os.PathLike]):
        self.root = os.fspath(root)
        self.log_txt = self.path(LOG_TXT)
        self.metrics_jsonl = self.path(METRICS_JSONL)
        self.summary_json = self.path(SUMMARY_JSON)
        self.tuning_json = self.path(TUNING_JSON)
        self.shapes_csv = self.path(SHAPES_CSV)
        self.profile_dir = self.path(PROFILE_DIR)
        self.dump_dir = self.path(DUMP_DIR)
        self.tensorboard_dir = self.path(TENSORBOARD_DIR)
        self._aside: Optional[str] = None

    def path(self, *parts: str) -> str:
        """``root/part/...``."""
        return os.path.join(self.root, *parts)

    def rank_path(self, rank: int, *parts: str) -> str:
        """``root/rank{R}/part/...``."""
        return self.path(rank_dir_name(rank), *parts)

    def set_aside(self, relpaths: list | tuple, what: str = "outputs") -> Optional[str]:
        """Move the given files or folders (relative to the root) that exist into ``previous-<timestamp>/``.

        One such folder per RunDir: the monitor's logs and a feature's earlier dump that are set aside
        at one start land together, each at its relative path. Returns the folder, or None when nothing was there.
        """
        present = [p for p in relpaths if os.path.lexists(self.path(p))]
        if not present:
            return None
        target = self._aside_folder(present)
        for rel in present:
            dest = os.path.join(target, rel)
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            shutil.move(self.path(rel), dest)
        logger.info("ascend_tune: earlier %s (%s) moved to %s", what, ", ".join(present), target)
        return target

    def _aside_folder(self, relpaths: list) -> str:
        if self._aside is not None and not any(os.path.lexists(os.path.join(self._aside, p)) for p in relpaths):
            return self._aside
        base = self.path(PREVIOUS_PREFIX + time.strftime("%Y%m%d-%H%M%S"))
        target, n = base, 1
        while os.path.lexists(target):
            target, n = f"{base}-{n}", n + 1
        self._aside = target
        return target
