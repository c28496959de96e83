"""``ascend-tune``: thin subcommands over the package, and the one place where errors become exit 2.

Exit 0 = pass, 1 = a check failed, 2 = bad input: an :class:`~ascend_tune.errors.AscendTuneError` or an
``OSError`` is printed as one line on stderr, never a traceback. The parser and the list of command modules are in
:mod:`.parser`, options several commands share in :mod:`.args`; one module per command family holds its commands.
"""

from __future__ import annotations

import os
import sys
from typing import Optional

from ..errors import AscendTuneError

# What a shell reports for a process that SIGPIPE ended: `ascend-tune parse DUMP OP | head` stopped reading early.
BROKEN_PIPE_EXIT = 141


def main(argv: Optional[list] = None) -> int:
    """Entry point of the ``ascend-tune`` console script: run one subcommand and return its exit status."""
    from .parser import build_parser

    try:
        args = build_parser().parse_args(argv)
        status = args.run(args)
        sys.stdout.flush()  # a reader that left early shows up here when the output fit in the buffer
        return status
    except BrokenPipeError:
        _silence_stdout()
        return BROKEN_PIPE_EXIT
    except AscendTuneError as exc:
        return _error(str(exc))
    except OSError as exc:
        where = f" {exc.filename}" if getattr(exc, "filename", None) else ""
        return _error(f"cannot access{where} ({exc.strerror or exc}); check the paths and permissions")


def _error(message: str) -> int:
    print(f"ascend-tune: error: {' '.join(message.splitlines())}", file=sys.stderr)
    return 2


def _silence_stdout() -> None:
    # Python's recipe (the signal module's "Note on SIGPIPE"): point stdout at devnull, so that the interpreter's
    # last flush of what is still buffered does not raise a second BrokenPipeError on the way out.
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (AttributeError, OSError, ValueError):
        pass  # stdout is no file (a test's capture): nothing of it will be flushed into the closed pipe
