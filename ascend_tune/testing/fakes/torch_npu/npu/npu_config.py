"""Fake ``torch_npu.npu.npu_config``: runtime options, compile mode and the write-only ``config`` object."""

from __future__ import annotations

from typing import Any

import torch_npu
from torch_npu import _C
from torch_npu.utils._error_code import ErrCode, pta_error

__all__ = ["set_option", "set_compile_mode", "is_jit_compile_false"]


def set_option(option: dict) -> None:
    """Set runtime options given as a ``{name: value}`` dict."""
    if not isinstance(option, dict):
        raise TypeError("npu option must be a dict." + pta_error(ErrCode.TYPE))
    _C._npu_setOption(option)


def set_compile_mode(jit_compile: bool = False) -> None:
    """Turn online operator compilation on or off (``jit_compile=False`` uses prebuilt binary kernels)."""
    # Queued kernels were built under the old mode, so the real call drains them first once the runtime is up.
    if torch_npu.npu.is_initialized():
        torch_npu.npu.synchronize()
    _C._npu_setOption({"jitCompile": "enable" if jit_compile else "disable"})


def is_jit_compile_false() -> bool:
    """Whether online compilation is off (initialises the runtime, as the real call does)."""
    torch_npu.npu._lazy_init()
    return _C._npu_is_jit_compile_false()


class _npuConfig:  # noqa: N801  (the real class name)
    """``torch_npu.npu.config``: assigning ``allow_internal_format`` sets a runtime option.

    As in the real package, the value is not stored on the object, so reading it back raises AttributeError; the
    option is visible in ``torch_npu._C._options["ALLOW_INTERNAL_FORMAT"]``.
    """

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "allow_internal_format":
            _C._npu_setOption({"ALLOW_INTERNAL_FORMAT": "enable" if value else "disable"})
