"""The loss and speed verdicts as the lines the CLI prints: ``compare-loss`` (each rule, the verdict, the gradient
norms), ``perf`` (the throughput, the ranks side by side, the rank the others wait for)."""

from __future__ import annotations

import math
from typing import Optional

from .compare import LossComparison
from .model import LossLog
from .ranks import SLOW_RANK, WaitVerdict
from .rates import RateStats
from .throughput import ThroughputReport


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


_RULE_NAMES = {"seed": "the 5% rule", "noise": "the noise rule"}


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
    the gap numbers, each rule's verdict in one line (the guide's 5% rule, the noise rule), the command's verdict
    by ``rule``, the plots written."""
    how = "by optimizer step" if result.align == "step" else "line by line (the guide's script's method)"
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
    lines.append(f"  5% rule             {'ALIGNED' if result.aligned else 'NOT ALIGNED'}: the mean relative gap "
                 f"{_pct(result.mean_rel_gap)} is {'under' if result.mean_rel_gap < result.threshold else 'over'} "
                 f"{result.threshold:.2%}" + ("" if not result.target_nonfinite else ", and the target has inf/NaN "
                                              "losses"))
    if result.noise is not None and result.noise.steps:
        lines.append(f"  noise rule          {'NOT ALIGNED' if result.beyond_noise else 'ALIGNED'}: "
                     f"{result.noise.line()}")
    failed = failed_rules(result, rule)
    which = {"seed": "the 5% rule", "noise": "the noise rule", "both": "the 5% and the noise rules"}[rule]
    lines.append(f"  verdict             {'NOT ALIGNED' if failed else 'ALIGNED'} (by {which}"
                 + (f"; failed: {' and '.join(_RULE_NAMES[f] for f in failed)}" if failed else "") + ")")
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


def wait_lines(verdict: WaitVerdict) -> list:
    """perf on a multi-rank run: each rank's host time per step, then the rank the others wait for."""
    lines = ["host time per step by rank (medians; backward holds the wait for the gradient all-reduce on CPU/gloo)",
             f"{'rank':>6} {'step ms':>9} {'data ms':>9} {'backward ms':>12} {'busy ms':>9}"]
    for r in verdict.ranks:
        mark = "  <- waited for" if r.rank == verdict.waited_for else ""
        lines.append(f"{r.rank:>6} {r.step * 1e3:>9.2f} {r.data * 1e3:>9.2f} {r.backward * 1e3:>12.2f} "
                     f"{r.busy * 1e3:>9.2f}{mark}")
    lines.append(f"  {verdict.answer()}")
    return lines


def _g(value: float) -> str:
    return "n/a" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.6g}"


def _pct(value: float) -> str:
    return "n/a" if value is None or math.isnan(value) else f"{value * 100:.4f}%"


def _tail(text: str, width: int) -> str:
    return text if len(text) <= width else "..." + text[-(width - 3):]
