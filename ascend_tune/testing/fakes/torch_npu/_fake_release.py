"""Fake only (the real package has no such module): which torch-npu release the fake presents.

torch-npu ``X.Y.Z`` is built for torch ``X.Y.Z``, so the fake follows the torch it sits on: on torch 2.1 and 2.2
(there is no torch-npu 2.2) it is torch-npu 2.1.0.post8, the oldest 2.1.0 release on the registry, with that
release's API where it differs (profiler, ``_ExperimentalConfig``, CANN version helpers); on later torches it is
``X.Y.0`` with the newest API. ``tests/data/torch_npu_api.json`` (made by ``tools/torch_npu_api.py`` from the real
wheels) is what ``tests/test_fake_torch_npu_api.py`` checks these signatures against.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, Callable

import torch

_TORCH = tuple(int(part) for part in torch.__version__.split("+")[0].split(".")[:2])
API_2_1 = _TORCH < (2, 3)
RELEASE = "2.1.0.post8" if API_2_1 else f"{_TORCH[0]}.{_TORCH[1]}.0"


def narrowed(fn: Callable, keep: tuple, **defaults: Any) -> Callable:
    """``fn`` with an older release's signature: only the parameters in ``keep`` (in that order), ``defaults``
    changed; a parameter the older release lacks raises TypeError there as it does here."""
    old = inspect.signature(fn)
    params = [old.parameters[name] for name in keep]
    params = [p.replace(default=defaults[p.name]) if p.name in defaults else p for p in params]
    sig = old.replace(parameters=params)

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        bound = sig.bind(*args, **kwargs)
        bound.apply_defaults()
        return fn(**bound.arguments)

    wrapper.__signature__ = sig  # type: ignore[attr-defined]
    return wrapper
