"""Argument types and options that several ``ascend-tune`` commands share, each defined once.

A type raises ``argparse.ArgumentTypeError``, which the parser prints on one line (exit 2); an ``add_*`` function
adds one option with the same name, type and help wherever it appears.
"""

from __future__ import annotations

import argparse
import inspect
from typing import Callable, Optional

from ..analysis.defaults import LOSS_GAP
from ..analysis.logs.formats import NAMES
from ..errors import ConfigError

FORCE_HELP = "replace output files that already exist (default: refuse)"


def add_command(subparsers: argparse._SubParsersAction, name: str, run: Callable[[argparse.Namespace], int], *,
                exits: Optional[tuple] = None, description: str = "") -> argparse.ArgumentParser:
    """Add the subcommand ``name``, run by ``run(args)`` (which returns the exit code).

    Like click, the command's words are ``run``'s docstring: its first line is the one-line help (lower-cased,
    without its full stop), the paragraphs after it the description (unless ``description`` is given).
    ``exits`` = (what exit 0 means, what exit 1 means) ends the description with the exit codes every analysis
    command shares (2: bad input).
    """
    summary, _, rest = inspect.cleandoc(run.__doc__ or name).partition("\n\n")
    summary = " ".join(summary.split())
    summary = summary[:-1] if summary.endswith(".") and not summary.endswith("...") else summary
    if summary[:1].isupper() and not summary[1:2].isupper():
        summary = summary[0].lower() + summary[1:]
    description = description or " ".join(rest.split())
    if exits:
        description = f"{description} Exit 0: {exits[0]}, 1: {exits[1]}, 2: bad input.".strip()
    parser = subparsers.add_parser(name, help=summary, description=description or None)
    parser.set_defaults(run=run)
    return parser


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


def fraction(text: str) -> float:
    """An argparse type: a positive finite number such as 0.05 (a threshold or a tolerance)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number such as 0.05, got {text!r}") from None
    if not value > 0 or value != value or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number such as 0.05, got {text!r}")
    return value


count = int_at_least(0)


def add_out(parser: argparse.ArgumentParser, help: str, *, metavar: str = "DIR", required: bool = False,
            default: Optional[str] = None, also: tuple = ()) -> None:
    """Add ``-o`` / ``--out`` (and the spellings in ``also``): where the command writes, as ``args.out``."""
    parser.add_argument("-o", "--out", *also, dest="out", metavar=metavar, required=required, default=default,
                        help=help)


def add_force(parser: argparse.ArgumentParser) -> None:
    """Add ``--force``: replace outputs that already exist instead of refusing them."""
    parser.add_argument("--force", action="store_true", help=FORCE_HELP)


def add_json(parser: argparse.ArgumentParser, what: str, instead_of: str = "") -> None:
    """Add ``--json``: print ``what`` (e.g. "the summary") as JSON, ``instead_of`` naming the text it replaces."""
    instead = f" instead of {instead_of}" if instead_of else ""
    parser.add_argument("--json", action="store_true", help=f"print {what} as JSON{instead}")


def add_threshold(parser: argparse.ArgumentParser) -> None:
    """Add ``--threshold``: the mean relative loss gap below which two runs are aligned."""
    parser.add_argument("--threshold", type=fraction, default=LOSS_GAP,
                        help=f"mean relative gap below which the runs are aligned (default: {LOSS_GAP:g} = "
                             f"{LOSS_GAP * 100:g}%%)")


def add_selectors(parser: argparse.ArgumentParser) -> None:
    """Add ``--step`` / ``--rank``: which dump to use when a location holds several."""
    parser.add_argument("--step", type=count, help="the step to use when the dump holds several")
    parser.add_argument("--rank", type=count, help="the rank to use when the dump holds several")


def add_jobs(parser: argparse.ArgumentParser) -> None:
    """Add ``-j`` / ``--jobs``: worker processes for the ranks of a multi-rank location."""
    parser.add_argument("-j", "--jobs", type=int_at_least(1), default=None, metavar="N",
                        help="worker processes for a location with several ranks or steps (default: the CPU count)")


LOG_FORMATS = ("auto", *NAMES)  # the registry's formats (analysis.logs.formats), and auto


def add_log_reading(parser: argparse.ArgumentParser, inputs: str, several: bool = True) -> None:
    """Add ``--format``, ``--loss-key`` and ``--tag``: how the training logs named ``inputs`` are read.

    With ``several`` inputs each is given once for all, or once per input in their order (``--format hf
    --format auto``).
    """
    each = f"; once for every {inputs}, or once per {inputs} in order" if several else f" (of {inputs})"
    parser.add_argument("--format", action="append", choices=LOG_FORMATS, metavar="FORMAT",
                        help="read the log as this format instead of recognising it: " + ", ".join(LOG_FORMATS)
                             + each)
    parser.add_argument("--loss-key", action="append", metavar="KEY",
                        help="the trainer_state.json key or metrics.csv column that is the training loss "
                             "(default: the guess, printed)" + each)
    parser.add_argument("--tag", action="append", metavar="TAG",
                        help="the TensorBoard scalar tag that is the training loss (default: the guess, printed)"
                             + each)


def log_reading(args: argparse.Namespace, count: int) -> list:
    """``count`` dicts of ``format``, ``loss_key``, ``tag`` for :func:`ascend_tune.analysis.logs.read.read_log`,
    one per input, from :func:`add_log_reading`'s options; a one-line error when an option is given a number of
    times that is neither 1 nor ``count``."""
    out: list = [{} for _ in range(count)]
    for option, name in (("--format", "format"), ("--loss-key", "loss_key"), ("--tag", "tag")):
        given = getattr(args, name) or []
        if len(given) not in (0, 1, count):
            raise ConfigError(f"{option} was given {len(given)} times for {count} input(s); give it once for all "
                              "or once per input")
        for i in range(count):
            value = given[0] if len(given) == 1 else (given[i] if given else None)
            out[i][name] = None if value == "auto" else value
    return out
