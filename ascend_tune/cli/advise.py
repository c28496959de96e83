"""``ascend-tune advise TRACE_OR_DIR [-o OUT_DIR] [--json]``: the trace advisor on the command line.

Exit 0 when no finding is a warning or worse, 1 when one is, 2 on bad input. Imports nothing heavy at module level.
"""

from __future__ import annotations

import argparse
import json
import os

from .args import add_command, add_json, add_out


def add_commands(subparsers: argparse._SubParsersAction) -> None:
    """Add ``advise`` to the ``ascend-tune`` subcommands."""
    parser = add_command(subparsers, "advise", _cmd_advise, exits=("no warnings", "findings"))
    parser.add_argument("trace", metavar="TRACE_OR_DIR", help="a trace file, or a folder searched for traces")
    add_out(parser, "folder for advice.html and msprof-analyze's files (default: the traces' folder)")
    add_json(parser, "the report", instead_of="markdown")


def _cmd_advise(args: argparse.Namespace) -> int:
    """Findings (fused optimizer, dataloader, dynamic shapes, host syncs...) from profiler traces.

    Read torch.profiler traces (*.pt.trace.json[.gz]) or torch_npu trace_view.json, print advice as markdown and
    write advice.html.
    """
    from ..analysis.advisor import analyse, render

    out_dir = args.out
    if out_dir is None:
        out_dir = args.trace if os.path.isdir(args.trace) else os.path.dirname(os.path.abspath(args.trace))
    if not os.path.exists(args.trace):
        out_dir = None  # advise_traces reports the missing input; do not create folders for it
    report = analyse.advise_traces(args.trace, out_dir=out_dir)
    if out_dir is not None:
        report = render.write_html(report, out_dir)
    if args.json:
        print(json.dumps(report.as_dict(), indent=2))
    else:
        print(render.render_markdown(report), end="")
    return report.exit_code
