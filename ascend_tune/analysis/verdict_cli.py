"""Verdict subcommands: compare-loss, perf, compare-dump, parse, overflow, pack, unpack.

Each is thin: read the inputs, call one analysis function, print its result. Exit 0 = pass, 1 = the check failed,
2 = bad input (the CLI prints the AscendTuneError on one line). Nothing heavy is imported at module level, so
``ascend-tune --help`` stays fast; numpy and matplotlib load inside the handlers.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
from typing import Any, Callable

from ..cli import int_at_least
from ..errors import AscendTuneError, InputError, OutputError

_FORCE_HELP = "replace output files that already exist (default: refuse)"


def add_commands(subparsers: Any) -> None:
    """Add the verdict subcommands to the ``ascend-tune`` parser."""
    p = subparsers.add_parser("compare-loss", help="compare two runs' loss curves (gap numbers, verdict, plots)")
    p.add_argument("base", help="reference run: a log.txt, a metrics.jsonl or a run folder")
    p.add_argument("target", help="run to check, same forms")
    p.add_argument("--threshold", type=_fraction, default=0.05,
                   help="mean relative gap below which the runs are aligned (default: 0.05 = 5%%)")
    p.add_argument("--align", choices=("step", "index"), default="step",
                   help="pair losses by step number (default) or line by line as the seed script did")
    p.add_argument("--plot", metavar="DIR", help="write compare_loss_curves.png and loss_gap_curves.png into DIR")
    p.add_argument("--json", action="store_true", help="print the numbers as JSON")
    p.add_argument("--force", action="store_true", help=_FORCE_HELP)
    p.set_defaults(run=_compare_loss)

    p = subparsers.add_parser("perf", help="steps/sec statistics of runs and their speed-up over the first")
    p.add_argument("runs", nargs="+", metavar="RUN", help="a log file, a run folder or a folder of run folders")
    p.add_argument("--exclude-first", type=_count, default=10, metavar="N",
                   help="log lines left out at the start of each run (warm-up; default: 10)")
    p.add_argument("--json", action="store_true", help="print the statistics as JSON")
    p.set_defaults(run=_perf)

    p = subparsers.add_parser("compare-dump", help="compare two precision dumps and name the first diverging op")
    p.add_argument("base", help="reference dump: a dump folder, a dump.json, a ptdbg .pkl or a packed archive")
    p.add_argument("target", help="dump to check, same forms")
    p.add_argument("-o", "--out", metavar="OUT", help="folder for compare_result.csv and compare_summary.json")
    p.add_argument("--mode", choices=("auto", "statistics", "tensor"), default="auto",
                   help="compare statistics or saved tensors (default: tensors when both dumps hold them)")
    p.add_argument("--fuzzy", action="store_true", help="pair ops by API and call order, ignoring call counts")
    p.add_argument("--rtol", type=_fraction, help="one agreement tolerance for all float dtypes (default: by dtype)")
    _add_selectors(p)
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("--force", action="store_true", help=_FORCE_HELP)
    p.set_defaults(run=_compare_dump)

    p = subparsers.add_parser("parse", help="an op's stack and statistics in a dump")
    p.add_argument("dump", help="a dump folder, a dump.json, a ptdbg .pkl or a packed archive")
    p.add_argument("op", help="the op's name, or the start of it (e.g. Functional.linear.0.forward)")
    _add_selectors(p)
    p.set_defaults(run=_parse)

    p = subparsers.add_parser("overflow", help="the first op with inf/NaN in a finished dump, with its stack")
    p.add_argument("dump", help="a dump folder, a dump.json, a ptdbg .pkl or a packed archive")
    _add_selectors(p)
    p.set_defaults(run=_overflow)

    p = subparsers.add_parser("pack", help="pack a dump folder into one archive with sha256 sums")
    p.add_argument("dump", help="the dump folder")
    p.add_argument("-o", "--out", required=True, metavar="FILE", help="archive to write (.tar, .tar.gz or .tgz)")
    p.add_argument("--force", action="store_true", help=_FORCE_HELP)
    p.set_defaults(run=_pack)

    p = subparsers.add_parser("unpack", help="verify an archive made by pack and unpack it into a new folder")
    p.add_argument("archive", help="the archive")
    p.add_argument("-o", "--out", required=True, metavar="DIR", help="new (or empty) folder to unpack into")
    p.set_defaults(run=_unpack)


def _add_selectors(p: argparse.ArgumentParser) -> None:
    p.add_argument("--step", type=_count, help="the step to use when the dump holds several")
    p.add_argument("--rank", type=_count, help="the rank to use when the dump holds several")


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number such as 0.05, got {text!r}") from None
    if not value > 0 or value != value or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number such as 0.05, got {text!r}")
    return value


_count = int_at_least(0)


def _one_line(handler: Callable) -> Callable:
    """Turn file-system errors the readers did not anticipate into the CLI's one-line exit 2."""

    @functools.wraps(handler)
    def run(args: argparse.Namespace) -> int:
        try:
            return handler(args)
        except AscendTuneError:
            raise
        except OSError as exc:
            where = f" {exc.filename}" if getattr(exc, "filename", None) else ""
            raise OutputError(f"cannot access{where} ({exc.strerror or exc}); check the paths and permissions") \
                from None

    return run


