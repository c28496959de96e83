"""``ascend-tune compare-dump, parse, overflow, replay, pack, unpack``: verdicts over precision dumps, and dumps
moved whole.

Each is thin: read the inputs, call one analysis function, print its result. Exit 0 = pass, 1 = the check failed.
Nothing heavy is imported at module level, so ``ascend-tune --help`` stays fast; numpy loads inside the handlers.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from ..errors import InputError, OutputError
from .args import add_command, add_force, add_jobs, add_json, add_out, add_selectors, fraction


def add_commands(subparsers: argparse._SubParsersAction) -> None:
    """Add ``compare-dump``, ``parse``, ``overflow``, ``replay``, ``pack`` and ``unpack`` to the subcommands."""
    p = add_command(subparsers, "compare-dump", _compare_dump)
    p.add_argument("base", help="reference dump: a dump folder, a dump.json, a ptdbg .pkl or a packed archive")
    p.add_argument("target", help="dump to check, same forms")
    add_out(p, "folder for compare_result.csv and compare_summary.json", metavar="OUT")
    p.add_argument("--mode", choices=("auto", "statistics", "tensor"), default="auto",
                   help="compare statistics or saved tensors (default: tensors when both dumps hold them)")
    p.add_argument("--fuzzy", action="store_true", help="pair ops by API and call order, ignoring call counts")
    p.add_argument("--rtol", type=fraction, help="one agreement tolerance for all float dtypes (default: by dtype)")
    add_selectors(p)
    add_jobs(p)
    add_json(p, "the summary")
    add_force(p)

    p = add_command(subparsers, "parse", _parse)
    p.add_argument("dump", help="a dump folder, a dump.json, a ptdbg .pkl or a packed archive")
    p.add_argument("op", help="the op's name, or the start of it (e.g. Functional.linear.0.forward)")
    add_selectors(p)

    p = add_command(subparsers, "overflow", _overflow)
    p.add_argument("dump", help="a dump folder, a dump.json, a ptdbg .pkl, a packed archive or an overflow.json")
    add_selectors(p)
    add_jobs(p)
    add_json(p, "the whole-run findings (a location with several ranks or steps)")

    p = add_command(subparsers, "replay", _replay)
    p.add_argument("dump", help="the dump folder of a run with precision=dict(task='replay'), a step or rank folder "
                                "in it, its replay.json or a packed archive")
    add_selectors(p)
    add_json(p, "the verdict and the suspects")

    p = add_command(subparsers, "pack", _pack)
    p.add_argument("dump", help="the dump folder")
    add_out(p, "archive to write (.tar, .tar.gz or .tgz)", metavar="FILE", required=True)
    add_force(p)

    p = add_command(subparsers, "unpack", _unpack)
    p.add_argument("archive", help="the archive")
    add_out(p, "new (or empty) folder to unpack into", required=True)


def _compare_dump(args: argparse.Namespace) -> int:
    """Compare two precision dumps and name the first diverging op."""
    from ..analysis.dumps import compare, table
    from ..analysis.dumps.render import dump_lines
    from ..formats.writing import make_folder, refuse_existing, write_atomic
    from .output import print_lines

    outputs = ()
    if args.out:
        if os.path.exists(args.out) and not os.path.isdir(args.out):
            raise OutputError(f"{args.out} is a file; -o takes a folder for compare_result.csv")
        outputs = tuple(os.path.join(args.out, n) for n in ("compare_result.csv", "compare_summary.json"))
        refuse_existing(outputs, args.force)
    if _whole_run(args, args.base, args.target):
        return _compare_runs(args, outputs)
    with _opened(args.base, args) as base, _opened(args.target, args) as target:
        result = compare.compare_dumps(base, target, args.mode, args.fuzzy, args.rtol)
    if outputs:
        make_folder(args.out)
        write_atomic(outputs[0], table.compare_csv(result))
        write_atomic(outputs[1], table.summary_json(result))
    if args.json:
        print(table.summary_json(result).decode().rstrip())
    else:
        print_lines(dump_lines(result, outputs))
    return 0 if result.passed else 1


def _whole_run(args: argparse.Namespace, *paths: str) -> bool:
    """No --step / --rank and a location with several dumps: every rank and step at once."""
    from ..analysis.dumps.ranks import holds_several

    return args.step is None and args.rank is None and any(holds_several(p) for p in paths)


def _compare_runs(args: argparse.Namespace, outputs: tuple) -> int:
    from ..analysis.dumps import ranks

    if outputs:  # one compare_result.csv per step and rank below OUT, beside the run's summary
        outputs = outputs[1:]
    found = ranks.compare_runs(args.base, args.target, args.mode, args.fuzzy, args.rtol, args.jobs, args.out)
    return _print_findings(args, found, outputs)


def _overflow_runs(args: argparse.Namespace) -> int:
    from ..analysis.dumps import ranks

    return _print_findings(args, ranks.overflow_runs(args.dump, args.jobs), ())


def _print_findings(args: argparse.Namespace, found: Any, outputs: tuple) -> int:
    """Unreadable dumps one line each on stderr; exit 2 when none could be read, else 0 / 1 by the run's verdict."""
    import sys

    from ..analysis.dumps.ranks import summary_bytes
    from ..analysis.dumps.render import findings_lines, unreadable_lines
    from ..formats.writing import make_folder, write_atomic
    from .output import print_lines

    for line in unreadable_lines(found):
        print(line, file=sys.stderr)
    if not found.readable:
        raise InputError(f"no dump of {' or '.join(found.locations)} could be read (see the lines above)")
    if found.task == "compare" and not any(r.status in ("agree", "diverge") for r in found.ranks):
        raise InputError(f"{found.locations[0]} and {found.locations[1]} have no step and rank in common; pass "
                         "two dumps of the same steps and ranks, or pick one of each with --step / --rank")
    if outputs:
        make_folder(args.out)
        write_atomic(outputs[0], summary_bytes(found))
    if getattr(args, "json", False):
        print(summary_bytes(found).decode().rstrip())
    else:
        print_lines(findings_lines(found, outputs))
    return 0 if found.passed else 1


