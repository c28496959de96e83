"""The guide's log line: how the monitor writes it and what a reader takes for one.

``[2024-05-01 12:00:00] (step=0000042) Train Loss: 1.2345, Train Steps/Sec: 9.87`` — byte for byte what the
blog-post snippets print, so every tool that reads those logs reads ours. :data:`LINE` is the readers' definition
(:mod:`ascend_tune.analysis.logs.read` and its scan; whatever precedes the ``(step=`` marker and follows the rate
is ignored; NaN/Inf read back as such).
"""

from __future__ import annotations

import re
import time
from typing import Optional

TIME_FORMAT = "%Y-%m-%d %H:%M:%S"
LOG_LINE = "[{time}] (step={step:07d}) Train Loss: {loss:.4f}, Train Steps/Sec: {rate:.2f}"
_PERCENT = "[%s] (step=%07d) Train Loss: %.4f, Train Steps/Sec: %.2f"  # LOG_LINE, the same bytes, formatted faster

_NUMBER = rb"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?i:nan|inf(?:inity)?)"
LINE = re.compile(rb"\(step=(\d+)\) Train Loss: (" + _NUMBER + rb"), Train Steps/Sec: (" + _NUMBER + rb")")
"""One loss line: groups step, loss, steps/sec (bytes)."""
LOOKS_LIKE = re.compile(rb"\(step=\d")
"""A line that starts like a loss line; one that does not then match :data:`LINE` is malformed."""
ANSI = re.compile(rb"\x1b\[[0-9;?]*[A-Za-z]")
"""Colour codes a console logger may have added; stripped before parsing."""

_stamp_cache: list = [None, ""]  # (whole second, its text): log lines come many to a second at log_every=1


def format_log_line(step: int, loss: float, steps_per_sec: float, when: Optional[float] = None) -> str:
    """The guide's line for ``step`` (``when``: its ``time.time()``, default now), without a newline."""
    second = int(time.time() if when is None else when)
    return _PERCENT % (_stamp_cache[1] if _stamp_cache[0] == second else stamp(second), step, loss, steps_per_sec)


def stamp(second: int) -> str:
    """The line's time stamp for ``second`` (a whole ``time.time()``), kept as the cache's one second."""
    _stamp_cache[:] = [second, time.strftime(TIME_FORMAT, time.localtime(second))]
    return _stamp_cache[1]

