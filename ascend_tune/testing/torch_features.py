"""The torch features tests need that differ between torch 2.1 and 2.14, each detected by feature, not by version.

Each ``*_missing()`` returns None when this torch has the feature, else the reason to skip, naming the feature and
the first torch that has it; the lookups return what to call (found where this torch keeps it) or None. The
runtime keeps its own checks beside the code that needs them (``capture.grad_scaler_classes``, the profiler's
step naming, ``recording.modules.global_forward_hook``); these are for tests, here and downstream.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any, Callable, Optional

import torch


def fused_on_cpu_missing(optimizer_class: type) -> Optional[str]:
    """Why torch's ``fused=True`` ``optimizer_class`` does not step CPU tensors here; None when it does.

    Found as the tuning finds it, by one step on a tiny tensor: ``SGD(fused=...)`` is first in torch 2.3,
    ``Adagrad(fused=...)`` in 2.4, and the CPU kernels of all of them arrived in torch 2.4 (before, ``fused=True``
    runs on CUDA and torch_npu's devices only).
    """
    if "fused" not in inspect.signature(optimizer_class).parameters:
        first = {"SGD": "2.3", "Adagrad": "2.4"}.get(optimizer_class.__name__)
        since = f" (first in torch {first})" if first else ""
        return f"torch {torch.__version__}'s {optimizer_class.__name__} has no fused= argument{since}"
    param = torch.zeros(2, requires_grad=True)
    param.grad = torch.ones(2)
    try:
        optimizer_class([param], lr=0.1, fused=True).step()
    except Exception as exc:  # torch raises RuntimeError for a device its fused kernel does not run on
        return (f"torch {torch.__version__} has no fused {optimizer_class.__name__} kernel for CPU tensors (torch 2.4 "
                f"is the first with one): {type(exc).__name__}: {str(exc).splitlines()[0]}")
    return None


def cpu_grad_scaler_missing() -> Optional[str]:
    """None when a GradScaler runs on CPU tensors: ``torch.amp.GradScaler("cpu")``, first in torch 2.3."""
    if getattr(torch.amp, "GradScaler", None) is None:
        return (f"torch {torch.__version__} has no GradScaler for the CPU (torch.amp.GradScaler('cpu') is first in "
                "torch 2.3; before, only torch.cuda.amp.GradScaler)")
    return None


def _first(paths: tuple) -> Optional[Any]:
    for module, name in paths:
        try:
            return getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError):
            continue
    return None


def find_fully_shard() -> Optional[Callable]:
    """FSDP2's ``fully_shard``: ``torch.distributed.fsdp`` from torch 2.6, ``torch.distributed._composable.fsdp``
    from 2.3; None before."""
    return _first((("torch.distributed.fsdp", "fully_shard"), ("torch.distributed._composable.fsdp", "fully_shard")))


def fsdp2_missing() -> Optional[str]:
    """None when FSDP2 (``fully_shard``) is there."""
    if find_fully_shard() is None:
        return (f"torch {torch.__version__} has no FSDP2 fully_shard (torch.distributed._composable.fsdp from torch "
                "2.3, torch.distributed.fsdp from 2.6)")
    return None


def find_dtensor() -> Optional[type]:
    """``DTensor``: public as ``torch.distributed.tensor`` from torch 2.5, ``torch.distributed._tensor`` before."""
    return _first((("torch.distributed.tensor", "DTensor"), ("torch.distributed._tensor", "DTensor")))


def find_set_stance() -> Optional[Callable]:
    """``torch.compiler.set_stance`` (``force_eager`` runs a compiled model eagerly), first in torch 2.6."""
    return getattr(getattr(torch, "compiler", None), "set_stance", None)


def set_stance_missing() -> Optional[str]:
    """None when ``torch.compiler.set_stance`` is there."""
    if find_set_stance() is None:
        return f"torch {torch.__version__} has no torch.compiler.set_stance (first in torch 2.6)"
    return None


def transformers_missing() -> Optional[str]:
    """None when transformers is installed and uses this torch; transformers 5 runs on torch 2.6 or later and,
    on an older one, imports with its PyTorch models turned off."""
    try:
        import transformers
        from transformers.utils import is_torch_available
    except Exception as exc:  # not installed, or broken
        return f"transformers cannot be imported ({type(exc).__name__}: {exc})"
    if not is_torch_available():
        return (f"transformers {transformers.__version__} does not run its models on torch {torch.__version__} "
                "(transformers 5 needs torch 2.6 or later)")
    return None


def sdpa_kernel_missing() -> Optional[str]:
    """None when ``torch.nn.attention.sdpa_kernel`` (choosing the attention kernel) is there: first in torch 2.3."""
    if _first((("torch.nn.attention", "sdpa_kernel"),)) is None:
        return f"torch {torch.__version__} has no torch.nn.attention.sdpa_kernel (first in torch 2.3)"
    return None


def drop_library(lib: Any) -> None:
    """Take a ``torch.library.Library``'s kernel overrides off the dispatcher again (``Library._destroy`` from torch
    2.2; on torch 2.1 dropping the C++ library object does it)."""
    if hasattr(lib, "_destroy"):
        lib._destroy()
    else:
        torch.library._impls.difference_update(lib._op_impls)
        lib.m = None


def collectives_in_modes_missing() -> Optional[str]:
    """None when torch.distributed's collectives reach torch function modes (``__torch_function__``, torch 2.7)."""
    from ..recording.catalog import collectives_unseen

    return collectives_unseen()
