"""``ascend-tune``: thin subcommands over the package. Exit 0 = pass, 1 = a check failed, 2 = bad input."""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Callable, NoReturn, Optional

from ..errors import AscendTuneError

# Modules that add subcommands: each has add_commands(subparsers) and imports nothing heavy at module level.
_COMMAND_MODULES: tuple = (
    "ascend_tune.cli.traces",
    "ascend_tune.cli.dumps",
    "ascend_tune.cli.shapes",
    "ascend_tune.cli.advise",
    "ascend_tune.cli.report",
)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # One line, as for every other bad input; `--help` still shows the usage.
        self.exit(2, f"{self.prog}: error: {message}\n")


def int_at_least(minimum: int) -> Callable[[str], int]:
    """An argparse type: an integer >= ``minimum``, else a one-line error saying so."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = minimum - 1
        if value < minimum:
            wanted = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
            raise argparse.ArgumentTypeError(f"expected {wanted}, got {text!r}")
        return value

    return parse


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    parser = _Parser(prog="ascend-tune", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    demo = sub.add_parser("demo", help="train a small CNN on synthetic images under TrainingMonitor")
    demo.add_argument("--out", default="exp/demo", help="output folder (default: exp/demo)")
    demo.add_argument("--steps", type=int_at_least(1), default=100, help="optimizer steps (default: 100)")
    demo.set_defaults(run=_cmd_demo)

    dev = sub.add_parser("device", help="print the detected device and why better ones were not used")
    dev.set_defaults(run=_cmd_device)

    for module_name in _COMMAND_MODULES:
        importlib.import_module(module_name).add_commands(sub)
    return parser


def _cmd_demo(args: argparse.Namespace) -> int:
    from ..demo import run_demo

    written = run_demo(out=args.out, steps=args.steps)
    print("ascend-tune demo wrote:")
    for name, path in written.items():
        print(f"  {name:<14} {path}")
    return 0


def _cmd_device(args: argparse.Namespace) -> int:
    from ..device import detect_device

    info = detect_device()
    print(f"{info.kind}: {info.name} x{info.count} (torch {info.torch_version}, backend {info.backend_version})")
    for reason in info.fallback_reasons:
        print(f"  not used: {reason}")
    return 0


def main(argv: Optional[list] = None) -> int:
    """Entry point of the ``ascend-tune`` console script."""
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except AscendTuneError as exc:
        print(f"ascend-tune: error: {exc}", file=sys.stderr)
        return 2

