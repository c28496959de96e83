"""``ascend-tune compare-loss`` and ``ascend-tune perf``: verdicts over training logs of any recognised format
(log.txt, metrics.jsonl, trainer_state.json, Lightning's metrics.csv, TensorBoard events).

Each is thin: read the inputs, call one analysis function, print its result. Exit 0 = pass, 1 = the check failed.
numpy and matplotlib load inside the handlers, so ``ascend-tune --help`` stays fast.
"""

from __future__ import annotations

import argparse
import os

from ..analysis.defaults import LOSS_NOISE_FLOOR
from .args import (
    add_command,
    add_force,
    add_jobs,
    add_json,
    add_log_reading,
    add_threshold,
    count,
    fraction,
    log_reading,
)

RULES = ("seed", "noise", "both")  # compare-loss --rule; "seed" is the 5% rule the guide's script shipped with
LOG_FORMS = ("a log.txt, metrics.jsonl, trainer_state.json, Lightning metrics.csv or TensorBoard event file, or a "
             "run folder holding one")


def add_commands(subparsers: argparse._SubParsersAction) -> None:
    """Add ``compare-loss`` and ``perf`` to the ``ascend-tune`` subcommands."""
    p = add_command(subparsers, "compare-loss", _compare_loss)
    p.add_argument("base", help=f"reference run: {LOG_FORMS}")
    p.add_argument("target", help="run to check, same forms")
    add_threshold(p)
    p.add_argument("--align", choices=("step", "index"), default="step",
                   help="pair losses by optimizer step (default) or line by line as the guide's script did")
    add_log_reading(p, "input (BASE, then TARGET)")
    p.add_argument("--noise-from", action="append", default=[], metavar="RUN",
                   help="another reference run, the reference's script with another seed (repeatable): its gap "
                        "against BASE is noise, not a fault")
    p.add_argument("--rule", choices=RULES, default="both",
                   help="what fails (exit 1): seed (the guide's 5%% rule: the mean relative gap over --threshold), "
                        "noise (the smoothed gap beyond the runs' own noise) or both (either; default)")
    p.add_argument("--noise-floor", type=fraction, default=LOSS_NOISE_FLOOR, metavar="F",
                   help=f"the least noise band of the smoothed gap (default: {LOSS_NOISE_FLOOR:g})")
    p.add_argument("--plot", metavar="DIR", help="write compare_loss_curves.png and loss_gap_curves.png into DIR")
    add_json(p, "the numbers")
    add_force(p)

    p = add_command(subparsers, "perf", _perf)
    p.add_argument("runs", nargs="+", metavar="RUN", help=f"{LOG_FORMS}, or a folder of run folders")
    p.add_argument("--exclude-first", type=count, default=None, metavar="N",
                   help="optimizer steps left out at the start of each run as warm-up (default: the warmup_steps "
                        "of the summary.json beside the log, else 10)")
    add_log_reading(p, "RUN")
    add_jobs(p)
    add_json(p, "the statistics")


def _compare_loss(args: argparse.Namespace) -> int:
    """Compare two runs' loss curves (gap numbers, verdict, plots)."""
    from ..analysis.experiment import render
    from ..analysis.experiment.compare import compare_runs
    from ..analysis.logs import compare, read
    from ..analysis.logs.render import failed_rules, loss_lines
    from ..analysis.report import plots
    from ..formats.writing import refuse_existing
    from .output import json_text, print_lines

    written: tuple = ()
    if args.plot:
        refuse_existing([os.path.join(args.plot, n) for n in (plots.LOSS_CURVES, plots.LOSS_GAPS)], args.force)
    prefer = "text" if args.align == "index" else "jsonl"
    how = log_reading(args, 2)
    base, target = (read.read_log(path, prefer, **h) for path, h in zip((args.base, args.target), how))
    references = tuple(read.read_log(path, prefer, **how[0]) for path in args.noise_from)
    result = compare.compare_loss(base, target, args.threshold, args.align, references, args.noise_floor)
    if args.plot:
        written = plots.plot_loss_comparison(result, args.plot)
    settings = compare_runs(args.base, args.target)
    if args.json:
        print(json_text(dict(result.as_dict(), plots=list(written), read=[base.as_dict(), target.as_dict()],
                             config_differences=None if settings is None else
                             [d.as_dict() for d in settings.differences if d.severity == "error"])))
    else:
        print_lines(loss_lines(result, written, (base, target), args.rule))
        if settings is not None and not settings.same_experiment:
            print(f"  next: {render.verdict(settings)} (ascend-tune compare-config {args.base} {args.target})")
    return 1 if failed_rules(result, args.rule) else 0


def _perf(args: argparse.Namespace) -> int:
    """Steps/sec statistics of runs and their speed-up over the first."""
    from ..analysis.logs import detect, read, throughput
    from ..analysis.logs.ranks import rank_waits
    from ..analysis.logs.render import rank_lines, read_line, throughput_lines, wait_lines
    from ..analysis.traces.ranks import slow_rank
    from ..analysis.traces.render import slow_rank_lines
    from .output import json_text, print_lines

    how = log_reading(args, len(args.runs))
    found = [(run, h) for given, h in zip(args.runs, how) for run in detect.find_runs(given)]
    logs = [read.read_log(p, **h) for p, h in found]
    paths = [p for p, _ in found]
    report = throughput.throughput(logs, args.exclude_first)
    ranks = {p: throughput.rank_throughput(p, args.exclude_first) for p in paths}
    waits = {p: rank_waits(p) for p in paths if ranks[p]}
    traced = {p: slow_rank(p, args.jobs) for p in paths if ranks[p]}
    if args.json:
        out = report.as_dict()
        for run, path, log in zip(out["runs"], paths, logs):
            run["read"] = log.as_dict()
            run["ranks"] = [
                {"rank": r.rank, "median_steps_per_sec": r.steps_per_sec.median if r.steps_per_sec else None,
                 "relative": r.relative, "slow": r.slow}
                for r in ranks[path]
            ]
            if path in waits:
                run["waits"] = waits[path].as_dict()
            if traced.get(path) is not None:
                run["traces"] = traced[path].as_dict()
        print(json_text(out))
    else:
        lines = [read_line(log) for log in logs if log.kind not in ("text", "jsonl")]
        lines += throughput_lines(report)
        for path, table in ranks.items():
            if table:
                lines += rank_lines(path, table)
            if path in waits:
                lines += wait_lines(waits[path])
            if traced.get(path) is not None:
                lines += slow_rank_lines(traced[path])
        print_lines(lines)
    return 0
