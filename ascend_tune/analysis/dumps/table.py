"""A dump comparison as msprobe's compare CSV (same columns, same cell spellings) and as a JSON summary.

msprobe's names stay: *NPU* columns describe TARGET, *Bench* columns BASE. The metric columns come from
:data:`.metrics.COLUMNS`, the one map from a metric's field to its column.
"""

from __future__ import annotations

import csv
import io
import json
import math
from typing import Any, Optional

from .compare import CompareRow, DumpComparison
from .differences import COLUMNS, STATISTICS_METRICS, TENSOR_METRICS, StatsDiff, TensorMetrics, columns_of
from .model import Leaf, Stats

HEAD = ["NPU Name", "Bench Name", "NPU Dtype", "Bench Dtype", "NPU Tensor Shape", "Bench Tensor Shape",
        "NPU Requires_grad", "Bench Requires_grad"]
STATISTICS = columns_of(StatsDiff)
TENSOR = columns_of(TensorMetrics)
VALUES = [f"{side} {COLUMNS[name]}" for side in ("NPU", "Bench") for name in Stats._fields]
TAIL = ["Requires_grad Consistent", "Result", "Err_message", "NPU_Stack_Info"]
NO_BENCH = "No bench data matched."


def columns(mode: str) -> list:
    """The CSV header of a comparison mode, as msprobe writes it."""
    if mode == "tensor":
        return HEAD + TENSOR + VALUES + TAIL + ["Data_name"]
    return HEAD + STATISTICS + VALUES + TAIL


def compare_csv(result: DumpComparison) -> bytes:
    """The comparison as msprobe's CSV, one row per compared argument, in TARGET's execution order."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns(result.mode))
    previous = None
    for row in result.rows:
        pair = result.pairs[row.pair]
        first_of_op = row.pair != previous
        previous = row.pair
        writer.writerow(_cells(result.mode, pair, row, first_of_op))
    return out.getvalue().encode("utf-8")


def summary_json(result: DumpComparison) -> bytes:
    """Counts, the first divergence and the settings, as JSON."""
    first = result.first
    payload: dict = {
        "base": result.base, "target": result.target, "mode": result.mode, "fuzzy": result.fuzzy,
        "engines": {"base": result.base_engine, "target": result.target_engine},
        "rtol": result.tolerance_override, "rows": len(result.rows),
        "pass": result.count("pass"), "warning": result.count("warning"), "error": result.count("error"),
        "errors_judged_by_value": result.errors_judged,
        "ops_only_in_target": result.only_target, "ops_only_in_base": result.only_base,
        "first_divergence": None if first is None else {
            "op": first.op, "kind": first.kind, "reason": first.reason, "row": first.row,
            "error": _json_number(first.error), "tolerance": _json_number(first.tolerance), "parent": first.parent,
            "stack": list(first.stack), "next_op": first.next_op, "unrecorded": list(first.unrecorded),
        },
        "closest": None if result.closest is None else {
            "op": result.closest.op, "slot": result.closest.slot, "ratio": _json_number(result.closest.ratio)},
        "uncertain": [{"op": u.op, "row": u.row, "error": _json_number(u.error), "tolerance": u.tolerance,
                       "carried": _json_number(u.carried)} for u in result.uncertain],
    }
    return (json.dumps(payload, indent=2) + "\n").encode("utf-8")


def _json_number(value: float) -> Optional[float]:
    return value if math.isfinite(value) else None


def _cells(mode: str, pair: Any, row: CompareRow, first_of_op: bool) -> list:
    t, b = row.target, row.base
    cells = [
        f"{pair.target.name}.{t.slot}" if t and row.stand_in != "TARGET" else "N/A",
        f"{pair.base.name}.{b.slot}" if b and row.stand_in != "BASE" else "N/A",
        _dtype(t), _dtype(b), _shape(t), _shape(b), _grad(t), _grad(b),
    ]
    if mode == "tensor":
        if row.tensor is None:
            cells += ["unsupported" if t and b else "N/A"] * len(TENSOR)
        else:
            cells += [CELLS[m.cell](v) for m, v in zip(TENSOR_METRICS, row.tensor)]
    elif row.stats is None:
        same = t is not None and b is not None and t.value == b.value and t.kind == b.kind
        cells += ["0" if same else "N/A"] * len(STATISTICS)
    else:
        cells += [CELLS[m.cell](v) for m, v in zip(STATISTICS_METRICS, row.stats)]
    cells += _values(t) + _values(b)
    messages = list(row.messages) + ([f"note: {row.note}"] if row.note else []) if b is not None else []
    cells += [
        str(_grad(t) == _grad(b)), row.result,
        json.dumps(messages) if b is not None else NO_BENCH,
        str(list(pair.target.stack if pair.target else pair.base.stack)) if first_of_op else "N/A",
    ]
    if mode == "tensor":
        cells.append(str([_data_name(t), _data_name(b)]))
    return cells


def _dtype(leaf: Optional[Leaf]) -> str:
    return "N/A" if leaf is None or leaf.kind == "none" else leaf.dtype


def _shape(leaf: Optional[Leaf]) -> str:
    if leaf is None or leaf.kind == "none" or leaf.shape is None:
        return "N/A"
    return str(list(leaf.shape))


def _grad(leaf: Optional[Leaf]) -> str:
    return "N/A" if leaf is None or leaf.requires_grad is None else str(leaf.requires_grad)


def _values(leaf: Optional[Leaf]) -> list:
    if leaf is None or leaf.kind == "none":
        return ["N/A"] * 4
    if leaf.kind in ("scalar", "other"):
        return [str(leaf.value)] * 4
    if not leaf.has_stats:
        return ["N/A"] * 4
    return [_number(v) for v in leaf.stats]


def _number(value: float) -> str:
    if math.isnan(value):
        return "Nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return repr(float(value))


def _diff(value: float) -> str:
    return "0" if value == 0 else _number(value)


def _percent(value: float) -> str:
    if value == 0:
        return "0"
    if not math.isfinite(value):
        return _number(value)
    return f"{value * 100!r}%"


CELLS = {"number": _number, "diff": _diff, "percent": _percent}  # a metric's cell (differences.Metric.cell)


def _data_name(leaf: Optional[Leaf]) -> str:
    return leaf.data_name if leaf is not None and leaf.data_name else "-1"
