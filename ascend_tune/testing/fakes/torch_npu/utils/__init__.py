"""Fake ``torch_npu.utils``: the tensor-combining helpers behind the fused optimizers, and the CANN version."""

from torch_npu._fake_release import API_2_1

from .combine_tensors import get_part_combined_tensor, npu_combine_tensors

__all__ = ["npu_combine_tensors", "get_part_combined_tensor"]
if not API_2_1:  # torch-npu 2.1.0 has no get_cann_version
    from torch_npu.npu.utils import get_cann_version  # noqa: F401

    __all__.append("get_cann_version")
