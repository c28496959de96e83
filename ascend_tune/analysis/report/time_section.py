"""The alignment page's "Where the time goes": the two runs' traces compared (``ascend-tune compare-trace``).

A stacked bar per run by kind, the top-10 rows of the most telling level (modules when both traces have module
scopes, else ops) with the unattributed row, and the top contributor's line; the section's next line is its next
action. Built only when both runs have traces under ``profile/``.
"""

from __future__ import annotations

import os
from typing import Optional

from ...errors import InputError
from ..trace_compare.compare import UNATTRIBUTED, TraceComparison

TITLE = "Where the time goes"
FIGURE = "time by kind"
CAPTION = ("Each run's median profiled step split by kind (ms): the segment that grew from the reference to this "
           "run is where the time went; the table below names the modules or ops.")
TOP_ROWS = 10


def compare_runs(run: str, baseline: str, notes: list) -> Optional[TraceComparison]:
    """The comparison of the baseline's traces with the run's, None when either has none (or they do not read)."""
    from ..trace_compare.pair import compare_traces

    base_dir = baseline if os.path.isdir(baseline) else os.path.dirname(os.path.abspath(baseline))
    folders = [os.path.join(folder, "profile") for folder in (base_dir, run)]
    if not all(os.path.isdir(folder) for folder in folders):
        return None
    try:
        return compare_traces(*folders, rank=0 if _has_rank0(folders) else None)
    except InputError as exc:
        notes.append(f"the two runs' traces could not be compared: {exc}")
        return None


def _has_rank0(folders: list) -> bool:
    return all(os.path.isdir(os.path.join(folder, "rank0")) for folder in folders)


def section_rows(c: TraceComparison) -> tuple:
    """``(rows, table)`` of the section: the verdict, each run's median step, the top contributor's line; the
    table of the top rows of one level and its unattributed row."""
    rows = [
        c.verdict(),
        f"reference: median step {c.base.median_ms:.2f} ms over {len(c.base.steps)} step(s) ({c.base.device}); "
        f"this run: {c.target.median_ms:.2f} ms over {len(c.target.steps)} ({c.target.device})",
        c.top_summary(),
    ]
    rows += [f"note: {note}" for note in c.notes]
    level = "module" if c.base.scopes != "none" and c.target.scopes != "none" else "op"
    ranked = [r for r in c.level_rows(level) if r.name != UNATTRIBUTED][:TOP_ROWS]
    ranked += [r for r in c.level_rows(level) if r.name == UNATTRIBUTED]
    header = (level, "reference ms", "this run ms", "delta ms", "share of gap", "beyond noise")
    table = [(r.name + (f" (only in the {'reference' if r.only_in == 'base' else 'run'})" if r.only_in else ""),
              f"{r.base_ms:.3f}", f"{r.target_ms:.3f}", f"{r.delta_ms:+.3f}",
              "" if r.share is None else f"{r.share:.0%}", "yes" if r.beyond_noise else "")
             for r in ranked]
    return rows, (header, table)
