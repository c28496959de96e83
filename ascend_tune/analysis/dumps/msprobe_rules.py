"""msprobe's pass / warning / error rules for one op's compare rows (mindstudio-probe 26.2,
``msprobe/core/compare/indicator_analysis``), so the CSV's ``Result`` column reads as msprobe's would.

A row is an *output* row when its name holds ``.output.``; every other row (arguments, parameters, parameter
gradients) counts as input. Rules, each raising a row to error or warning:

- both modes: NPU max/min inf/NaN while the bench's are finite; requires_grad differs; a non-tensor argument
  differs (a number, string or bool: ``approximate='tanh'`` against ``'none'``; msprobe's check compares any
  ``<class ...>`` scalar); dtype differs; shape differs, size-1 dimensions aside, unless a backward gradient holds the
  same elements in another view (error);
- statistics: the largest input NormRelativeErr < 0.1 and an output's > 0.5 (error); the largest output
  NormRelativeErr more than 10x the largest input's, or > 0.1 when the inputs' is 0 (warning, first output row);
- tensor: every input's One Thousandth Err Ratio > 0.9 while an output's smallest < 0.1 (error, first output row);
  the smallest input Cosine > 0.9 and more than 0.1 above the smallest output Cosine (warning, first output row).

Ops named ``empty``, ``to``, ``__setitem__`` (and the other no-data APIs) are not judged; collectives that
scatter their input (``_reduce_scatter_base`` ...) are judged on their outputs only. Differences smaller than these
thresholds pass: catching small drifts is the first-divergence rule's job (see :mod:`.compare`).
"""

from __future__ import annotations

import math

_IGNORE_ALL = {"empty", "empty_like", "numpy", "to", "__setitem__", "empty_with_format", "new_empty_strided",
               "new_empty", "empty_strided"}
_IGNORE_INPUT = {"_reduce_scatter_base", "_all_gather_base", "all_to_all_single", "batch_isend_irecv"}

INF_NAN = "error: There is nan/inf/-inf in the maximum or minimum value of NPU."
NORM_ERR = "error: The NormRelativeErr of output is greater than 0.5."
THOUSANDTH = "error: The input/parameters of One Thousandth Err Ratio > 0.9 while the output < 0.6."
REQUIRES_GRAD = "error: The Required_Grad of NPU and Bench are inconsistent"
SCALAR = "error: The scalar parameters of NPU and Bench are inconsistent."
DTYPE = "error: The dtype of NPU and Bench are inconsistent."
SHAPE = "error: The shape of NPU and Bench are inconsistent."
NORM_WARN = "warning: The norm relative error of output is 10 times that of input."
COSINE_WARN = "warning: The input/parameters of Cosine > 0.9, and input/parameters - output > 0.1"
_LEVEL = {"pass": 0, "warning": 1, "error": 2}


def msprobe_results(op_name: str, rows: list, tensor_mode: bool) -> list:
    """(result, messages) for each row of one op.

    ``rows``: dicts with ``name`` (the row's full name), ``target`` / ``base`` (leaves or None), ``norm_rel``
    (NormRelativeErr as a fraction or None), ``cosine`` and ``thousandth`` (tensor mode, or None), and
    ``same_elements`` (True when the shapes differ only by a view).
    """
    results = [["pass", []] for _ in rows]
    if not rows:
        return []
    parts = op_name.split(".")
    api = parts[1] if len(parts) > 1 else ""
    if api in _IGNORE_ALL:
        return [(r, tuple(m)) for r, m in results]
    outputs = [i for i, row in enumerate(rows) if ".output." in row["name"]]
    inputs = [i for i in range(len(rows)) if i not in outputs]
    judged = outputs if api in _IGNORE_INPUT else list(range(len(rows)))

    def mark(i: int, level: str, message: str) -> None:
        if _LEVEL[level] > _LEVEL[results[i][0]]:
            results[i][0] = level
        results[i][1].append(message)

    for i in judged:
        t, b = rows[i]["target"], rows[i]["base"]
        if t is None or b is None:
            continue
        if t.kind == "tensor" and b.kind == "tensor" and t.has_stats and b.has_stats:
            if all(math.isfinite(v) for v in b.stats[:2]) and not all(math.isfinite(v) for v in t.stats[:2]):
                mark(i, "error", INF_NAN)
        if t.requires_grad is not None and b.requires_grad is not None and t.requires_grad != b.requires_grad:
            mark(i, "error", REQUIRES_GRAD)
        if i in inputs and api not in _IGNORE_INPUT and t.kind == b.kind and t.kind in ("scalar", "other") \
                and t.value != b.value:
            mark(i, "error", SCALAR)
        if t.dtype != b.dtype and "qkv" not in rows[i]["name"] and "gate_up" not in rows[i]["name"]:
            mark(i, "error", DTYPE)
        if t.shape is not None and b.shape is not None and _squeezed(t.shape) != _squeezed(b.shape) \
                and not rows[i].get("same_elements"):
            mark(i, "error", SHAPE)
    if api in _IGNORE_INPUT or not outputs:
        return [(r, tuple(m)) for r, m in results]
    if tensor_mode:
        in_ratio = _extreme(rows, inputs, "thousandth", low=True)
        out_ratio = _extreme(rows, outputs, "thousandth", low=True)
        if in_ratio > 0.9 and out_ratio < 0.1:
            mark(outputs[0], "error", THOUSANDTH)
        in_cos = _extreme(rows, inputs, "cosine", low=True)
        out_cos = _extreme(rows, outputs, "cosine", low=True)
        if in_cos > 0.9 and in_cos - out_cos > 0.1:
            mark(outputs[0], "warning", COSINE_WARN)
    else:
        in_norm = _extreme(rows, inputs, "norm_rel", low=False)
        out_norm = _extreme(rows, outputs, "norm_rel", low=False)
        if in_norm < 0.1:
            for i in outputs:
                value = rows[i]["norm_rel"]
                if value is not None and math.isfinite(value) and abs(value) > 0.5:
                    mark(i, "error", NORM_ERR)
        if (in_norm == 0 and out_norm > 0.1) or (in_norm > 0 and out_norm / in_norm > 10):
            mark(outputs[0], "warning", NORM_WARN)
    return [(r, tuple(m)) for r, m in results]


def _squeezed(shape: tuple) -> tuple:
    """msprobe's squeeze_shape_str: size-1 dimensions do not count (``[1, 217, 1, 896]`` is ``[217, 896]``)."""
    return tuple(d for d in shape if d != 1)


def _extreme(rows: list, picked: list, key: str, low: bool) -> float:
    """msprobe's get_min_or_max_value: the min (default 1) or max (default 0) of a metric, skipping unknowns."""
    value = 1.0 if low else 0.0
    for i in picked:
        v = rows[i][key]
        if v is None or not math.isfinite(v) or v == 0 and not low:
            continue
        value = min(value, v) if low else max(value, abs(v))
    return value
