"""The dump layout msprobe defined and both engines write, so either tool reads the other's dumps.

```
dump_path/step{N}/[rank{R}/]dump.json       {task, level, framework, dump_data_dir, data: {name: entry}}
                             stack.json      {name: [frames]} (msprobe < 8: {id: [[names], [frames]]})
                             construct.json  {name: parent module name}
                             dump_tensor_data/NAME.pt   tensor mode
                             dump.journal    builtin engine, while the step runs (crash-safe, rebuilt by readers)
```
ptdbg_ascend's older layout (``*.pkl`` JSON lines) is read too (analysis.dumps).
"""

from __future__ import annotations

import re
from typing import Optional

DUMP_JSON = "dump.json"
STACK_JSON = "stack.json"
CONSTRUCT_JSON = "construct.json"
JOURNAL = "dump.journal"
TENSOR_DIR = "dump_tensor_data"

_STEP_DIR = re.compile(r"^step(\d+)$")


def step_dir_name(step: int) -> str:
    """``step{N}``: one dumped step's folder."""
    return f"step{step}"


def step_of_dir(name: str) -> Optional[int]:
    """The step a ``step{N}`` folder name stands for, else None."""
    m = _STEP_DIR.match(name)
    return int(m.group(1)) if m else None
