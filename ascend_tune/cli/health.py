"""``ascend-tune health RUN [--step N] [--limit N] [--json]``: a run's anomalies and the module table of a step.

Exit 0 when the run had no anomaly, 1 when it had some, 2 on bad input. Offline: reads the files health=True wrote.
"""

from __future__ import annotations

import argparse
import math

from ..analysis.health import HealthReport, anomaly_line, read_health
from .args import add_command, add_json, count, int_at_least

COLUMNS = ("grad_norm", "param_norm", "update_ratio", "act_mean", "act_std", "act_absmax", "act_zero_frac",
           "act_nonfinite")


def add_commands(subparsers: argparse._SubParsersAction) -> None:
    """Add ``health`` to the ``ascend-tune`` subcommands."""
    parser = add_command(subparsers, "health", _cmd_health, exits=("no anomaly", "anomalies"))
    parser.add_argument("run_dir", metavar="RUN", help="the run folder (log_dir)")
    parser.add_argument("--step", type=count, default=None,
                        help="the step whose module table is shown (default: the first recorded at or after the "
                             "first anomaly, else the last recorded)")
    parser.add_argument("--limit", type=int_at_least(1), default=20, help="modules listed (default: 20)")
    add_json(parser, "the anomalies and the module table")


def _cmd_health(args: argparse.Namespace) -> int:
    """A run's anomalies (spikes, NaN) and per-module statistics (from health=True).

    Print the anomalies a run with health=True found and the module statistics of one step, the module whose
    gradient norm jumped most first.
    """
    from .output import json_text

    report = read_health(args.run_dir, args.step)
    if args.json:
        print(json_text(report.as_dict()))
    else:
        print("\n".join(render_text(report, args.limit)))
    return 1 if report.anomalies else 0


def render_text(report: HealthReport, limit: int = 20) -> list:
    """The lines ``ascend-tune health`` prints: the verdict, each anomaly, the module table."""
    lines = [f"health: {report.run}", f"  {report.verdict}"]
    for record in report.anomalies[:limit]:
        lines.append(f"  rank {record.get('rank', 0)} {anomaly_line(record)}")
    if len(report.anomalies) > limit:
        lines.append(f"  ... and {len(report.anomalies) - limit} more (--json, or anomalies.jsonl)")
    if report.modules:
        lines.append(f"  modules at step {report.step} (of recorded steps {_steps(report.module_steps)}), largest "
                     "gradient-norm jump first:")
        width = max(len(r.record["module"]) for r in report.modules[:limit])
        lines.append(f"    {'module':<{width}}  {'jump':>7}  " + "  ".join(f"{c:>12}" for c in COLUMNS))
        for row in report.modules[:limit]:
            jump = f"x{row.jump:.3g}" if row.jump is not None else "-"
            values = "  ".join(f"{_g(row.record.get(c)):>12}" for c in COLUMNS)
            lines.append(f"    {row.record['module']:<{width}}  {jump:>7}  {values}")
    return lines


def _steps(steps: list) -> str:
    return ", ".join(map(str, steps[:10])) + (", ..." if len(steps) > 10 else "")


def _g(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return f"{value:.4g}"
