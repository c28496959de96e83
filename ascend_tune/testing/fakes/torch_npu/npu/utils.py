"""Fake ``torch_npu.npu.utils``: device selection, synchronisation and version queries."""

from __future__ import annotations

from typing import Any, Union

import torch
import torch_npu
from torch_npu import _C
from torch_npu._fake_release import API_2_1, narrowed
from torch_npu.utils._error_code import ErrCode, pta_error

__all__ = ["synchronize", "set_device", "current_device", "get_cann_version", "is_bf16_supported"]

_Device = Union[torch.device, str, int, None]


def _get_device_index(device: Any, optional: bool = False, allow_cpu: bool = False) -> int:
    """The device index of an int, ``"npu"``/``"npu:N"`` string or torch.device; the current one when unspecified."""
    if isinstance(device, int):
        return device
    if isinstance(device, torch.device):
        # Without the real backend torch cannot even build torch.device("npu"), so only "cpu" can reach here.
        device_type, index = device.type, device.index
    elif isinstance(device, str):
        device_type, _, index_text = device.partition(":")
        index = int(index_text) if index_text else None
    elif device is None:
        device_type, index = "npu", None
    else:
        raise ValueError(f"Expected a torch.device with a specified index or an integer, but got: {device}")
    if device_type == "cpu" and allow_cpu:
        return -1
    if device_type != "npu":
        raise ValueError(f"Expected a npu device, but got: {device}" + pta_error(ErrCode.VALUE))
    if index is not None:
        return index
    if not optional:
        raise ValueError(f"Expected a torch.device with a specified index or an integer, but got: {device}")
    return current_device()


def set_device(device: _Device) -> None:
    """Select the NPU that later work runs on."""
    device_id = _get_device_index(device, optional=True)
    if device_id < 0:
        return
    torch_npu.npu._lazy_init()
    if device_id >= torch_npu.npu.device_count():
        raise RuntimeError(
            f"SetDevice: aclrtSetDevice({device_id}) failed, error code is 107001 (invalid device id)"
            + pta_error(ErrCode.ACL)
        )
    _C._npu_setDevice(device_id)


def current_device() -> int:
    """The index of the selected NPU (0 until one is set)."""
    torch_npu.npu._lazy_init()
    return _C._npu_getDevice()


def synchronize(device: _Device = None) -> None:
    """Wait for all work queued on an NPU; on the fake, counts the call (``torch_npu.npu._synchronize_calls``)."""
    torch_npu.npu._lazy_init()
    if device is not None:
        device_id = _get_device_index(device, optional=True)
        if not 0 <= device_id < torch_npu.npu.device_count():
            raise RuntimeError(f"synchronize: invalid device id {device_id}" + pta_error(ErrCode.VALUE))
    _C._npu_synchronize()


def get_cann_version(module: str = "CANN") -> str:
    """The installed version of a CANN component (``CANN``, ``RUNTIME``, ``COMPILER``, ``HCCL``, ...)."""
    return _C._get_cann_version(module)


def is_bf16_supported(including_emulation: bool = False) -> bool:
    """Whether the chip computes in bfloat16 (Atlas A2 and later do)."""
    return _C._npu_getDeviceName().startswith(("Ascend910B", "Ascend910_93"))


if API_2_1:
    # torch-npu 2.1.0.post8 has no get_cann_version (CANN's version is only in its install folder), and
    # is_bf16_supported takes no argument
    del get_cann_version
    __all__.remove("get_cann_version")
    is_bf16_supported = narrowed(is_bf16_supported, ())
