"""Fake of ``torch_npu.utils.combine_tensors``: move tensors into one flat buffer so one kernel updates them all.

As in the real package, each tensor keeps its identity but its storage becomes a slice of the combined buffer, so
in-place writes through either side are seen by the other. This is what makes the fused optimizers keep updating
the old buffer when someone replaces ``p.grad`` (``set_to_none``), a behaviour worth reproducing in tests.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch_npu.utils._error_code import ErrCode, pta_error

__all__ = ["npu_combine_tensors", "get_part_combined_tensor"]


def npu_combine_tensors(list_of_tensor: list[torch.Tensor], require_copy_value: bool = True) -> Optional[torch.Tensor]:
    """Rebase every tensor onto one new flat buffer (keeping values unless told not to) and return the buffer."""
    if len(list_of_tensor) == 0:
        return None
    if any(t is None for t in list_of_tensor):
        raise RuntimeError("Tensors to combine must not have `None`." + pta_error(ErrCode.PARAM))
    dtype = list_of_tensor[0].dtype
    for tensor in list_of_tensor:
        if tensor.dtype != dtype:
            raise RuntimeError("Tensors to combine must have the same dtype." + pta_error(ErrCode.TYPE))
        if not tensor.is_contiguous():
            raise RuntimeError("Tensors to combine must be contiguous." + pta_error(ErrCode.VALUE))
    total = sum(t.numel() for t in list_of_tensor)
    if total == 0:
        return None
    combined = torch.zeros(total, dtype=dtype, device=list_of_tensor[0].device)
    offset = 0
    with torch.no_grad():
        for tensor in list_of_tensor:
            saved = tensor.clone() if require_copy_value else None
            tensor.set_(combined.untyped_storage(), offset, tensor.size(), tensor.stride())
            if saved is not None:
                tensor.copy_(saved)
            offset += tensor.numel()
    return combined


def get_part_combined_tensor(combined_tensor: Optional[torch.Tensor], index: int, size: int) -> Optional[torch.Tensor]:
    """The flat slice ``[index, index + size)`` of a combined buffer, sharing its storage."""
    if combined_tensor is None or size == 0:
        return None
    if index + size > combined_tensor.numel():
        raise RuntimeError(
            f"(index + size) ({index + size}) > torch_npu.get_storage_size(combined_tensor) ({combined_tensor.numel()})"
            + pta_error(ErrCode.VALUE)
        )
    return combined_tensor[index : index + size]
