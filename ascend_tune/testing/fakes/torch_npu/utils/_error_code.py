"""The error-code suffix the real package appends to its exception messages (``pta_error(ErrCode.VALUE)``)."""

from __future__ import annotations

import os
import time
from enum import Enum


class _SubModuleID(Enum):
    PTA = 0
    OPS = 1
    DIST = 2
    GRAPH = 3
    PROF = 4


class ErrCode(Enum):
    """The real package's error codes: (number, text)."""

    SUCCESS = (0, "success")
    PARAM = (1, "invalid parameter")
    TYPE = (2, "invalid type")
    VALUE = (3, "invalid value")
    PTR = (4, "invalid pointer")
    INTERNAL = (5, "internal error")
    MEMORY = (6, "memory error")
    NOT_SUPPORT = (7, "feature not supported")
    NOT_FOUND = (8, "resource not found")
    UNAVAIL = (9, "resource unavailable")
    SYSCALL = (10, "system call failed")
    ACL = (100, "call acl api failed")

    @property
    def code(self) -> int:
        """The error's number."""
        return self.value[0]

    @property
    def msg(self) -> str:
        """The error's text."""
        return self.value[1]


def _format_error_msg(submodule: _SubModuleID, error: ErrCode) -> str:
    # TORCH_NPU_COMPACT_ERROR_OUTPUT=1 drops the suffix in the real package too.
    if os.getenv("TORCH_NPU_COMPACT_ERROR_OUTPUT", "0") == "1":
        return ""
    stamp = time.strftime("%Y-%m-%d-%H:%M:%S", time.localtime())
    code = f"ERR{submodule.value:0>2d}{error.code:0>3d}"
    return f"\n[ERROR] {stamp} (PID:{os.getpid()}, Device:-1, RankID:-1) {code} {submodule.name} {error.msg}"


def pta_error(error: ErrCode) -> str:
    """The suffix for errors of the PyTorch adapter itself."""
    return _format_error_msg(_SubModuleID.PTA, error)


def prof_error(error: ErrCode) -> str:
    """The suffix for errors of the profiler."""
    return _format_error_msg(_SubModuleID.PROF, error)
