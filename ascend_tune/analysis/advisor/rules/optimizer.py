"""Rule ``unfused-optimizer``: a per-parameter optimizer loop that a fused (or foreach) optimizer replaces."""

from __future__ import annotations

from collections import defaultdict

from ...traces.model import Trace
from ..findings import Finding, median, step_label, step_windows

MIN_OPTIMIZER_OPS = 20  # per step: above this a per-parameter loop is worth fusing

# torch.optim class -> torch_npu's fused twin (notes/anchors-ascend.md §4.1)
NPU_FUSED = {
    "SGD": "NpuFusedSGD", "Adam": "NpuFusedAdam", "AdamW": "NpuFusedAdamW", "Adadelta": "NpuFusedAdadelta",
    "RMSprop": "NpuFusedRMSprop", "Lamb": "NpuFusedLamb", "AdamP": "NpuFusedAdamP", "BertAdam": "NpuFusedBertAdam",
    "RMSpropTF": "NpuFusedRMSpropTF",
}
TORCH_FUSED = frozenset({"SGD", "Adam", "AdamW", "Adagrad"})  # accept fused=True in torch 2.13, CPU included
TORCH_FOREACH = frozenset({
    "ASGD", "Adadelta", "Adafactor", "Adagrad", "Adam", "AdamW", "Adamax", "NAdam", "RAdam", "RMSprop", "Rprop", "SGD",
})


def unfused_optimizer(trace: Trace) -> list:
    """Many small ops under ``Optimizer.step#...`` each step: a per-parameter loop a fused optimizer replaces."""
    per_class: dict = defaultdict(list)  # class -> [(step, step_us, opt_us, [op durations], batched)]
    for step, window in step_windows(trace):
        for index in window:
            event = trace.events[index]
            if event.role != "host" or not event.name.startswith("Optimizer.step#"):
                continue
            durations, batched = [], False
            for inner in range(index + 1, len(trace.events)):
                op = trace.events[inner]
                if op.ts > event.end:
                    break
                if op.tid == event.tid and op.is_op and trace.op_parent(inner) < 0 and index in trace.ancestors(inner):
                    durations.append(op.dur)
                    batched = batched or "_foreach_" in op.name or "_fused_" in op.name
            optimizer = event.name[len("Optimizer.step#"):].split(".")[0]
            per_class[optimizer].append((step, step.dur, event.dur, durations, batched))
    findings = []
    for optimizer, records in per_class.items():
        if optimizer.startswith(("NpuFused", "Fused")) or any(r[4] for r in records):
            continue
        counts = [len(r[3]) for r in records]
        if median(counts) < MIN_OPTIMIZER_OPS:
            continue
        worst = max(records, key=lambda r: len(r[3]))
        step, step_us, opt_us, durations, _ = worst
        floor = sorted(durations)[len(durations) // 10]  # the shortest ops are almost pure dispatch cost
        arithmetic_us = sum(max(d - floor, 0.0) for d in durations)
        saving_ms = max(opt_us - arithmetic_us, 0.0) / 1e3
        findings.append(Finding(
            rule="unfused-optimizer",
            severity="warning",
            title=f"Unfused optimizer: {optimizer}.step runs {int(median(counts))} ops per step",
            evidence=(
                f"Optimizer.step#{optimizer}.step ran {len(durations)} ops in {step_label(step.number)} "
                f"(median {int(median(counts))} over {len(records)} steps), median op {median(durations):.1f} µs; "
                f"the step took {opt_us / 1e3:.2f} ms, {opt_us / step_us:.0%} of the step. A fused optimizer "
                f"runs one kernel per parameter group instead: about {saving_ms:.2f} ms per step would go "
                f"(the optimizer time minus the arithmetic of its {len(durations)} ops)."
            ),
            fix=_optimizer_fix(optimizer),
            trace=trace.name,
            step=step.number,
            saving_ms=saving_ms,
        ))
    return findings


def _optimizer_fix(optimizer: str) -> str:
    lines = []
    if optimizer in TORCH_FUSED:
        lines.append(f"optimizer = torch.optim.{optimizer}(model.parameters(), lr=lr, fused=True)  # or foreach=True")
    elif optimizer in TORCH_FOREACH:
        lines.append(f"optimizer = torch.optim.{optimizer}(model.parameters(), lr=lr, foreach=True)")
    else:
        lines.append(f"# {optimizer} has no foreach/fused mode in torch.optim: batch its per-parameter update")
    if optimizer in NPU_FUSED:
        lines += [
            "# on Ascend, torch_npu's fused twin (float32/float16 parameters only):",
            f"optimizer = torch_npu.optim.{NPU_FUSED[optimizer]}(model.parameters(), lr=lr)",
        ]
    return "\n".join(lines)
