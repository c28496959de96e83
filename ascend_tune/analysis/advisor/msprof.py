"""Ascend's own advisor, ``msprof-analyze advisor all``, run on NPU profiler folders when it is installed.

msprof-analyze exits 0 even when it fails, so a run is judged by the files it leaves: ``mstt_advisor_<ts>.html``
(and ``log/mstt_advisor_<ts>.xlsx``). Its HTML is read back as text for our report. It is never a hard dependency:
when it is missing the report says how to add it (``pip install msprof-analyze``), and nothing fails.
"""

from __future__ import annotations

import glob
import importlib.util
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from html.parser import HTMLParser
from typing import Optional

from ..traces.find import ascend_pt_folder

TIMEOUT_S = 600
_MAX_SUMMARY_LINES = 60
_LEGEND = frozenset({"Performance Optimization Suggestions", "Optimization Priority:", "High", "Medium", "Low"})
# `msprof-analyze -V` prints a build URL with credentials: run only `advisor`, and keep only short tails of its log.
_ENTRY = "import sys; from msprof_analyze.cli.entrance import msprof_analyze_cli; sys.exit(msprof_analyze_cli())"


@dataclass(frozen=True)
class MsprofRun:
    """What ``msprof-analyze advisor all`` made of one ``*_ascend_pt`` folder."""

    folder: str
    status: str  # "ran" | "no output" | "not installed"
    output_dir: Optional[str] = None
    files: tuple = ()
    summary: tuple = ()  # lines of text from its HTML report
    message: str = ""


def ascend_pt_folders(trace_paths) -> tuple:
    """The ``*_ascend_pt`` folders whose ``ASCEND_PROFILER_OUTPUT/trace_view.json`` is among ``trace_paths``."""
    folders = (ascend_pt_folder(path) for path in trace_paths)
    return tuple(dict.fromkeys(folder for folder in folders if folder is not None))


def msprof_installed() -> bool:
    """Whether ``msprof_analyze`` can be imported here."""
    return importlib.util.find_spec("msprof_analyze") is not None


def run_msprof_advisor(folder: str, out_dir: Optional[str] = None) -> MsprofRun:
    """Run ``msprof-analyze advisor all -d folder -o out_dir -l en`` and read its report; never raises for its sake.

    folder: a ``*_ascend_pt`` profiler output folder.
    out_dir: where msprof-analyze writes; None runs it in a temporary folder that is removed afterwards.
    """
    if not msprof_installed():
        return MsprofRun(
            folder=folder,
            status="not installed",
            message="msprof-analyze is not installed; `pip install msprof-analyze` (or ascend-tune[msprof]) adds "
            "Ascend's own advisor, whose findings on NPU profiler folders then join this report",
        )
    if out_dir is None:
        with tempfile.TemporaryDirectory(prefix="msprof-advisor-") as scratch:
            run = _run(folder, scratch)
        note = "pass an output folder (-o) to keep msprof-analyze's files"
        return MsprofRun(folder, run.status, None, (), run.summary, f"{run.message} {note}".strip())
    try:
        os.makedirs(out_dir, exist_ok=True)
    except OSError as exc:
        return MsprofRun(folder, "no output", out_dir, message=f"cannot create {out_dir} for msprof-analyze: {exc}")
    return _run(folder, out_dir)


def _run(folder: str, out_dir: str) -> MsprofRun:
    command = [sys.executable, "-c", _ENTRY, "advisor", "all", "-d", folder, "-o", out_dir, "-l", "en"]
    started = time.time()
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT_S, stdin=subprocess.DEVNULL)
        log = (proc.stdout or "") + (proc.stderr or "")
    except subprocess.TimeoutExpired:
        log = f"msprof-analyze did not finish within {TIMEOUT_S} s"
    except OSError as exc:
        log = f"msprof-analyze could not start: {exc}"
    files = sorted(
        path
        for pattern in ("mstt_advisor_*.html", "mstt_advisor_*.xlsx")
        for path in glob.glob(os.path.join(out_dir, "**", pattern), recursive=True)
        if os.path.getmtime(path) >= started - 1.0  # a report left by an earlier run says nothing about this one
    )
    pages = [f for f in files if f.endswith(".html")]
    if not pages:
        return MsprofRun(folder, "no output", out_dir, tuple(files), (), _last_words(log))
    return MsprofRun(folder, "ran", out_dir, tuple(files), _html_summary(pages[-1]), "")


def _last_words(log: str) -> str:
    """The line that explains an empty run: its last error, else its last 'suggestion' line, else its last line."""
    lines = [line.strip() for line in log.splitlines() if line.strip() and "Security Warning" not in line]
    for marker in ("[ERROR]", "suggestion", ""):
        picked = [line for line in lines if marker in line]
        if picked:
            return "msprof-analyze wrote no report: " + picked[-1][-300:]
    return "msprof-analyze wrote no report and printed nothing"


class _TextOnly(HTMLParser):
    """Visible text, one line per block element or table row (cells joined by " | ")."""

    _BLOCKS = frozenset({"div", "p", "h1", "h2", "h3", "h4", "h5", "h6", "li", "tr", "br", "table", "pre"})

    def __init__(self) -> None:
        super().__init__()
        self.lines: list = []
        self._words: list = []
        self._skip = 0

    def _flush(self) -> None:
        if self._words:
            self.lines.append(" ".join(self._words))
            self._words = []

    def handle_starttag(self, tag, attrs) -> None:
        if tag in ("script", "style"):
            self._skip += 1
        elif tag in self._BLOCKS:
            self._flush()
        elif tag in ("td", "th") and self._words:
            self._words.append("|")

    def handle_endtag(self, tag) -> None:
        if tag in ("script", "style") and self._skip:
            self._skip -= 1
        elif tag in self._BLOCKS:
            self._flush()

    def handle_data(self, data) -> None:
        if not self._skip:
            self._words.extend(data.split())

    def close(self) -> None:
        super().close()
        self._flush()


def _html_summary(path: str) -> tuple:
    parser = _TextOnly()
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            parser.feed(fh.read())
        parser.close()
    except OSError:
        return ()
    lines = []
    for line in parser.lines:
        if line.startswith("Generated by"):
            break
        if line not in _LEGEND:
            lines.append(line)
    return tuple(lines[:_MAX_SUMMARY_LINES])
