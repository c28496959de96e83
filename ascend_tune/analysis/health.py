"""A run's health outputs read back: its anomalies (``anomalies.jsonl``) and module statistics
(``health/modules.jsonl``), and the one line a user acts on. Pure Python over files, no torch.

The module table of a step orders modules by how much their gradient norm *jumped* since the module's previous
recorded step (``grad_norm / previous grad_norm``; a module without a previous record or a gradient comes last), so
the module a spike started in is on the first line. The step shown by default is the first recorded one at or after
the first anomaly, else the last one recorded.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from typing import Optional

from ..errors import InputError
from ..formats.run_dir import ANOMALIES_JSONL, HEALTH_DIR, MODULES_JSONL, rank_of_dir


@dataclass(frozen=True)
class ModuleRow:
    """One module at the shown step: its record and its gradient norm's jump since its previous recorded step."""

    record: dict
    jump: Optional[float]


@dataclass(frozen=True)
class HealthReport:
    """What ``ascend-tune health`` prints (:func:`read_health`)."""

    run: str
    anomalies: list  # the anomalies.jsonl records of every rank, in step order
    module_steps: list  # the steps with module statistics
    step: Optional[int]  # the step of ``modules``
    modules: list = field(default_factory=list)  # ModuleRow, largest jump first

    @property
    def verdict(self) -> str:
        """The one line: the first anomaly and where to look, or that the run was healthy."""
        if not self.anomalies:
            return (f"no anomaly in {self.run}: the loss and gradient norm stayed within their baselines"
                    if self.anomalies is not None else "")
        first = self.anomalies[0]
        text = (f"{len(self.anomalies)} anomal{'y' if len(self.anomalies) == 1 else 'ies'}; the first at step "
                f"{first['step']} ({first['metric']}, rank {first.get('rank', 0)})")
        top = self.modules[0] if self.modules and self.modules[0].jump is not None else None
        if top is not None:
            text += (f"; at step {self.step} module {top.record['module']} ({top.record.get('type')}) gradient norm "
                     f"jumped x{top.jump:.3g}")
        elif self.modules:
            text += f"; module statistics of step {self.step} below"
        else:
            text += "; record module statistics after a spike with health=dict(on_anomaly='modules')"
        return text

    def as_dict(self) -> dict:
        """JSON-ready."""
        return {"run": self.run, "anomalies": self.anomalies, "module_steps": self.module_steps, "step": self.step,
                "modules": [dict(r.record, jump=r.jump) for r in self.modules], "verdict": self.verdict}


def read_health(run: str, step: Optional[int] = None) -> HealthReport:
    """The anomalies and the module table of ``step`` (default: see the module docstring) of run folder ``run``."""
    if not os.path.isdir(run):
        raise InputError(f"{run} is not a folder; pass the run folder (log_dir) of a run with health=True")
    folders = [run] + sorted(os.path.join(run, d) for d in os.listdir(run) if rank_of_dir(d) is not None)
    anomaly_files = [p for p in (os.path.join(f, ANOMALIES_JSONL) for f in folders) if os.path.isfile(p)]
    module_file = os.path.join(run, HEALTH_DIR, MODULES_JSONL)
    if not anomaly_files and not os.path.isfile(module_file):
        raise InputError(f"{run} holds no {ANOMALIES_JSONL} or {HEALTH_DIR}/{MODULES_JSONL}; run with health=True "
                         "(or ASCEND_TUNE_HEALTH=1) to write them")
    anomalies = sorted((r for path in anomaly_files for r in _records(path)),
                       key=lambda r: (r.get("step", 0), r.get("rank", 0)))
    records = _records(module_file) if os.path.isfile(module_file) else []
    steps = sorted({r["step"] for r in records if isinstance(r.get("step"), int)})
    if step is not None and step not in steps:
        shown = ", ".join(map(str, steps[:20])) or "none"
        raise InputError(f"step {step} has no module statistics in {module_file} (recorded steps: {shown})")
    if step is None and steps:
        after = [s for s in steps if anomalies and s >= anomalies[0]["step"]]
        step = after[0] if after else steps[-1]
    return HealthReport(run, anomalies, steps, step, module_table(records, step) if step is not None else [])


def anomaly_line(record: dict) -> str:
    """The console line of an anomaly (also what ``ascend-tune health`` prints)."""
    what = f"{record['metric']} {record['value']:.6g}"
    if record.get("baseline") is None or record["rule"].startswith("nonfinite"):
        text = f"step {record['step']}: {what} is not finite"
    else:
        text = f"step {record['step']}: {what} spiked over its median {record['baseline']:.6g}"
    indices = record.get("indices")
    if indices:
        flat = [i for batch in indices for i in (batch if isinstance(batch, list) else [batch])]
        shown = ", ".join(map(str, flat[:16])) + (", ..." if len(flat) > 16 else "")
        text += f"; the step's batch: samples [{shown}]"
    return "anomaly at " + text


def module_table(records: list, step: int) -> list:
    """The :class:`ModuleRow` of each module at ``step``, largest gradient-norm jump first."""
    previous: dict = {}
    rows = []
    for r in sorted(records, key=lambda r: r.get("step", 0)):
        key = (r.get("rank", 0), r.get("module"))
        if r.get("step") == step:
            before = previous.get(key)
            jump = None
            if before and _positive(before.get("grad_norm")) and _number(r.get("grad_norm")):
                jump = r["grad_norm"] / before["grad_norm"]
            rows.append(ModuleRow(r, jump))
        elif r.get("step", 0) < step:
            previous[key] = r
    return sorted(rows, key=lambda row: (row.jump is None, -(row.jump or 0.0) if _number(row.jump) else 0.0))


def _records(path: str) -> list:
    out = []
    try:
        with open(path, encoding="utf-8") as fh:
            for n, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except ValueError:
                    raise InputError(f"{path} line {n} is not JSON; pass the run folder of a run with health=True") \
                        from None
                if isinstance(obj, dict):
                    out.append(obj)
    except OSError as exc:
        raise InputError(f"cannot read {path} ({exc.strerror or exc})") from None
    return out


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _positive(value: object) -> bool:
    return _number(value) and value > 0
