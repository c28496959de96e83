"""The files of one dumped step in one rank folder: an append-only journal while the step runs, msprobe's JSON
index (``dump.json``, ``stack.json``, ``construct.json``) written atomically when it ends.

msprobe writes its JSON only at ``stop()`` / ``step()``, so a crash inside a step (the step one dumps to find out
why it crashes) leaves nothing readable. Here each entry goes to ``dump.journal`` the moment it is seen, one JSON
line per write(2) on an ``O_APPEND`` descriptor: a SIGKILL loses at most the line being written, and
:func:`ascend_tune.analysis.dumps.read.read_dump` rebuilds the step from the lines that made it. Statistics are read
back once at step end (never per op), so a recovered step has names, dtypes and shapes but no Max/Min/Mean/Norm.

Journal lines: ``{"header": {...}}`` first, then ``{"stack": id, "frames": [...]}`` when a new call stack is seen,
and ``{"name": ..., "data": {...}, "stack"?: id, "parent"?: name}`` for each part of an entry (an entry's parts,
e.g. a module's forward inputs and outputs, are merged by name).
"""

from __future__ import annotations

import json
import os
from typing import Optional

from ..contract.outputs import LineFile
from ..formats.dump_layout import CONSTRUCT_JSON, DUMP_JSON, JOURNAL, STACK_JSON
from ..formats.writing import write_json_atomic


class StepWriter:
    """Writes one step's dump into ``rank_dir`` (which exists). A write that fails raises ``OSError``: the engine
    stops recording and the monitor's outputs report the dump lost; the journal stays for recovery."""

    def __init__(self, rank_dir: str, header: dict):
        self.rank_dir = rank_dir
        self._path = os.path.join(rank_dir, JOURNAL)
        self._file: Optional[LineFile] = LineFile(self._path)
        self.append({"header": header})

    def append(self, record: dict) -> None:
        """Add one line to the journal (one write, so a killed process leaves whole lines)."""
        if self._file is not None:
            line = json.dumps(record, separators=(",", ":"), allow_nan=True, default=str) + "\n"
            self._file.write(line.encode("utf-8"))

    def append_raw(self, line: str) -> None:
        """Add one line already encoded as JSON (ending in a newline)."""
        if self._file is not None:
            self._file.write(line.encode("utf-8"))

    def finish(self, dump: dict, stack: dict, construct: dict) -> None:
        """Write the JSON index atomically (dump.json last: its presence marks a complete step), drop the journal."""
        self._close()
        write_json_atomic(os.path.join(self.rank_dir, STACK_JSON), stack)
        write_json_atomic(os.path.join(self.rank_dir, CONSTRUCT_JSON), construct)
        write_json_atomic(os.path.join(self.rank_dir, DUMP_JSON), dump)
        os.remove(self._path)

    def _close(self) -> None:
        file, self._file = self._file, None
        if file is not None:
            file.close()
