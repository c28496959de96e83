"""Tensor statistics computed on the tensor's device and read back once per step.

Each tensor is reduced on its own device to 0-d results that stay there (aminmax, then a sum and a sum of squares,
the two cheapest full passes; Mean and Norm are finished on the host); at the step's end they are stacked and
copied to the host once per (device, kind) group. Per-op ``.item()`` calls,
as msprobe makes them, sync the device at every op and are what change numerics ("the NaN disappears when the tool
is on") and make a dump tens of times slower than the step.

A ``DTensor`` (FSDP2, tensor parallel) is described by this rank's local shard (:func:`local_shard`): its statistics
need no collective, work for every placement (a ``Partial`` sum from ``clip_grad_norm_`` included) and are what
this rank holds; the dump says so in its metadata.

Conventions follow msprobe's dump.json: integer tensors have Max / Min only (Mean / Norm null), a bool tensor's
Max is ``any`` and Min is ``all``, a 0-d tensor's four values are the value itself, empty tensors have none.
"""

from __future__ import annotations

import math
import weakref
import zlib
from typing import Optional

import torch

from ..recording.frames import internal

_FLOAT, _DOUBLE, _INT, _BOOL = "float", "double", "int", "bool"
# 0-d tensors: one value each, kept in a type that holds it exactly
_SCALARS = {"scalar_float": torch.float32, "scalar_double": torch.float64, "scalar_int": torch.int64}


_DOT_FROM = 1 << 16  # elements
_WIDTH = {_FLOAT: 4, _DOUBLE: 4, _INT: 2, _BOOL: 2, "scalar_float": 1, "scalar_double": 1, "scalar_int": 1}


class StatsBuffer:
    """Collects per-tensor statistics during a step; :meth:`read` brings them to the host in one go.

    The reductions' 0-d results are kept as they are and stacked once per group at :meth:`read`: one stack per
    step instead of one per tensor. A tensor seen again unchanged (an op's output is the next op's input; a weight
    is passed to each call) reuses its slot: same object, same version counter (in-place ops and writes through
    views bump it). The object is held weakly, so a freed tensor whose id is reused is not mistaken for it.
    """

    def __init__(self) -> None:
        self._groups: dict = {}
        self._seen: dict = {}

    def add(self, tensor: torch.Tensor) -> Optional[tuple]:
        """Queue ``tensor``'s statistics; returns a slot for :func:`fill`, or None (nothing to compute).

        The caller keeps torch function modes from seeing these reductions (the engine runs them inside its mode
        handler, where torch has popped the mode, or under ``frames.internal()``); a tensor that requires grad is
        detached first, so no graph is built.
        """
        try:
            version = tensor._version
        except RuntimeError:  # inference tensors keep no version counter: never reused
            version = None
        if version is not None:
            seen = self._seen.get(id(tensor))
            if seen is not None and seen[1] == version and seen[0]() is tensor:
                return seen[2]
        slot = self._compute(tensor.detach() if tensor.requires_grad else tensor)
        if version is not None:
            self._seen[id(tensor)] = (weakref.ref(tensor), version, slot)
        return slot

    def _compute(self, t: torch.Tensor) -> Optional[tuple]:
        numel = t.numel()
        if not numel or t.layout is not torch.strided or t.is_meta or t.is_quantized:
            return None
        dtype = t.dtype
        if dtype.is_complex:
            t = t.abs()
            dtype = t.dtype
        squared = False
        if not t.dim():
            if dtype is torch.float64:
                kind = "scalar_double"
            elif dtype.is_floating_point:
                kind = "scalar_float"
            else:
                kind = "scalar_int"
            values = (t.to(_SCALARS[kind]),)
        elif dtype is torch.bool:
            kind, values = _BOOL, (t.any(), t.all())
        elif dtype.is_floating_point:
            # a sum rather than a mean, and a large tensor's sum of squares rather than its norm, are the cheapest
            # passes after aminmax; Mean (and then Norm) are finished on the host at read time
            kind = _DOUBLE if dtype is torch.float64 else _FLOAT
            acc = torch.float64 if kind == _DOUBLE else torch.float32
            low, high = torch.aminmax(t)
            if dtype is not acc:  # half precision: reduce into fp32, as a sum of many halves overflows or drifts
                values = (high.to(acc), low.to(acc), t.sum(dtype=acc), torch.linalg.vector_norm(t, dtype=acc))
            elif numel > _DOT_FROM and t.is_contiguous():  # a BLAS dot is the cheapest pass over a large tensor
                squared = True
                flat = t.view(-1)
                values = (high, low, flat.sum(), torch.dot(flat, flat))
            else:  # a small tensor: fewer calls beat faster passes
                values = (high, low, t.sum(), torch.linalg.vector_norm(t))
        else:
            kind = _INT
            low, high = torch.aminmax(t)
            values = (high.to(torch.int64), low.to(torch.int64))
        key = (t.device, kind)
        group = self._groups.get(key)
        if group is None:
            group = self._groups[key] = []
        index = len(group)
        group.extend(values)
        return key, index, numel, squared

    def read(self) -> dict:
        """All queued statistics on the host: ``{group: [values...]}``; one stack and one transfer per group."""
        out = {}
        with internal(), torch.no_grad():
            for key, values in self._groups.items():
                out[key] = torch.stack(values).cpu().tolist()
        self._groups = {}
        self._seen = {}
        return out


def local_shard(tensor: torch.Tensor) -> tuple:
    """``(local tensor, layout)``: a DTensor's ``to_local()`` and ``{"global_shape", "placements", "mesh"}``; any
    other tensor as it is, with None."""
    if type(tensor) is torch.Tensor or not any(c.__name__ == "DTensor" for c in type(tensor).__mro__):
        return tensor, None
    with internal(), torch.no_grad():
        local = tensor.to_local()
    layout = {
        "global_shape": [int(s) for s in tensor.shape],
        "placements": [str(p) for p in tensor.placements],
        "mesh": [int(s) for s in tensor.device_mesh.shape],
    }
    return local, layout


def fill(record: dict, slot: Optional[tuple], values: dict) -> None:
    """Write the statistics read back for ``slot`` into a tensor record (Max, Min, Mean, Norm)."""
    if slot is None:
        return
    key, index, numel, squared = slot
    kind = key[1]
    row = values[key][index:index + _WIDTH[kind]]
    if kind in _SCALARS:
        value = bool(row[0]) if record.get("dtype") == "torch.bool" else row[0]
        record.update(Max=value, Min=value, Mean=value, Norm=value)
    elif kind == _BOOL:
        record.update(Max=bool(row[0]), Min=bool(row[1]))
    elif kind == _INT:
        record.update(Max=int(row[0]), Min=int(row[1]))
    else:
        high, low, total, norm = row
        if squared:
            if math.isinf(norm) and math.isfinite(high) and math.isfinite(low):
                norm = None  # the sum of squares overflowed (|values| > ~1.8e19 in fp32): the norm is unknown
            elif norm >= 0:
                norm = math.sqrt(norm)  # nan stays nan
        record.update(Max=high, Min=low, Mean=total / numel, Norm=norm)


def crc32(tensor: torch.Tensor) -> Optional[str]:
    """CRC-32 of the tensor's raw bytes, as msprobe's ``summary_mode="md5"`` stores it (a host copy: it syncs)."""
    if tensor.numel() == 0 or tensor.device.type == "meta":
        return None
    with internal(), torch.no_grad():
        data = tensor.detach().to("cpu").contiguous().reshape(-1).view(torch.uint8)
        return f"{zlib.crc32(data.numpy().tobytes()):08x}"