def _parse(args: argparse.Namespace) -> int:
    """An op's stack and statistics in a dump."""
    from ..analysis.dumps.render import op_lines
    from .output import print_lines

    with _opened(args.dump, args) as dump:
        print_lines(op_lines(dump.label, dump.find(args.op)))
    return 0


def _overflow(args: argparse.Namespace) -> int:
    """The first op with inf/NaN in a finished dump, with its stack."""
    from ..analysis.dumps import overflow, ranks
    from ..analysis.dumps.render import overflow_lines
    from .output import print_lines

    if _whole_run(args, args.dump):
        return _overflow_runs(args)
    recorded = ranks.recorded_runs(args.dump) if args.step is None and args.rank is None else None
    if recorded is not None:
        return _print_findings(args, recorded, ())
    report = overflow.overflow_report(args.dump, args.step, args.rank)
    print_lines(overflow_lines(report))
    return 0 if report.first is None else 1


def _replay(args: argparse.Namespace) -> int:
    """The calls a replayed step's device computed wrongly (task='replay')."""
    from ..analysis.dumps.render import replay_json, replay_lines
    from ..analysis.dumps.replay import replay_verdict
    from .output import json_text

    verdict = replay_verdict(args.dump, args.step, args.rank)
    print(json_text(replay_json(verdict)) if args.json else "\n".join(replay_lines(verdict)))
    return 0 if verdict.first is None else 1


def _pack(args: argparse.Namespace) -> int:
    """Pack a dump folder into one archive with sha256 sums."""
    from ..analysis.dumps import archive, sources

    files, refs = sources.open_location(args.dump)  # refuse a folder that holds no dump
    files.close()
    if not os.path.isdir(args.dump):
        raise InputError(f"{args.dump} is not a folder; pack takes the dump folder")
    summary = archive.pack(args.dump, args.out, args.force)
    print(f"packed {summary.files} file(s), {summary.bytes} bytes, {len(refs)} dump(s) from {args.dump} "
          f"into {summary.archive}")
    return 0


def _unpack(args: argparse.Namespace) -> int:
    """Verify an archive made by pack and unpack it into a new folder."""
    from ..analysis.dumps import archive

    summary = archive.unpack(args.archive, args.out)
    print(f"verified and unpacked {summary.files} file(s), {summary.bytes} bytes into {summary.folder}")
    return 0


class _opened:
    """``with _opened(path, args) as dump``: read the dump that ``--step`` / ``--rank`` select, then close it."""

    def __init__(self, path: str, args: argparse.Namespace):
        self._path, self._args, self._files = path, args, None

    def __enter__(self) -> Any:
        from ..analysis.dumps import read, sources

        self._files, refs = sources.open_location(self._path)
        try:
            ref = sources.select_dump(refs, self._path, self._args.step, self._args.rank)
            return read.read_index(self._files, ref)
        except BaseException:
            self._files.close()
            raise

    def __exit__(self, *exc: object) -> None:
        if self._files is not None:
            self._files.close()
