"""compare-trace's comparison as files and text, and perf's slow-rank lines: ``trace_compare.csv`` (every row),
``trace_compare.json`` (the same and the verdict) and the terminal's text (the verdict, the kinds, the top rows of
each level, one-run-only ops, the top contributor's line)."""

from __future__ import annotations

import csv
import io
import os

from ...formats.writing import make_folder, refuse_existing, write_atomic, write_json_atomic
from .compare import UNATTRIBUTED, RunSide, TraceComparison
from .ranks import SlowRank

TRACE_COMPARE_CSV = "trace_compare.csv"
TRACE_COMPARE_JSON = "trace_compare.json"
COLUMNS = ("level", "name", "base_ms", "target_ms", "delta_ms", "share_of_gap", "ratio", "only_in", "beyond_noise")


def as_dict(result: TraceComparison, threshold: float) -> dict:
    """A JSON-ready dict: the verdict, both sides, every row, the top contributor and its next action."""
    return {
        "verdict": result.verdict(),
        "exit_code": result.exit_code(threshold),
        "threshold": threshold,
        "gap_ms": result.gap_ms,
        "relative_gap": result.relative_gap,
        "noise_ms": result.noise_ms,
        "slower": result.slower,
        "base": _side(result.base),
        "target": _side(result.target),
        "top": None if result.top is None else _row(result.top),
        "next": result.next_action,
        "top_line": result.top_line(),
        "notes": list(result.notes),
        "rows": [_row(r) for r in result.rows],
    }


def _side(side: RunSide) -> dict:
    return {"path": side.path, "device": side.device, "trace_kind": side.trace_kind, "steps": list(side.steps),
            "step_ms": list(side.step_ms), "median_ms": side.median_ms, "spread_ms": side.spread_ms,
            "module_scopes": side.scopes, "kinds_ms": side.rows["kind"]}


def _row(row) -> dict:
    return {"level": row.level, "name": row.name, "base_ms": row.base_ms, "target_ms": row.target_ms,
            "delta_ms": row.delta_ms, "share_of_gap": row.share, "ratio": row.ratio, "only_in": row.only_in,
            "beyond_noise": row.beyond_noise}


def write_outputs(result: TraceComparison, out_dir: str, threshold: float, force: bool = False) -> tuple:
    """Write ``trace_compare.csv`` and ``trace_compare.json`` into ``out_dir``; refuses existing files unless
    ``force``. Returns the two paths."""
    paths = (os.path.join(out_dir, TRACE_COMPARE_CSV), os.path.join(out_dir, TRACE_COMPARE_JSON))
    refuse_existing(paths, force)
    make_folder(out_dir)
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(COLUMNS)
    for row in result.rows:
        values = _row(row)
        writer.writerow(["" if values[c] is None else (f"{values[c]:.6g}" if isinstance(values[c], float)
                                                        else values[c]) for c in COLUMNS])
    write_atomic(paths[0], text.getvalue())
    write_json_atomic(paths[1], as_dict(result, threshold))
    return paths


def render_text(result: TraceComparison, top: int = 10) -> str:
    """The terminal's answer: the verdict first, the top contributor's line last."""
    b, t = result.base, result.target
    lines = [
        f"base:   {b.path} ({b.device}, {len(b.steps)} step(s), median {b.median_ms:.2f} ms, "
        f"spread ±{b.spread_ms:.2f})",
        f"target: {t.path} ({t.device}, {len(t.steps)} step(s), median {t.median_ms:.2f} ms, "
        f"spread ±{t.spread_ms:.2f})",
        result.verdict(),
    ]
    for level, title in (("kind", "Step by kind"), ("module", "By module"), ("op", "By op")):
        rows = [r for r in result.level_rows(level) if r.name == UNATTRIBUTED or r.base_ms or r.target_ms]
        if level != "kind":
            named = [r for r in rows if r.name != UNATTRIBUTED]
            if not named or (level == "module" and b.scopes == t.scopes == "none"):
                continue
            rows = named[:top] + ([r for r in rows if r.name == UNATTRIBUTED])
        lines.append(f"\n{title} (ms per step; * = beyond noise):")
        lines.append(f"  {'base':>9} {'target':>9} {'delta':>9} {'share':>6}  name")
        for r in rows:
            share = "" if r.share is None else f"{r.share:.0%}"
            mark = "*" if r.beyond_noise else " "
            lines.append(f"  {r.base_ms:9.3f} {r.target_ms:9.3f} {r.delta_ms:+9.3f} {share:>6}{mark} {r.name}"
                         + (f"  (only in the {r.only_in})" if r.only_in else ""))
    for side in ("target", "base"):
        only = result.one_sided(side)
        if only:
            names = ", ".join(f"{r.name} ({(r.target_ms or r.base_ms):.3f} ms)" for r in only[:top])
            more = f" and {len(only) - top} more" if len(only) > top else ""
            lines.append(f"\nOps only in the {side}: {names}{more}")
    lines.extend(f"note: {note}" for note in result.notes)
    lines.append("")
    lines.append(result.top_line())
    return "\n".join(lines) + "\n"


def slow_rank_lines(found: SlowRank) -> list:
    """perf on a multi-rank run with traces of every rank: per rank compute / communication / free, the answer."""
    lines = [f"traces by rank ({found.location}; ms summed over the profiled steps)",
             f"{'rank':>6} {'steps':>6} {'compute':>9} {'comm':>9} {'overlap':>9} {'free':>9} {'last':>5}"]
    for r in found.ranks:
        if r.error:
            lines.append(f"{r.rank:>6} unreadable: {r.error}")
            continue
        cells = " ".join(f"{r.total(f) / 1e3:>9.2f}" for f in ("compute", "communication", "overlapped", "free"))
        lines.append(f"{r.rank:>6} {len(r.steps):>6} {cells} {found.last.get(r.rank, 0):>5}")
    imbalance = ", ".join(f"{k} {v:.0%}" for k, v in found.imbalance.items())
    lines.append(f"  imbalance across ranks (max - min over mean; over 5% suggests a slow rank): {imbalance}")
    lines.append(f"  {found.answer()}")
    return lines
