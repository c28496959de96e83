"""Fake ``torch_npu.utils``: the tensor-combining helpers behind the fused optimizers, and the CANN version."""

from torch_npu.npu.utils import get_cann_version

from .combine_tensors import get_part_combined_tensor, npu_combine_tensors

__all__ = ["npu_combine_tensors", "get_part_combined_tensor", "get_cann_version"]
