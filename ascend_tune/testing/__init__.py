"""What tests here and downstream share: the fake torch_npu, tiny models, and ``assert_loss_aligned``."""

from typing import Any

__all__ = ["assert_loss_aligned"]


def __getattr__(name: str) -> Any:
    # lazy: the fakes and models must not pull numpy / the analysis code in with them
    if name == "assert_loss_aligned":
        from .alignment import assert_loss_aligned

        return assert_loss_aligned
    raise AttributeError(f"module 'ascend_tune.testing' has no attribute {name!r}")
