"""shapes.csv, the dynamic-shape detector's report: its columns, its row, shape ranges, and writing it.

Plain Python, no torch: the detector writes the file during training; :mod:`ascend_tune.analysis.shapes` is THE
reader (``ascend-tune shapes``, the report).

The columns follow the NPU toolkit's dynamic-shape analysis report (``msft_dynamic_shape_analysis_report.csv``:
function name, call stack, file, line, shapes), and, as that report does, a row is written only for a dynamic op:

- ``Function Name``: the op without its per-step call counter (``Functional.linear``, ``Tensor.__add__``,
  ``Module.fc1.Linear.forward``), as the precision dumps name it;
- ``Call Stack``: the user frames of the call, innermost first, ``file:line in function`` joined by `` <- ``;
- ``File`` / ``Line``: the innermost user frame (in the model's ``forward`` for ops inside torch modules);
- ``Input Shape Range`` / ``Output Shape Range``: per tensor position, each dimension's ``min..max`` over the calls
  seen, e.g. ``[8,12..40,64]``; positions are separated by ``; ``, a position whose rank changed lists one range
  per rank joined by ``|``, a position only some calls had ends in ``?``;
- ``Distinct Shapes``: distinct (input shapes, output shapes) signatures seen;
- ``New Shape Steps``: the steps in which a signature not seen before appeared (space-separated).
"""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Sequence
from dataclasses import dataclass

COLUMNS = (
    "Function Name", "Call Stack", "File", "Line", "Input Shape Range", "Output Shape Range", "Distinct Shapes",
    "New Shape Steps",
)
# what a report from elsewhere must have; New Shape Steps is ours alone
REQUIRED = COLUMNS[:7]
FIX = (
    "pad or bucket the inputs so shapes repeat (pad every batch to one length or to one of a few bucket lengths; "
    "drop_last=True when only the last, short batch differs), or on an NPU run binary kernels instead of compiling "
    "per shape: torch_npu.npu.set_compile_mode(jit_compile=False), which tune= sets by default"
)


def shape_range(signatures: Sequence) -> str:
    """The range text of one side (inputs or outputs) of an op over its calls.

    ``signatures``: one tuple per distinct call, holding one shape (a tuple of ints) per tensor position.
    """
    count = len(signatures)
    width = max((len(s) for s in signatures), default=0)
    parts = []
    for position in range(width):
        present = [s[position] for s in signatures if len(s) > position]
        by_rank: dict = {}
        for shape in present:
            by_rank.setdefault(len(shape), []).append(shape)
        text = "|".join(_dims_range(group) for group in by_rank.values())
        parts.append(text + ("?" if len(present) < count else ""))
    return "; ".join(parts)


def _dims_range(shapes: list) -> str:
    dims = []
    for values in zip(*shapes):
        low, high = min(values), max(values)
        dims.append(str(low) if low == high else f"{low}..{high}")
    return "[" + ",".join(dims) + "]"


@dataclass(frozen=True)
class ShapeRow:
    """One op of a report."""

    name: str
    stack: str
    file: str
    line: str
    input_range: str
    output_range: str
    distinct: int
    new_steps: tuple

    @property
    def where(self) -> str:
        """``file:line`` of the call, with the file's base name only (the full path is in the report)."""
        if not self.file:
            return "(no user frame)"
        return f"{os.path.basename(self.file)}:{self.line}"



def csv_bytes(rows: Sequence) -> bytes:
    """shapes.csv's content: the header, then one line per :class:`ShapeRow`."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(COLUMNS)
    for r in rows:
        writer.writerow([r.name, r.stack, r.file, r.line, r.input_range, r.output_range, r.distinct,
                         " ".join(map(str, r.new_steps))])
    return buffer.getvalue().encode("utf-8")


def warning_text(rows: Sequence, steps: str, path: str, named: int = 5) -> str:
    """The run's warning: the first ``named`` dynamic ops with their ranges, the fix, where the report is."""
    listed = "; ".join(f"{r.name} at {r.where} (in {r.input_range or '-'}, out {r.output_range or '-'})"
                       for r in rows[:named])
    more = f" and {len(rows) - named} more" if len(rows) > named else ""
    return (f"dynamic shapes: {len(rows)} ops changed shape between {steps}: {listed}{more}. "
            f"On an NPU each new shape can mean an operator compilation. Fix: {FIX}. All rows: {path}")
