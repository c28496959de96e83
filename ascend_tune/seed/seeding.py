"""``seed_all``: the same random streams in the GPU / CPU run and the NPU run, so their dumps are comparable."""

from __future__ import annotations

import os
import random

from ..errors import ConfigError

MAX_SEED = 2**32 - 1


def seed_all(seed: int = 1234, deterministic: bool = False) -> None:
    """Seed python, numpy and torch (CPU, CUDA and NPU) and set ``PYTHONHASHSEED``.

    Parameters:
        seed: an integer in [0, 2**32 - 1].
        deterministic: also ask for deterministic kernels: ``torch.use_deterministic_algorithms(True)``, cuDNN
            deterministic without benchmark, ``CUBLAS_WORKSPACE_CONFIG`` (needed by deterministic cuBLAS), and on
            NPU the HCCL / LCCL determinism switches msprobe's ``seed_all(mode=True)`` sets. Process-wide; slower.
    """
    check_seed(seed, deterministic)
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


def check_seed(seed: object, deterministic: object) -> None:
    """Raise unless ``seed`` is an integer in [0, 2**32 - 1] and ``deterministic`` True or False."""
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED:
        raise ConfigError(f"seed must be an integer in [0, {MAX_SEED}], got {seed!r}")
    if not isinstance(deterministic, bool):
        raise ConfigError(f"deterministic must be True or False, got {deterministic!r}")
