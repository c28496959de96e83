"""What a feature writes the way the run writes it: one metrics.jsonl line of any record, and the console logger.

The console rule: log lines (and the few lines meant for the user's eyes, such as tuning's one line) go to
``ascend_tune.console``, which does not propagate: on rank 0, unless quiet, the monitor gives it a handler that
writes to stderr for the block (:func:`ascend_tune.runtime.sinks.echo_to_console`), whatever the application did to
``logging``.
"""

from __future__ import annotations

import json
import logging

console = logging.getLogger("ascend_tune.console")
console.propagate = False
console.setLevel(logging.INFO)


def json_line(record: dict) -> bytes:
    """One metrics.jsonl line of any record (non-finite numbers as ``NaN`` / ``Infinity``, as Python reads them)."""
    return (json.dumps(record, allow_nan=True, default=str, separators=(",", ":")) + "\n").encode()
