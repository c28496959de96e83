"""What ascend_tune's own work is called in a profiler trace, so the advisor can tell it from the training's.

The monitor reads the step losses back once per log line; on a GPU or NPU that read (``aten::item`` /
``cudaEventSynchronize``) shows as a host sync. It runs inside a ``record_function`` named
``READ_BACK#<k>`` (``k``: the steps the read covers, the log interval), which the advisor's host-sync rule skips.
"""

from __future__ import annotations

from typing import Optional

READ_BACK = "ascend_tune.loss_read_back"


def read_back_name(steps: int) -> str:
    """The annotation of one read-back covering ``steps`` steps."""
    return f"{READ_BACK}#{steps}"


def read_back_steps(name: str) -> Optional[int]:
    """The steps a read-back annotation covers; None when ``name`` is not one."""
    if not name.startswith(READ_BACK + "#"):
        return None
    tail = name[len(READ_BACK) + 1:]
    return int(tail) if tail.isdigit() else None


# Module scopes: while the monitor's profiler records, each forward of a module of the monitored model runs inside a
# record_function range named MODULE_SCOPE#<path> (``transformer.h.1.mlp``; the root module's path is its class
# name), so `ascend-tune compare-trace` can charge time to the part of the model, the same on every device.
MODULE_SCOPE = "ascend_tune.module"


def module_scope_name(path: str) -> str:
    """The annotation of one forward of the module at ``path``."""
    return f"{MODULE_SCOPE}#{path}"


def module_scope_path(name: str) -> Optional[str]:
    """The module path of a module-scope annotation; None when ``name`` is not one."""
    return name[len(MODULE_SCOPE) + 1:] if name.startswith(MODULE_SCOPE + "#") else None
