"""``ascend-tune trace DIR``: list the profiler traces under a folder, check they load, repair torch_npu's ts."""

from __future__ import annotations

import argparse
import os

from ..analysis.traces.listing import TraceInfo, scan_traces
from ..errors import InputError
from .args import add_command, add_out


def add_commands(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``trace`` subcommand."""
    cmd = add_command(subparsers, "trace", run_trace)
    cmd.add_argument("path", metavar="DIR", help="a profile folder (e.g. exp/train/profile) or one trace file")
    add_out(cmd, "write the repaired copies here instead of beside the traces")


def run_trace(args: argparse.Namespace) -> int:
    """List profiler traces (steps, sizes), check they load, fix torch_npu's string timestamps.

    List the profiler traces under DIR with their steps and sizes and check that each loads. A torch_npu
    trace_view.json whose ts fields are strings gets a copy, <name>.perfetto.json, that Perfetto and
    chrome://tracing open. Exit 2 when a trace is missing or does not load.
    """
    listing = scan_traces(args.path, out_dir=args.out)
    if not listing.traces and not listing.problems:
        raise InputError(f"{args.path}: no profiler traces found (*.pt.trace.json[.gz] or trace_view.json)")
    if listing.traces:
        print(f"{len(listing.traces)} trace(s) under {args.path}:")
        print(f"  {'rank':>4}  {'steps':<16} {'size':>9}  {'events':>7}  path")
        for info in listing.traces:
            rank = "?" if info.rank is None else str(info.rank)
            print(f"  {rank:>4}  {_steps(info):<16} {_size(info.size_bytes):>9}  {info.events:>7}  {info.path}")
            if info.normalised:
                print(f"        {info.string_ts} string ts (torch_npu) -> numeric copy: {info.normalised}")
        print(_how_to_open(listing.traces, args.path))
    if listing.problems:
        first = listing.problems[0]
        more = f" (and {len(listing.problems) - 1} more)" if len(listing.problems) > 1 else ""
        raise InputError(f"{first.path}: {first.reason}{more}; re-run the profiler or remove the file")
    return 0


def _steps(info: TraceInfo) -> str:
    if not info.steps:
        return "-"
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in info.step_ranges)


def _size(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    return f"{n / 1024:.1f} KB" if n < 2**20 else f"{n / 2**20:.1f} MB"


def _how_to_open(traces: tuple, root: str) -> str:
    lines = [
        "Open a trace: https://ui.perfetto.dev -> 'Open trace file' (.json.gz opens as is), "
        "or chrome://tracing -> Load.",
    ]
    if any(t.kind == "torch" for t in traces):
        folder = root if os.path.isdir(root) else os.path.dirname(root)
        lines.append(f"TensorBoard (pip install torch-tb-profiler): tensorboard --logdir {folder}")
    if any(t.kind == "torch_npu" for t in traces):
        lines.append(
            "torch_npu: open the *.perfetto.json copies in Perfetto; MindStudio Insight opens the *_ascend_pt "
            "folder itself."
        )
    return "\n".join(lines)
