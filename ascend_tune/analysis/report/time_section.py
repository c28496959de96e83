"""The alignment page's "Where the time goes": the two runs' traces compared (``ascend-tune compare-trace``).

A stacked bar per run by kind, the top-10 rows of the most telling level (modules when both traces have module
scopes, else ops) with the unattributed row, and the top contributor's line; the section's next line is its next
action. Built only when both runs have traces under ``profile/``.
"""

from __future__ import annotations

import os
from typing import Any, Optional

from ...errors import InputError
from ..traces.compare import UNATTRIBUTED, TraceComparison

TITLE = "Where the time goes"
FIGURE = "time by kind"
CAPTION = ("Each run's median profiled step split by kind (ms): the segment that grew from the reference to this "
           "run is where the time went; the table below names the modules or ops.")
TOP_ROWS = 10


def compare_runs(run: str, baseline: str, notes: list) -> Optional[TraceComparison]:
    """The comparison of the baseline's traces with the run's, None when either has none (or they do not read)."""
    from ..traces.pair import compare_traces

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


def section_rows(c: TraceComparison, alignment: Optional[Any] = None, run_rates: Optional[Any] = None) -> tuple:
    """``(rows, table, next)`` of the section: the verdict, each run's median step (traced, and from its steps/sec),
    the top contributor's line; the table of the top rows of one level and its unattributed row; the next line.

    ``alignment`` (the reference's side, its speed ratio) and ``run_rates`` (this run's steps/sec statistics) make
    the section tell the story the throughput measured: where the traced steps do not show the runs' gap, it says
    so, and what to trace instead, rather than "no slowdown"."""
    speed = alignment.speed if alignment is not None else None
    verdict, next_line = c.verdict(), c.next_action
    if speed is not None and speed.slower and not c.slower:
        verdict = (f"the traced steps do not show the gap the runs measured (this run {speed.text()} the reference's "
                   f"steps/sec): traced, this run {c.gap_ms:+.2f} ms per step ({c.relative_gap:+.1%}) against a noise "
                   f"of ±{c.noise_ms:.2f} ms")
        next_line = (f"trace more steps past warm-up in both runs, e.g. profile=dict(skip_first=10, active="
                     f"{max(2 * len(c.base.steps), 8)}), so the traced steps show the gap; then compare them again")
    elif speed is not None and not speed.slower and c.slower:
        verdict = (f"the traced steps are slower by {c.gap_ms:+.2f} ms ({c.relative_gap:+.1%}, beyond their noise "
                   f"±{c.noise_ms:.2f} ms), but the runs' steps/sec are {speed.verdict()} ({speed.text()}): the "
                   "traced steps are not the runs' steady state")
        next_line = "trace steps past warm-up in both runs (profile=dict(skip_first=10)) before acting on a module"
    rows = [verdict, f"reference: median step {c.base.median_ms:.2f} ms over {len(c.base.steps)} traced step(s) "
                     f"({c.base.device}); this run: {c.target.median_ms:.2f} ms over {len(c.target.steps)} "
                     f"({c.target.device})"]
    steady = _steady_steps(alignment, run_rates)
    if steady:
        rows.append(steady + "; traced steps also carry the profiler's own cost")
    rows.append(c.top_summary())
    rows += [f"note: {note}" for note in c.notes]
    level = "module" if c.base.scopes != "none" and c.target.scopes != "none" else "op"
    ranked = [r for r in c.level_rows(level) if r.name != UNATTRIBUTED][:TOP_ROWS]
    ranked += [r for r in c.level_rows(level) if r.name == UNATTRIBUTED]
    header = (level, "reference ms", "this run ms", "delta ms", "share of gap", "beyond noise")
    table = [(r.name + (f" (only in the {'reference' if r.only_in == 'base' else 'run'})" if r.only_in else ""),
              f"{r.base_ms:.3f}", f"{r.target_ms:.3f}", f"{r.delta_ms:+.3f}",
              "" if r.share is None else f"{r.share:.0%}", "yes" if r.beyond_noise else "")
             for r in ranked]
    return rows, (header, table), next_line


def _steady_steps(alignment: Optional[Any], run_rates: Optional[Any]) -> str:
    """``their steps/sec give median steps of A ms (reference) and B ms (this run)``, or "" when unknown."""
    base = alignment.throughput.steps_per_sec if alignment is not None else None
    target = run_rates.steps_per_sec if run_rates is not None else None
    if not (base and target and base.median > 0 and target.median > 0):
        return ""
    return (f"their steps/sec give median steps of {1e3 / base.median:.2f} ms (reference) and "
            f"{1e3 / target.median:.2f} ms (this run) over every steady step")
