"""The tensors in a call's arguments or results."""

from __future__ import annotations

from typing import Any

import torch

MAX_DEPTH = 32  # nesting past this is no argument structure a recorder follows
_PLAIN = (bool, int, float, str)


def tensors_in(value: Any, depth: int = 0) -> list:
    """The tensors in an argument structure, in order."""
    if isinstance(value, torch.Tensor):
        return [value]
    if depth > MAX_DEPTH or type(value) in _PLAIN or value is None:
        return []
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        out: list = []
        for item in value:
            if isinstance(item, torch.Tensor):
                out.append(item)
            elif isinstance(item, (list, tuple, dict)) and item:  # an empty one (no kwargs) holds none
                out.extend(tensors_in(item, depth + 1))
        return out
    return []
