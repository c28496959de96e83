"""Every public TrainingMonitor option and every subcommand is documented in docs/."""

from __future__ import annotations

import inspect
import pathlib
import re

from ascend_tune import TrainingMonitor
from ascend_tune.cli.parser import build_parser

DOCS = "\n".join(p.read_text() for p in sorted(pathlib.Path(__file__).parents[1].joinpath("docs").glob("*.md")))


def test_every_monitor_option_is_documented():
    options = [name for name, p in inspect.signature(TrainingMonitor).parameters.items() if p.kind != p.VAR_KEYWORD]
    assert len(options) > 10
    missing = [name for name in options if f"`{name}`" not in DOCS and f"`{name}=" not in DOCS]
    assert missing == []


def test_every_subcommand_is_documented():
    sub = next(a for a in build_parser()._actions if a.__class__.__name__ == "_SubParsersAction")
    names = sorted(sub.choices)
    assert {"demo", "device", "report", "compare-loss", "perf"} <= set(names)
    missing = [name for name in names if not re.search(rf"`(ascend-tune )?{re.escape(name)}[ `]", DOCS)]
    assert missing == []
