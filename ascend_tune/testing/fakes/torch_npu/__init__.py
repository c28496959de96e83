"""Fake ``torch_npu`` for CPU-only tests: real module paths and signatures, "NPU" tensors are CPU tensors.

It never touches torch (no ``rename_privateuse1_backend``, no ``torch.npu``), so dropping every ``torch_npu*`` entry
from ``sys.modules`` undoes it. Environment switches, read at import time:

- ``ASCEND_TUNE_FAKE_NPU_FAIL``: ``import`` raises the ImportError of an install without CANN, ``runtime`` the
  RuntimeError of a CUDA build of torch next to torch_npu; empty or unset imports normally.
- ``ASCEND_TUNE_FAKE_NPU_COUNT``: NPUs on the fake host (default 1); ``ASCEND_RT_VISIBLE_DEVICES`` masks them.
- ``ASCEND_TUNE_FAKE_NPU_NAME``: the chip name (default ``Ascend910B2``); it also sets the default compile mode.
"""

from __future__ import annotations

import os
import time

_FAIL_MODES = ("", "import", "runtime")

_fail_mode = os.environ.get("ASCEND_TUNE_FAKE_NPU_FAIL", "")
if _fail_mode not in _FAIL_MODES:
    # A typo here would silently import a healthy fake and let a broken-install test pass for the wrong reason.
    raise ValueError(f"ASCEND_TUNE_FAKE_NPU_FAIL={_fail_mode!r}: use one of 'import', 'runtime' or leave it unset")
if _fail_mode == "runtime":
    # The real package checks for a second accelerator before loading anything else; this is its message.
    raise RuntimeError(
        "Two accelerators cannot be used at the same time in PyTorch: npu and cuda. You can install the cpu version"
        " of PyTorch to use your npu device, or use the cuda device with 'export TORCH_DEVICE_BACKEND_AUTOLOAD=0'.\n"
        f"[ERROR] {time.strftime('%Y-%m-%d-%H:%M:%S', time.localtime())} (PID:{os.getpid()}, Device:-1, RankID:-1)"
        " ERR00007 PTA feature not supported"
    )

# The extension comes first, as in the real package: without CANN, importing it is what fails.
from torch_npu import _C, npu, optim, profiler, utils  # noqa: E402, F401
from torch_npu.version import __version__ as __version__  # noqa: E402
