"""The verdict tools' results as the lines the CLI prints, and their JSON (strict: NaN and inf become null)."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from typing import Any, Optional

from ..analysis.dumps import calls
from ..analysis.dumps.compare import DumpComparison
from ..analysis.dumps.overflow import OverflowReport
from ..analysis.dumps.replay import ReplayVerdict
from ..analysis.logs.compare import LossComparison
from ..analysis.logs.model import LossLog
from ..analysis.logs.ranks import SLOW_RANK
from ..analysis.logs.rates import RateStats
from ..analysis.logs.throughput import ThroughputReport
from ..formats.dump_layout import format_frame


def print_lines(lines: list) -> None:
    """Print ``lines``, one per line."""
    print("\n".join(lines))


def json_text(payload: dict) -> str:
    """``payload`` as indented strict JSON: NaN and inf become null, numpy scalars plain numbers."""
    return json.dumps(_finite(payload), indent=2, default=str)


def read_line(log: LossLog, label: str = "") -> str:
    """What was read of one log: its format and, where the format has a choice, the loss key and whether it was
    guessed (with the option that picks another)."""
    text = f"  {label + ' ' if label else ''}read as {log.kind_name}: {log.source}"
    key = log.loss_key
    if key is not None:
        how = f"guessed; {key.option} picks another" if key.guessed else f"given by {key.option}"
        others = f" of: {', '.join(key.others[:8])}" + (", ..." if len(key.others) > 8 else "") if key.others else ""
        text += f"; loss {key.name!r} ({how}{others if key.guessed else ''})"
    return text



_UNITS = {"step": "one loss per optimizer step", "log line": "one loss per log line",
          "log window": "one loss per log window (the per-step losses of the other run averaged over it)"}


def failed_rules(result: LossComparison, rule: str = "both") -> list:
    """The rules of ``rule`` (``seed``, ``noise`` or ``both``) the comparison fails."""
    failed = []
    if rule in ("seed", "both") and not result.aligned:
        failed.append("seed")
    if rule in ("noise", "both") and result.beyond_noise:
        failed.append("noise")
    return failed


def loss_lines(result: LossComparison, plots: tuple = (), logs: tuple = (), rule: str = "both") -> list:
    """The compare-loss verdict: what was read (``logs``: the base and target LossLog), how steps were paired,
    the gap numbers, each rule's verdict in one line (the seed's 5% rule, the noise rule), the command's verdict
    by ``rule``, the plots written."""
    how = "by optimizer step" if result.align == "step" else "line by line (the seed script's method)"
    lines = [
        f"compare-loss: base {result.base}",
        f"              target {result.target}",
    ]
    lines += [read_line(log, label) for log, label in zip(logs, ("base", "target"))
              if log.kind not in ("text", "jsonl")]
    lines += [
        f"  aligned {how}, {_UNITS.get(result.unit, result.unit)}",
        f"  steps               {result.pairing}",
        f"  compared            {result.compared}  (only in base {result.only_base}, only in target "
        f"{result.only_target}, excluded {result.excluded})",
        f"  mean absolute gap   {_g(result.mean_abs_gap)}",
        f"  mean relative gap   {_pct(result.mean_rel_gap)}  (Loss Gap percent)",
        f"  max relative gap    {_pct(result.max_rel_gap)}" + (
            f" at step {result.max_rel_gap_step}" if result.max_rel_gap_step is not None else ""),
        f"  final loss          base {_g(result.final_base)}, target {_g(result.final_target)}, gap "
        f"{_g(result.final_gap)} ({_pct(result.final_rel_gap)}) at step {result.final_step}",
    ]
    lines += grad_norm_lines(result)
    lines.append(f"  seed rule           {'ALIGNED' if result.aligned else 'NOT ALIGNED'}: the mean relative gap "
                 f"{_pct(result.mean_rel_gap)} is {'under' if result.mean_rel_gap < result.threshold else 'over'} "
                 f"{result.threshold:.2%}" + ("" if not result.target_nonfinite else ", and the target has inf/NaN "
                                              "losses"))
    if result.noise is not None and result.noise.steps:
        lines.append(f"  noise rule          {'NOT ALIGNED' if result.beyond_noise else 'ALIGNED'}: "
                     f"{result.noise.line()}")
    failed = failed_rules(result, rule)
    which = {"seed": "the seed rule", "noise": "the noise rule", "both": "the seed and the noise rules"}[rule]
    lines.append(f"  verdict             {'NOT ALIGNED' if failed else 'ALIGNED'} (by {which}"
                 + (f"; failed: {', '.join(failed)}" if failed else "") + ")")
    if plots:
        lines.append(f"  plots               {', '.join(plots)}")
    lines += [f"  note: {note}" for note in result.notes]
    return lines


def grad_norm_lines(result: LossComparison) -> list:
    """The gradient-norm lines of compare-loss (none when a log has no gradient norms)."""
    g = result.grad
    if g is None:
        return []
    loss_at = (f"step {result.first_parting_step}" if result.first_parting_step is not None else
               "no step")
    grad_at = f"step {g.first_parting_step}" if g.first_parting_step is not None else "no step"
    lines = [
        f"  grad norm gap       mean relative {_pct(g.mean_rel_gap)}, max {_pct(g.max_rel_gap)}"
        + (f" at step {g.max_rel_gap_step}" if g.max_rel_gap_step is not None else "") + f" ({g.compared} steps)",
        f"  first parting       grad norm at {grad_at}, loss at {loss_at} (relative gap > {result.threshold:.2%})",
    ]
    if result.grad_parts_first:
        lines.append(f"  grad norm parts first: look at step {g.first_parting_step} (dump it: precision=dict("
                     f"steps=[{g.first_parting_step}]) in both runs, then compare-dump)")
    return lines


def throughput_lines(report: ThroughputReport) -> list:
    """The perf table: steps/sec statistics and speed-up of each run."""
    header = (f"{'run':<40} {'lines':>6} {'median':>9} {'mean':>9} {'p10':>9} {'p90':>9} {'samples/s':>10} "
              f"{'speed-up':>8}")
    lines = [f"steps/sec per run (warm-up left out: a run's summary.json warmup_steps, else its first "
             f"{report.exclude_first} step(s))", header]
    for run in report.runs:
        s: Optional[RateStats] = run.steps_per_sec
        cells = [f"{s.median:9.3f}", f"{s.mean:9.3f}", f"{s.p10:9.3f}", f"{s.p90:9.3f}"] if s else ["n/a".rjust(9)] * 4
        samples = f"{run.samples_per_sec.median:10.1f}" if run.samples_per_sec else "-".rjust(10)
        speedup = f"{run.speedup:7.2f}x" if run.speedup else "-".rjust(8)
        lines.append(f"{_tail(run.source, 40):<40} {run.lines:>6} {' '.join(cells)} {samples} {speedup}")
    lines += [f"  note: {note}" for run in report.runs for note in run.notes]
    return lines


def rank_lines(run: str, ranks: tuple) -> list:
    """The straggler table of one multi-rank run."""
    lines = [f"ranks of {run} (slow: under {SLOW_RANK:.0%} of the ranks' median steps/sec)",
             f"{'rank':>6} {'median':>9} {'p10':>9} {'p90':>9} {'relative':>9}"]
    for r in ranks:
        s = r.steps_per_sec
        cells = f"{s.median:9.3f} {s.p10:9.3f} {s.p90:9.3f}" if s else " ".join(["n/a".rjust(9)] * 3)
        relative = f"{r.relative:8.2f}x" if r.relative is not None else "-".rjust(9)
        lines.append(f"{r.rank:>6} {cells} {relative}" + ("  SLOW" if r.slow else ""))
    return lines


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
        f"{result.count('error')} error (msprobe's rules); ops only in TARGET {result.only_target}, "
        f"only in BASE {result.only_base}",
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


def _g(value: float) -> str:
    return "n/a" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.6g}"


def _pct(value: float) -> str:
    return "n/a" if value is None or math.isnan(value) else f"{value * 100:.4f}%"


def _tail(text: str, width: int) -> str:
    return text if len(text) <= width else "..." + text[-(width - 3):]


def _finite(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    if hasattr(value, "item"):  # numpy scalars
        value = value.item()
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return None
    return value
