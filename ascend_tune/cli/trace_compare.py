"""``ascend-tune compare-trace BASE TARGET``: where the target's step loses time against the base's.

Exit 0: no slowdown beyond noise or under the threshold, 1: slower by more than ``--threshold`` and beyond noise,
2: bad input (one line). Imports nothing heavy at module level.
"""

from __future__ import annotations

import argparse
import json

from ..analysis.defaults import TRACE_NOISE_FLOOR, TRACE_THRESHOLD
from .args import add_command, add_force, add_json, add_out, count, fraction, int_at_least


def add_commands(subparsers: argparse._SubParsersAction) -> None:
    """Add ``compare-trace`` to the ``ascend-tune`` subcommands."""
    cmd = add_command(subparsers, "compare-trace", _cmd_compare_trace,
                      exits=("no slowdown beyond noise or under the threshold", "slower"))
    cmd.add_argument("base", metavar="BASE", help="the reference's trace, *_ascend_pt folder or run folder")
    cmd.add_argument("target", metavar="TARGET", help="the target's trace, *_ascend_pt folder or run folder")
    cmd.add_argument("--step", type=count, help="compare ProfilerStep#N on both sides (default: each side's "
                     "median step)")
    cmd.add_argument("--rank", type=count, help="the rank to take from folders holding several ranks' traces")
    cmd.add_argument("--top", type=int_at_least(1), default=10, help="rows shown per level (default: 10)")
    cmd.add_argument("--threshold", type=fraction, default=TRACE_THRESHOLD,
                     help="exit 1 when the target's step is slower by more than this share of the base's and "
                          f"beyond noise (default: {TRACE_THRESHOLD:g} = {TRACE_THRESHOLD * 100:g}%%)")
    cmd.add_argument("--noise-floor", type=fraction, default=TRACE_NOISE_FLOOR, metavar="F",
                     help="the least share of the base step counted as noise: how far two runs of identical code "
                          f"differ on this machine (default: {TRACE_NOISE_FLOOR:g}; on a shared machine compare two "
                          "base runs to measure it)")
    add_out(cmd, "write trace_compare.csv (every row) and trace_compare.json here")
    add_force(cmd)
    add_json(cmd, "the comparison", instead_of="text")


def _cmd_compare_trace(args: argparse.Namespace) -> int:
    """Where the target's step loses time against the base's (by module, op and kind) from two traces.

    Compare two profiler traces (torch.profiler *.pt.trace.json[.gz], a torch_npu *_ascend_pt folder or
    trace_view.json, a profile or run folder) step against step: the gap split by module, op and kind with an
    unattributed row, ops found in one run only, and the top contributor with its next action.
    """
    from ..analysis.traces.pair import compare_traces
    from ..analysis.traces.render import as_dict, render_text, write_outputs

    result = compare_traces(args.base, args.target, step=args.step, rank=args.rank,
                            noise_floor=args.noise_floor)
    if args.out:
        write_outputs(result, args.out, args.threshold, force=args.force)
    if args.json:
        print(json.dumps(as_dict(result, args.threshold), indent=2))
    else:
        print(render_text(result, top=args.top), end="")
    return result.exit_code(args.threshold)
