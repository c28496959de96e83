"""msprobe's JSON form of an op's arguments and results; each tensor's statistics are queued on its device.

A tensor becomes ``{type, dtype, shape, Max, Min, Mean, Norm, requires_grad[, md5][, data_name]}`` with the four
statistics filled in by :meth:`Records.resolve` at step end (one read-back); a DTensor is this rank's local shard
(``shape`` is the shard's, ``dtensor`` holds the global shape, the placements and the mesh;
:func:`~.stats.local_shard`); Python scalars become
``{type, value}``; lists, tuples and dicts keep their shape (a namedtuple becomes a dict, as in msprobe); what
msprobe cannot describe is ``null``. In tensor mode each tensor is also saved as ``<stem>.pt``.
"""

from __future__ import annotations

import os
from typing import Any, Optional

import torch

from ..formats.writing import open_atomic
from ..recording.frames import internal
from . import stats

MAX_DEPTH = 32
_PLAIN = (bool, int, float, str)


class Records:
    """Builds the records of one step and resolves their statistics at its end."""

    def __init__(self, summary_mode: str, tensor_dir: Optional[str]):
        self._stats = stats.StatsBuffer()
        self._pending: list = []
        self._md5 = summary_mode == "md5"
        self._tensor_dir = tensor_dir
        self.sharded = 0  # DTensors described by their local shard

    def describe(self, value: Any, stem: str, depth: int = 0) -> Any:
        """The JSON form of ``value``; ``stem`` names its tensor files (``<entry>.<input|output>.<index>``)."""
        if isinstance(value, torch.Tensor):
            return self._tensor(value, stem)
        kind = type(value)
        if kind in _PLAIN:
            return {"type": kind.__name__, "value": value}
        if value is None or depth > MAX_DEPTH:
            return None
        if kind is list or kind is tuple:
            if self._tensor_dir is None:  # no files to name: skip building each element's stem
                return [self.describe(v, stem, depth + 1) for v in value]
            return [self.describe(v, f"{stem}.{i}", depth + 1) for i, v in enumerate(value)]
        if isinstance(value, (bool, int, float, str)):
            return {"type": kind.__name__, "value": value}
        if isinstance(value, torch.Size):
            return {"type": "torch.Size", "value": [int(v) for v in value]}
        if isinstance(value, torch.dtype):
            return {"type": "torch.dtype", "value": str(value)}
        if isinstance(value, torch.device):
            return {"type": "torch.device", "value": str(value)}
        if isinstance(value, torch.memory_format):
            return {"type": "torch.memory_format", "format": str(value)}
        if isinstance(value, slice):
            return {"type": "slice", "value": [_int_or_none(v) for v in (value.start, value.stop, value.step)]}
        if value is Ellipsis:
            return {"type": "ellipsis", "value": "..."}
        if isinstance(value, tuple) and hasattr(value, "_fields"):
            value = {field: getattr(value, field) for field in value._fields}
        if isinstance(value, dict):
            return {str(k): self.describe(v, f"{stem}.{k}", depth + 1) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [self.describe(v, f"{stem}.{i}", depth + 1) for i, v in enumerate(value)]
        if hasattr(value, "item") and hasattr(value, "dtype"):  # numpy scalars
            try:
                return {"type": type(value).__name__, "value": value.item()}
            except Exception:  # a numpy object that is not a scalar after all: undescribed, as in msprobe
                return None
        return None

    def resolve(self) -> None:
        """Read every queued statistic back (once) and write it into its record."""
        values = self._stats.read()
        for record, slot in self._pending:
            stats.fill(record, slot, values)
        self._pending = []

    def _tensor(self, tensor: torch.Tensor, stem: str) -> dict:
        tensor, layout = stats.local_shard(tensor)
        record = {
            "type": "torch.Tensor",
            "dtype": str(tensor.dtype),
            "shape": [int(s) for s in tensor.shape],
            "Max": None,
            "Min": None,
            "Mean": None,
            "Norm": None,
            "requires_grad": bool(tensor.requires_grad),
        }
        if layout is not None:
            record["dtensor"] = layout
            self.sharded += 1
        slot = self._stats.add(tensor)
        if slot is not None:
            self._pending.append((record, slot))
        if self._md5:
            record["md5"] = stats.crc32(tensor)
        if self._tensor_dir is not None and tensor.numel() and tensor.device.type != "meta":
            data_name = f"{stem}.pt"
            with internal(), torch.no_grad(), open_atomic(os.path.join(self._tensor_dir, data_name)) as fh:
                torch.save(tensor.detach().to("cpu", copy=True), fh)  # whole or absent on a full disk
            record["data_name"] = data_name
        return record


def _int_or_none(value: Any) -> Optional[int]:
    try:
        return None if value is None else int(value)
    except (TypeError, ValueError):
        return None
