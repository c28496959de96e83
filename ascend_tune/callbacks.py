"""What plugs into the monitor's step clock: the profiler, the precision dump, tuning, or a user's own class.

Each method is optional. Steps are numbered as in the log. ``on_step_begin(n)`` runs before step n's first
forward (at the block's start, then right after step n-1 ends); ``on_step_end(n)`` right after step n's
``optimizer.step()`` (or backward / ``mon.step()`` when that is what ends a step).
"""

from __future__ import annotations

import contextlib
from typing import Any, Optional


class Callback:
    """Base class of monitor callbacks; ``name`` keys this callback's entry in summary.json."""

    name = "callback"

    def on_enter(self, mon: Any, stack: contextlib.ExitStack) -> None:
        """Set up before the first step; register every undo on ``stack`` (it is closed at the block's end)."""

    def on_step_begin(self, mon: Any, step: int) -> None:
        """Step ``step`` is about to run."""

    def on_step_end(self, mon: Any, step: int) -> None:
        """Step ``step`` has run (its loss may still be on the device)."""

    def on_exit(self, mon: Any, exc_type: Optional[type]) -> None:
        """The block ends (``exc_type`` set when it raised); runs before summary.json is written."""

    def summary(self) -> Optional[dict]:
        """What this callback adds to summary.json, or None."""
        return None
