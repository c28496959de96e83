"""``ascend-tune shapes CSV [--limit N] [--json]``: summarise a dynamic-shape report (shapes.csv).

Exit 0 when no op is dynamic, 1 when some are, 2 on bad input. Imports no torch: reading a report is offline work.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter

from ..analysis.shapes import ShapesReport, read_shapes_report
from ..formats.shapes_csv import FIX
from .args import add_command, add_json, int_at_least


def add_commands(subparsers: argparse._SubParsersAction) -> None:
    """Add ``shapes`` to the ``ascend-tune`` subcommands."""
    parser = add_command(subparsers, "shapes", _cmd_shapes, exits=("no dynamic op", "dynamic ops"))
    parser.add_argument("csv", metavar="CSV", help="a shapes.csv, or the run folder (log_dir) holding one")
    parser.add_argument("--limit", type=int_at_least(1), default=20, help="ops listed, most shapes first (default: 20)")
    add_json(parser, "every dynamic op", instead_of="the summary")


def _cmd_shapes(args: argparse.Namespace) -> int:
    """Summarise a dynamic-shape report (shapes.csv from shapes=True).

    List the ops whose input / output shapes changed between steps, from the shapes.csv a run with shapes=True
    wrote.
    """
    report = read_shapes_report(args.csv)
    if args.json:
        print(json.dumps(report.as_dict(), indent=2))
    else:
        print(render_text(report, args.limit), end="")
    return 1 if report.dynamic else 0


def render_text(report: ShapesReport, limit: int = 20) -> str:
    """The summary ``ascend-tune shapes`` prints: the dynamic ops, most distinct shapes first, then the fix."""
    dynamic = report.dynamic
    lines = [f"shapes: {report.path}"]
    if not dynamic:
        lines.append("  no dynamic ops: every op kept its shapes from step to step")
        return "\n".join(lines) + "\n"
    per_name = Counter(row.name for row in dynamic)
    lines.append(f"  {len(dynamic)} dynamic ops ({len(per_name)} distinct functions) changed shape between steps")
    shown = sorted(dynamic, key=lambda r: -r.distinct)[:limit]
    width = max(len(r.name) for r in shown)
    place = max(len(r.where) for r in shown)
    for row in shown:
        steps = f"  new at steps {' '.join(map(str, row.new_steps))}" if row.new_steps else ""
        lines.append(f"  {row.name:<{width}}  {row.where:<{place}}  {row.distinct} shapes  "
                     f"in {row.input_range or '-'}  out {row.output_range or '-'}{steps}")
    if len(dynamic) > len(shown):
        lines.append(f"  ... and {len(dynamic) - len(shown)} more (--limit, or the CSV itself)")
    lines.append(f"  fix: {FIX}")
    return "\n".join(lines) + "\n"
