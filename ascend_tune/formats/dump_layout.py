"""The dump layout msprobe defined and both engines write, so either tool reads the other's dumps.

```
dump_path/step{N}/[rank{R}/]dump.json       {task, level, framework, dump_data_dir[, writer], data: {name: entry}}
                             stack.json      {id: [[names], [frames]]} or {name: [frames]} (both in use)
                             construct.json  {name: parent module name}
                             dump_tensor_data/NAME.pt   tensor mode
                             dump.journal    builtin engine, while the step runs (crash-safe, rebuilt by readers)
                             replay.csv      task="replay": one row per replayed call (REPLAY_COLUMNS)
                             replay.json     task="replay": counts, suspects in execution order, first_suspect
```
The rank folder is ``rank{R}``; msprobe 26 writes ``proc{PID}`` when torch.distributed is not initialised and 8.x
wrote a bare ``rank``. A frame of stack.json is one string, ``File {file}, line {n}, in {function}, \\n {code}``
(msprobe's compare tool shows it as it is). ptdbg_ascend's older layout (``*.pkl`` JSON lines) is read too
(:mod:`ascend_tune.analysis.dumps`).

The builtin engine adds ``writer`` to dump.json's header, ``{"name": "ascend_tune", "version": ..., "call_model":
3}``; msprobe writes none, nor did the builtin engine before call model 2. Call models: **3** records every
argument as the op received it, as msprobe's pre-hook does (an in-place op's ``self`` before the op ran);
**2** records an API's arguments as its caller passed them, the slots msprobe records (positional by position,
defaults the caller passed included, keywords by name), but kept a 0-d tensor argument as an alias read back at the
step's end, so an in-place op's 0-d ``self`` (AdamW's ``step_t += 1``) showed the value after the op; **1** (builtin
dumps without ``writer``) also recorded the keywords a Python-level torch function forwards by name and left out
those at their defaults. Readers take all three: the compare pairs arguments by parameter name and stands a missing
one in by its default, and does not compare a 0-d argument an op mutates where a dump of call model 1 or 2 holds it
(:func:`ascend_tune.analysis.dumps.calls.mutated_slots`).
"""

from __future__ import annotations

import re
from typing import Optional

DUMP_JSON = "dump.json"
STACK_JSON = "stack.json"
CONSTRUCT_JSON = "construct.json"
JOURNAL = "dump.journal"
TENSOR_DIR = "dump_tensor_data"
WRITER = "writer"
BUILTIN_WRITER = "ascend_tune"
CALL_MODEL = 3
# the package's own folders whose frames are the user's in a stack (the models under test, the demo's loop): the
# recording layer keeps them in stack.json, the compare shows them
OWN_USER_FOLDERS = ("testing", "demo")
REPLAY_CSV = "replay.csv"
REPLAY_JSON = "replay.json"
REPLAY_COLUMNS = ("index", "name", "dtype", "shape", "verdict", "max_abs_err", "max_rel_err", "err_ratio", "norm_err",
                  "nonfinite", "threshold", "reason")
"""replay.csv's header: what each row (one replayed call) holds, in order."""

_STEP_DIR = re.compile(r"^step(\d+)$")
_RANK_DIR = re.compile(r"^(?:rank(\d*)|proc\d+)$")
FRAME = re.compile(r"^File (?P<file>.*), line (?P<line>\d+), in (?P<function>.*?)(?:,[ \t]*\n ?(?P<code>.*))?\s*$",
                   re.DOTALL)
"""One stack.json frame: groups file, line, function and (when written) code."""


def step_dir_name(step: int) -> str:
    """``step{N}``: one dumped step's folder."""
    return f"step{step}"


def step_of_dir(name: str) -> Optional[int]:
    """The step a ``step{N}`` folder name stands for, else None."""
    m = _STEP_DIR.match(name)
    return int(m.group(1)) if m else None


def is_rank_dir_name(name: str) -> bool:
    """Whether ``name`` is a dump's rank folder: ``rank{R}``, msprobe's ``proc{PID}`` or a bare ``rank``."""
    return _RANK_DIR.match(name) is not None


def rank_of_dump_dir(name: str) -> Optional[int]:
    """The rank a dump's rank folder names (None for ``proc{PID}``, a bare ``rank`` or another name)."""
    m = _RANK_DIR.match(name)
    return int(m.group(1)) if m and m.group(1) else None


def format_frame(file: str, line: int, function: str, code: str) -> str:
    """One frame as stack.json holds it (what :data:`FRAME` parses)."""
    return f"File {file}, line {line}, in {function}, \n {code}"
