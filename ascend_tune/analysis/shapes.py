"""THE reader of shapes.csv (the dynamic-shape detector's report, :mod:`ascend_tune.formats.shapes_csv`): every
row, the dynamic ones, and the fix; ``ascend-tune shapes`` and the run's report read it here."""

from __future__ import annotations

import csv
import os
from dataclasses import asdict, dataclass

from ..errors import InputError
from ..formats.run_dir import SHAPES_CSV
from ..formats.shapes_csv import FIX, REQUIRED, ShapeRow


@dataclass(frozen=True)
class ShapesReport:
    """What a shapes.csv holds: every row, and the dynamic ones (more than one distinct shape)."""

    path: str
    rows: tuple

    @property
    def dynamic(self) -> tuple:
        """The rows of ops whose shapes changed."""
        return tuple(r for r in self.rows if r.distinct > 1)

    def as_dict(self) -> dict:
        """The report as JSON-ready data."""
        return {"path": self.path, "dynamic": [asdict(r) for r in self.dynamic], "rows": len(self.rows),
                "fix": FIX if self.dynamic else None}


def read_shapes_report(path: str) -> ShapesReport:
    """Read a shapes.csv (``path``: the file, or the run folder holding it); InputError when it is not one."""
    if os.path.isdir(path):
        path = os.path.join(path, SHAPES_CSV)
    if not os.path.isfile(path):
        raise InputError(
            f"{path} does not exist; pass a shapes.csv or the run folder (log_dir) of a run with shapes=True"
        )
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh)
            header = reader.fieldnames
            if not header:
                raise InputError(f"{path} is empty; was the run interrupted before the detector's last step?")
            missing = [c for c in REQUIRED if c not in header]
            if missing:
                raise InputError(
                    f"{path} is not a dynamic-shape report: no column {', '.join(map(repr, missing))}; "
                    "pass the shapes.csv a run with shapes=True wrote"
                )
            rows = [_row(record, path, reader.line_num) for record in reader]
    except UnicodeDecodeError:
        raise InputError(f"{path} is not a text CSV file; pass the shapes.csv a run with shapes=True wrote") from None
    except csv.Error as exc:
        raise InputError(f"{path} is not a readable CSV file ({exc}); pass the shapes.csv a run wrote") from None
    except OSError as exc:
        raise InputError(f"cannot read {path} ({exc.strerror or exc})") from None
    return ShapesReport(path, tuple(rows))


def _row(record: dict, path: str, line: int) -> ShapeRow:
    text = record.get("Distinct Shapes") or ""
    try:
        distinct = int(text)
    except ValueError:
        raise InputError(
            f"{path}, line {line}: Distinct Shapes {text!r} is not a number; the file was edited or cut short"
        ) from None
    steps = tuple(int(s) for s in (record.get("New Shape Steps") or "").split() if s.isdigit())
    return ShapeRow(
        name=record.get("Function Name") or "", stack=record.get("Call Stack") or "", file=record.get("File") or "",
        line=record.get("Line") or "", input_range=record.get("Input Shape Range") or "",
        output_range=record.get("Output Shape Range") or "", distinct=distinct, new_steps=steps,
    )
