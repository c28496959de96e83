"""Fake ``torch_npu.npu.amp``: the NPU gradient scaler."""

from .grad_scaler import GradScaler

__all__ = ["GradScaler"]
