"""The dump verdicts as the lines the CLI prints: ``compare`` (the first divergence and its stack), ``ops``,
``overflow``, ``replay`` (and its JSON), and the every-rank verdict (one line per (step, rank), then the run's one
answer)."""

from __future__ import annotations

import math
from dataclasses import replace

from ...formats.dump_layout import format_frame
from . import calls
from .compare import DumpComparison
from .overflow import OverflowReport
from .ranks import UNREADABLE, RankFinding, RunFindings
from .replay import ReplayVerdict


def dump_lines(result: DumpComparison, written: tuple = ()) -> list:
    """The compare-dump verdict: row counts, the first divergence with its stack, PASS or DIVERGED."""
    lines = [
        f"compare-dump: base {result.base}",
        f"              target {result.target}",
        f"  {result.mode} mode, ops matched by {'API and call order' if result.fuzzy else 'name'}, arguments by "
        "parameter; "
        f"tolerance {'by dtype' if result.tolerance_override is None else f'{result.tolerance_override:g}'}",
        f"  written by: base {result.base_engine}, target {result.target_engine}",
        f"  rows {len(result.rows)}: {result.count('pass')} pass, {result.count('warning')} warning, "
        f"{result.count('error')} error (msprobe's rules{_precision_note(result)}); ops only in TARGET "
        f"{result.only_target}, only in BASE {result.only_base}",
    ]
    first = result.first
    if first is None:
        lines.append(f"  first divergence: none; {result.closeness()}")
    else:
        where = f" (in {first.parent})" if first.parent else ""
        lines.append(f"  first divergence: {first.op}{where}")
        lines.append(f"    why: {first.reason}")
        lines += _stack(first.stack)
    if written:
        lines.append(f"  wrote {', '.join(written)}")
    lines.append(f"  verdict: {'PASS' if result.passed else 'DIVERGED'}")
    return lines


def _precision_note(result: DumpComparison) -> str:
    n = result.errors_judged
    return (f"; {n} of them a value rule or a float dtype, judged here by the dtypes' rounding and what each op's "
            "inputs carried" if n else "")


def op_lines(label: str, ops: list) -> list:
    """What parse prints for each op: its parent, the user's stack frames and one row per argument slot (a tensor's
    dtype, shape and statistics; a non-tensor's type and value)."""
    lines = [f"{label}: {len(ops)} op(s)"]
    for op in ops:
        lines.append(f"{op.name}" + (f"  (in {op.parent})" if op.parent else ""))
        lines += _stack(op.user_frames(), "  stack:")
        lines.append(f"  {'slot':<28} {'dtype':<16} {'shape':<18} {'max':>12} {'min':>12} {'mean':>12} {'norm':>12}")
        api = calls.api_of(op.name)
        for leaf in op.leaves:
            _, param = calls.argument(api, leaf.slot) if leaf.role == "input" else (None, None)
            if param is not None and param.name not in leaf.slot.split("."):  # input.4 -> "input.4 (eps)"
                leaf = replace(leaf, slot=f"{leaf.slot} ({param.name})")
            if leaf.kind == "tensor":
                stats = " ".join(f"{_g(v):>12}" for v in leaf.stats) if leaf.has_stats else "n/a"
                shape = str(list(leaf.shape)) if leaf.shape is not None else "?"
                lines.append(f"  {leaf.slot:<28} {leaf.dtype:<16} {shape:<18} {stats}")
            elif leaf.kind == "none":
                lines.append(f"  {leaf.slot:<28} {'None':<16} {'':<18} value None")
            else:
                kind = leaf.dtype[len("<class '"):-2] if leaf.dtype.startswith("<class '") else leaf.dtype
                lines.append(f"  {leaf.slot:<28} {kind:<16} {'':<18} value {leaf.value!r}")
    return lines


def overflow_lines(report: OverflowReport) -> list:
    """What overflow prints: the first op with inf/NaN, whether it produced them, and its stack."""
    lines = [f"overflow: {report.dump}: {report.checked}, {report.overflowing_ops} with inf/NaN"]
    first = report.first
    if first is None:
        lines.append("  no overflow: no inf/NaN in any op")
        return lines
    where = f" (in {first.parent})" if first.parent else ""
    lines.append(f"  first inf/NaN: {first.name}{where}")
    if first.produced_here:
        lines.append(f"    produced here: its inputs are finite, {', '.join(first.outputs)} hold inf/NaN")
    else:
        lines.append(f"    its inputs already hold inf/NaN ({', '.join(first.inputs)}): produced before this op, "
                     "in code the dump does not record")
    lines += _stack(first.stack_text)
    return lines


MAX_SUSPECT_LINES = 20


