"""What plugs into the monitor's step clock: the profiler, the precision dump, tuning, or a user's own class.

Each method is optional and receives the run's :class:`~ascend_tune.context.RunContext` (``ctx``), never the
monitor. Steps are numbered as in the log. ``on_step_begin(n)`` runs before step n's first forward (at the block's
start, then right after step n-1 ends); ``on_step_end(n)`` right after step n's ``optimizer.step()`` (or backward /
``mon.step()`` when that is what ends a step).
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from .context import RunContext


class Callback:
    """Base class of monitor callbacks; ``name`` keys this callback's entry in summary.json."""

    name = "callback"

    def on_enter(self, ctx: RunContext, stack: contextlib.ExitStack) -> None:
        """Set up before the first step; register every undo on ``stack`` (it is closed at the block's end)."""

    def on_step_begin(self, ctx: RunContext, step: int) -> None:
        """Step ``step`` is about to run."""

    def on_step_end(self, ctx: RunContext, step: int) -> None:
        """Step ``step`` has run (its loss may still be on the device)."""

    def on_exit(self, ctx: RunContext, exc_type: Optional[type]) -> None:
        """The block ends (``exc_type`` set when it raised); runs before summary.json is written."""

    def summary(self) -> Optional[dict]:
        """What this callback adds to summary.json, or None."""
        return None
