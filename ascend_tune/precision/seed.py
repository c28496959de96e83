"""``seed_all``: the same random streams in the GPU / CPU run and the NPU run, so their dumps are comparable.

Also the ``seed=`` option of TrainingMonitor: seeded when the block is entered, before the first step; the seed
goes into summary.json.
"""

from __future__ import annotations

import os
import random
from typing import TYPE_CHECKING, Any, Optional

from ..callbacks import Callback
from ..errors import ConfigError, check_option_names

if TYPE_CHECKING:
    from ..context import RunContext

_MAX_SEED = 2**32 - 1


def seed_all(seed: int = 1234, deterministic: bool = False) -> None:
    """Seed python, numpy and torch (CPU, CUDA and NPU) and set ``PYTHONHASHSEED``.

    Parameters:
        seed: an integer in [0, 2**32 - 1].
        deterministic: also ask for deterministic kernels: ``torch.use_deterministic_algorithms(True)``, cuDNN
            deterministic without benchmark, ``CUBLAS_WORKSPACE_CONFIG`` (needed by deterministic cuBLAS), and on
            NPU the HCCL / LCCL determinism switches msprobe's ``seed_all(mode=True)`` sets. Process-wide; slower.
    """
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= _MAX_SEED:
        raise ConfigError(f"seed must be an integer in [0, {_MAX_SEED}], got {seed!r}")
    if not isinstance(deterministic, bool):
        raise ConfigError(f"deterministic must be True or False, got {deterministic!r}")
    import numpy as np
    import torch

    from ..device import torch_npu_module

    random.seed(seed)
    os.environ["PYTHONHASHSEED"] = str(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # also seeds every CUDA device
    npu = torch_npu_module()
    if npu is not None:
        npu.npu.manual_seed_all(seed)
    if not deterministic:
        return
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    if npu is not None:
        os.environ.update({"HCCL_DETERMINISTIC": "True", "LCCL_DETERMINISTIC": "1"})


class SeedCallback(Callback):
    """Records the seed in summary.json (the seeding itself happened when the callback was built)."""

    name = "seed"

    def __init__(self, seed: int, deterministic: bool):
        self.seed = seed
        self.deterministic = deterministic

    def summary(self) -> Optional[dict]:
        return {"seed": self.seed, "deterministic": self.deterministic}


def build_callback(value: Any, ctx: RunContext) -> Optional[SeedCallback]:
    """The monitor's factory for ``seed=``: an int, ``True`` (1234) or ``{"seed": ..., "deterministic": ...}``."""
    if value is None or value is False:
        return None
    if value is True:
        value = {}
    if isinstance(value, dict):
        check_option_names(value, ("seed", "deterministic"), "seed")
        seed, deterministic = value.get("seed", 1234), value.get("deterministic", False)
    else:
        seed, deterministic = value, False
    seed_all(seed, deterministic)
    return SeedCallback(seed, deterministic)