def replay_lines(verdict: ReplayVerdict) -> list:
    """What replay prints: per replayed step the counts, the first suspect with its frames, the other suspects."""
    lines = [f"replay: {verdict.location}: {len(verdict.reports)} replayed step(s)"]
    for report in verdict.reports:
        lines.append(f"  step {report.step} rank {report.rank}: {report.checked} call(s) checked on the CPU in "
                     f"float64, {report.skipped} skipped, {len(report.suspects)} suspect(s)")
        for reason, count in report.skip_reasons[:3]:
            lines.append(f"    skipped {count}: {reason}")
        first = report.first_suspect
        if first is None:
            lines.append("    no suspect: every checked call agrees with the CPU within its dtype's standard")
            continue
        lines.append(f"    first suspect: {first.name} ({first.dtype} {list(first.shape)})")
        lines.append(f"      why: {first.reason}")
        if first.standard is not None:
            lines.append(f"      standard: {first.standard.text()}")
        lines += _stack(tuple(format_frame(f.file, f.line, f.function, f.code) for f in first.stack), "      at:")
        for row in report.suspects[1:MAX_SUSPECT_LINES]:
            m = row.metrics
            numbers = f"err_ratio {m.err_ratio:.3g}, norm_err {m.norm_err:.3g}" if m else ""
            lines.append(f"    suspect: {row.name} ({row.dtype}) {numbers}")
        if len(report.suspects) > MAX_SUSPECT_LINES:
            lines.append(f"    ... {len(report.suspects) - MAX_SUSPECT_LINES} more in {report.source}")
    if len({r.rank for r in verdict.reports}) > 1 and verdict.first is not None:  # every rank: the run's first
        report, row = verdict.first
        lines.append(f"  first suspect of the run: rank {report.rank}, step {report.step}, {row.name}")
    lines.append(f"  verdict: {'SUSPECTS' if verdict.first else 'PASS'}")
    return lines


def replay_json(verdict: ReplayVerdict) -> dict:
    """What replay --json prints: the verdict, the first suspect, and each step's counts and suspects."""
    first = verdict.first
    return {
        "location": verdict.location, "passed": first is None,
        "first_suspect": None if first is None else {"step": first[0].step, "rank": first[0].rank,
                                                     **first[1].as_dict()},
        "reports": [{"source": r.source, "step": r.step, "rank": r.rank, "calls": r.calls, "checked": r.checked,
                     "skipped": r.skipped, "skip_reasons": dict(r.skip_reasons),
                     "suspects": [s.as_dict() for s in r.suspects]} for r in verdict.reports],
    }


def _stack(frames: tuple, title: str = "    at:") -> list:
    if not frames:
        return [f"{title} (no user frames in the dump's stack)"]
    out = []
    for i, frame in enumerate(frames[:8]):
        head, _, code = frame.partition(", \n")
        prefix = title if i == 0 else " " * len(title)
        out.append(f"{prefix} {head}")
        if code.strip():
            out.append(f"{' ' * len(title)}     {code.strip()}")
    return out


def findings_lines(found: RunFindings, written: tuple = ()) -> list:
    """compare-dump / overflow over a whole multi-rank location."""
    what = "compare-dump" if found.task == "compare" else "overflow"
    places = len({r.rank for r in found.ranks}), len({r.step for r in found.ranks})
    lines = [f"{what}: {' vs '.join(found.locations)}",
             f"  {len(found.ranks)} dump(s): {places[0]} rank(s) x {places[1]} step(s), {found.readable} readable, "
             f"{found.jobs} worker process(es)"]
    for r in found.ranks:
        lines.append(f"  {_place(r):<16} {_verdict(r)}")
    first = found.first
    if first is None:
        none = "no divergence on any rank" if found.task == "compare" else "no inf/NaN on any rank"
        lines.append(f"  first {'divergence' if found.task == 'compare' else 'inf/NaN'} of the run: none, {none}")
    else:
        lines.append(f"  first {'divergence' if found.task == 'compare' else 'inf/NaN'} of the run: rank {first.rank}, "
                     f"step {first.step}, {first.op}")
        lines.append(f"    why: {_why(first, found)}")
        lines += [f"    at: {f.partition(', ' + chr(10))[0].rstrip(', ')}" for f in first.stack[:3]]
    if written:
        lines.append(f"  wrote {', '.join(written)}")
    verdict = "PASS" if first is None else ("DIVERGED" if found.task == "compare" else "OVERFLOW")
    lines.append(f"  verdict: {verdict}")
    return lines


def unreadable_lines(found: RunFindings) -> list:
    """One line per dump that could not be read (printed on stderr)."""
    return [f"ascend-tune: {_place(r)}: {r.message}" for r in found.ranks if r.status == UNREADABLE]


def _place(r: RankFinding) -> str:
    return " ".join(p for p in ("" if r.rank is None else f"rank {r.rank}", "" if r.step is None else f"step {r.step}")
                    if p) or "."


def _verdict(r: RankFinding) -> str:
    if r.status == "agree":
        return f"agrees ({r.ops} ops)"
    if r.status == "clean":
        return f"no inf/NaN ({r.ops} calls)"
    if r.status in ("diverge", "overflow"):
        after = f", after {r.collectives_before} collective(s)" if r.collectives_before else ""
        return f"{'diverges' if r.status == 'diverge' else 'inf/NaN'} at {r.op} ({r.kind}{after})"
    if r.status == UNREADABLE:
        return "unreadable (see stderr)"
    return f"{r.status}: not compared"


def _why(first: RankFinding, found: RunFindings) -> str:
    others = [r for r in found.ranks if r.found and r is not first]
    when = ("before its first collective" if first.collectives_before == 0 else
            f"between its collectives {first.collectives_before} and {first.collectives_before + 1}")
    own = "its own" if not first.through_collective else "arrived through a collective"
    text = f"the earliest step with a finding; on rank {first.rank} {when} ({own}): {first.reason or first.kind}"
    if others:
        ranks = ", ".join(str(r) for r in sorted({r.rank for r in others if r.rank is not None}))
        text += f"; the {len(others)} other finding(s) (rank(s) {ranks}) come later in the run's order"
    return text


def _g(value: float) -> str:
    return "n/a" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.6g}"