def _print(lines: list) -> None:
    print("\n".join(lines))


@_one_line
def _compare_loss(args: argparse.Namespace) -> int:
    from .logs.compare import compare_loss
    from .logs.read import read_log
    from .verdict_text import loss_lines

    plots: tuple = ()
    if args.plot:
        from ..formats.atomic import refuse_existing
        from .report.plots import LOSS_CURVES, LOSS_GAPS

        refuse_existing([os.path.join(args.plot, n) for n in (LOSS_CURVES, LOSS_GAPS)], args.force)
    prefer = "text" if args.align == "index" else "jsonl"
    result = compare_loss(read_log(args.base, prefer), read_log(args.target, prefer), args.threshold, args.align)
    if args.plot:
        from .report.plots import plot_loss_comparison

        plots = plot_loss_comparison(result, args.plot)
    if args.json:
        print(_json(dict(result.as_dict(), plots=list(plots))))
    else:
        _print(loss_lines(result, plots))
    return 0 if result.aligned else 1


@_one_line
def _perf(args: argparse.Namespace) -> int:
    from .logs.read import find_runs, read_log
    from .logs.throughput import rank_throughput, throughput
    from .verdict_text import rank_lines, throughput_lines

    paths = [run for given in args.runs for run in find_runs(given)]
    report = throughput([read_log(p) for p in paths], args.exclude_first)
    ranks = {p: rank_throughput(p, args.exclude_first) for p in paths}
    if args.json:
        out = report.as_dict()
        for run, path in zip(out["runs"], paths):
            run["ranks"] = [
                {"rank": r.rank, "median_steps_per_sec": r.steps_per_sec.median if r.steps_per_sec else None,
                 "relative": r.relative, "slow": r.slow}
                for r in ranks[path]
            ]
        print(_json(out))
    else:
        lines = throughput_lines(report)
        for path, table in ranks.items():
            if table:
                lines += rank_lines(path, table)
        _print(lines)
    return 0


@_one_line
def _compare_dump(args: argparse.Namespace) -> int:
    from ..formats.atomic import make_folder, refuse_existing, write_atomic
    from .dump_compare import compare_dumps
    from .dump_report import compare_csv, summary_json
    from .verdict_text import dump_lines

    outputs = ()
    if args.out:
        if os.path.exists(args.out) and not os.path.isdir(args.out):
            raise OutputError(f"{args.out} is a file; -o takes a folder for compare_result.csv")
        outputs = tuple(os.path.join(args.out, n) for n in ("compare_result.csv", "compare_summary.json"))
        refuse_existing(outputs, args.force)
    with _opened(args.base, args) as base, _opened(args.target, args) as target:
        result = compare_dumps(base, target, args.mode, args.fuzzy, args.rtol)
    if outputs:
        make_folder(args.out)
        write_atomic(outputs[0], compare_csv(result))
        write_atomic(outputs[1], summary_json(result))
    if args.json:
        print(summary_json(result).decode().rstrip())
    else:
        _print(dump_lines(result, outputs))
    return 0 if result.passed else 1


@_one_line
def _parse(args: argparse.Namespace) -> int:
    from .verdict_text import op_lines

    with _opened(args.dump, args) as dump:
        _print(op_lines(dump.label, dump.find(args.op)))
    return 0


@_one_line
def _overflow(args: argparse.Namespace) -> int:
    from .overflow import find_overflow
    from .verdict_text import overflow_lines

    with _opened(args.dump, args) as dump:
        report = find_overflow(dump)
    _print(overflow_lines(report))
    return 0 if report.first is None else 1


@_one_line
def _pack(args: argparse.Namespace) -> int:
    from .archive import pack
    from .dump_sources import open_location

    files, refs = open_location(args.dump)  # refuse a folder that holds no dump
    files.close()
    if not os.path.isdir(args.dump):
        raise InputError(f"{args.dump} is not a folder; pack takes the dump folder")
    summary = pack(args.dump, args.out, args.force)
    print(f"packed {summary.files} file(s), {summary.bytes} bytes, {len(refs)} dump(s) from {args.dump} "
          f"into {summary.archive}")
    return 0


@_one_line
def _unpack(args: argparse.Namespace) -> int:
    from .archive import unpack

    summary = unpack(args.archive, args.out)
    print(f"verified and unpacked {summary.files} file(s), {summary.bytes} bytes into {summary.folder}")
    return 0


class _opened:
    """``with _opened(path, args) as dump``: read the dump that ``--step`` / ``--rank`` select, then close it."""

    def __init__(self, path: str, args: argparse.Namespace):
        self._path, self._args, self._files = path, args, None

    def __enter__(self) -> Any:
        from .dump_sources import open_location, select_dump
        from .dumps import read_dump

        self._files, refs = open_location(self._path)
        try:
            return read_dump(self._files, select_dump(refs, self._path, self._args.step, self._args.rank))
        except BaseException:
            self._files.close()
            raise

    def __exit__(self, *exc: object) -> None:
        if self._files is not None:
            self._files.close()


def _json(payload: dict) -> str:
    """Strict JSON: NaN and inf become null."""
    return json.dumps(_finite(payload), indent=2, default=str)


def _finite(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    if hasattr(value, "item"):  # numpy scalars
        value = value.item()
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return None
    return value
