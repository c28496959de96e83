"""``ascend-tune report RUN [--baseline RUN] [-o FILE.html]``: one page per run."""

from __future__ import annotations

import argparse
import os

from .args import add_command, add_force, add_jobs, add_log_reading, add_out, add_threshold, log_reading


def add_commands(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``report`` subcommand."""
    cmd = add_command(subparsers, "report", _cmd_report)
    cmd.add_argument("run_dir", metavar="RUN", help="the run folder (TrainingMonitor's log_dir)")
    cmd.add_argument("--baseline", help="a reference run to compare the loss curve against: a run folder or log "
                                        "of any format compare-loss reads (an HF trainer_state.json, ...)")
    add_log_reading(cmd, "the baseline", several=False)
    add_out(cmd, "the HTML file to write (default: RUN/report.html)", metavar="FILE", also=("--output",))
    add_threshold(cmd)
    cmd.add_argument("--no-advise", action="store_true", help="do not run the trace advisor on the run's traces")
    add_jobs(cmd)
    add_force(cmd)


def _cmd_report(args: argparse.Namespace) -> int:
    """One self-contained HTML page (and markdown) for a run folder."""
    from ..analysis.report.build import build_report
    from ..analysis.report.render import report_files, write_report
    from ..formats.run_dir import REPORT_HTML
    from ..formats.writing import make_folder, refuse_existing

    out = args.out or os.path.join(args.run_dir, REPORT_HTML)
    report = build_report(args.run_dir, baseline=args.baseline, threshold=args.threshold, advise=not args.no_advise,
                          baseline_reading=log_reading(args, 1)[0], jobs=args.jobs)
    refuse_existing(report_files(report, out), args.force)
    make_folder(os.path.dirname(os.path.abspath(out)))
    written = write_report(report, out)
    print("report: " + "\n        ".join(written))
    failed = (report.comparison is not None and not report.comparison.aligned) or bool(report.overflows) or any(
        r.suspects for r in report.replays)
    return 1 if failed else 0
