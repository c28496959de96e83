"""The ``ascend-tune`` argument parser: a bad argument is one line and exit 2; each command family adds its own."""

from __future__ import annotations

import argparse
from typing import NoReturn

from . import advise, demo, dumps, experiment, health, logs, report, run, shapes, trace_compare, traces

# Each module has add_commands(subparsers) and imports nothing heavy at module level, so --help stays fast.
# The order is the order of `ascend-tune --help`.
COMMAND_MODULES: tuple = (run, demo, traces, logs, experiment, dumps, shapes, health, advise, trace_compare, report)

DESCRIPTION = "``ascend-tune``: thin subcommands over the package. Exit 0 = pass, 1 = a check failed, 2 = bad input."


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # One line, as for every other bad input; `--help` still shows the usage.
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand; each parsed namespace carries its handler as ``run``."""
    parser = _Parser(prog="ascend-tune", description=DESCRIPTION)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for module in COMMAND_MODULES:
        module.add_commands(sub)
    return parser
