"""What tests here and downstream share: the fake torch_npu, tiny models, and ``assert_loss_aligned``."""

from ..lazy import lazy_names

__all__ = ["assert_loss_aligned"]

# lazy: the fakes and models must not pull numpy / the analysis code in with them
__getattr__, __dir__ = lazy_names(__name__, {"assert_loss_aligned": "ascend_tune.testing.alignment"})
