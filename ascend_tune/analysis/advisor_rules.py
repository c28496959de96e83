"""The advisor's rules on where step time goes: optimizer, op dispatch, DataLoader, shapes and compilation.

Thresholds follow msprof-analyze's advisor where it has one (DataLoader 10 ms per step, 20 operator compilations,
20 SyncBatchNorm, synchronize/launch ratio 0.5; notes/anchors-ascend.md §3) and are ours where it has none; each
is a named constant below. The rules on syncs live in ``advisor_sync_rules``; ``RULES`` lists them all.
"""

from __future__ import annotations

from collections import defaultdict

from .advisor_findings import Finding, median, step_label, step_windows
from .advisor_steps import device_busy_us, is_dataloader
from .advisor_sync_rules import host_syncs, launch_blocking, sync_batchnorm
from .traces.model import Trace

MIN_OPTIMIZER_OPS = 20  # per step: above this a per-parameter loop is worth fusing
MANY_OPS_PER_STEP = 500  # top-level ops per step for the dispatch-bound rule
SMALL_OP_US = 20.0  # an op this short is mostly dispatch cost, on an NPU mostly launch cost
SMALL_OPS_SHARE = 0.3  # small ops filling this share of the step make it dispatch-bound
DEVICE_IDLE_SHARE = 0.5  # device busy under this share of the step: it waits for the host
NPU_LAUNCH_US = 10.0  # order of the host cost to launch one op on an NPU (aclnn two-phase launch)
DATALOADER_MS = 10.0  # msprof-analyze's dataloader_duration_threshold
DATALOADER_SHARE = 0.10
DATALOADER_FLOOR_MS = 1.0  # below this a loader is not worth a finding, whatever its share of a tiny step
MIN_SHAPES = 3  # distinct input shapes of one op across steps before it counts as dynamic
MAX_OP_COMPILE = 20  # msprof-analyze's MAX_OP_COMPILE_NUM

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


# -- unfused optimizer ------------------------------------------------------------------------------------------

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


# -- dispatch-bound small ops -----------------------------------------------------------------------------------

def dispatch_bound(trace: Trace) -> list:
    """Many short ops per step: the host's per-op cost (on an NPU, the launch) sets the step time."""
    records = []
    for step, window in step_windows(trace):
        durations = [
            trace.events[index].dur for index in window
            if trace.events[index].is_op and trace.op_parent(index) < 0
        ]
        records.append((step, durations, device_busy_us(trace, step)))
    if not records:
        return []
    count = median(len(r[1]) for r in records)
    median_us = median(d for r in records for d in r[1])
    if count < MANY_OPS_PER_STEP or median_us > SMALL_OP_US:
        return []
    step, durations, busy = max(records, key=lambda r: len(r[1]))
    small_us = sum(d for d in durations if d <= SMALL_OP_US)
    evidence = (
        f"{len(durations)} top-level ops in {step_label(step.number)} (median {int(count)} per step), "
        f"median op {median_us:.1f} µs; ops of ≤ {SMALL_OP_US:.0f} µs take {small_us / 1e3:.2f} ms, "
        f"{small_us / step.dur:.0%} of the {step.dur / 1e3:.2f} ms step."
    )
    if busy is not None:
        evidence += f" Host time {step.dur / 1e3:.2f} ms vs device busy {busy / 1e3:.2f} ms ({busy / step.dur:.0%})."
        severe = busy < DEVICE_IDLE_SHARE * step.dur
    else:
        evidence += (
            f" No device timeline here; at ~{NPU_LAUNCH_US:.0f} µs per launch an NPU needs "
            f"≥ {len(durations) * NPU_LAUNCH_US / 1e3:.1f} ms of host time per step just to launch them."
        )
        severe = small_us >= SMALL_OPS_SHARE * step.dur
    return [Finding(
        rule="dispatch-bound",
        severity="warning" if severe else "info",
        title=f"Dispatch-bound: {int(count)} small ops per step (median {median_us:.1f} µs)",
        evidence=evidence,
        fix=(
            "model = torch.compile(model)  # fuses chains of small ops into few kernels\n"
            "# or fewer, larger ops: a larger batch; fused layers on Ascend such as\n"
            "# torch_npu.npu_rms_norm, torch_npu.npu_fusion_attention, torch_npu.npu_swiglu"
        ),
        trace=trace.name,
        step=step.number,
    )]


# -- slow dataloader --------------------------------------------------------------------------------------------

def slow_dataloader(trace: Trace) -> list:
    """``enumerate(DataLoader)#...__next__`` over 10 ms, or over 10% of the step, per step."""
    records = []
    names = set()
    for step, window in step_windows(trace):
        total = 0.0
        for index in window:
            event = trace.events[index]
            if event.role == "host" and is_dataloader(event.name):
                if not any(is_dataloader(trace.events[p].name) for p in trace.host_ancestors(index)):
                    total += event.dur
                    names.add(event.name)
        records.append((step, total))
    loader_ms = median(r[1] for r in records) / 1e3
    step_ms = median(r[0].dur for r in records) / 1e3
    if not names or loader_ms < DATALOADER_FLOOR_MS:
        return []
    if loader_ms < DATALOADER_MS and loader_ms < DATALOADER_SHARE * step_ms:
        return []
    step, worst = max(records, key=lambda r: r[1])
    single = any("SingleProcess" in name for name in names)
    return [Finding(
        rule="slow-dataloader",
        severity="warning",
        title=f"Slow DataLoader: {loader_ms:.1f} ms per step",
        evidence=(
            f"{sorted(names)[0]} took {loader_ms:.1f} ms per step (median over {len(records)} steps), "
            f"{loader_ms / step_ms:.0%} of a {step_ms:.1f} ms step; worst {worst / 1e3:.1f} ms in "
            f"{step_label(step.number)}. Threshold: {DATALOADER_MS:.0f} ms or {DATALOADER_SHARE:.0%} of the step."
            + (" The loader runs in the training process (num_workers=0)." if single else "")
        ),
        fix=(
            "loader = DataLoader(dataset, batch_size=batch_size, shuffle=True,\n"
            "                    num_workers=4,            # load batches in parallel worker processes\n"
            "                    pin_memory=True,          # faster, asynchronous host-to-device copies\n"
            "                    persistent_workers=True,  # no worker start-up at every epoch\n"
            "                    prefetch_factor=4)        # batches each worker keeps ready\n"
            "# slow __getitem__ / collate_fn (decoding, augmentation)? move it offline or into the workers"
        ),
        trace=trace.name,
        step=step.number,
    )]


# -- dynamic shapes and operator compilation --------------------------------------------------------------------

def dynamic_shapes(trace: Trace) -> list:
    """The same op sees new input shapes step after step (needs ``record_shapes=True``)."""
    if not trace.has_shapes or len(trace.steps) < 2:
        return []
    seen: dict = defaultdict(list)  # op -> [set of shape signatures per step]
    for _step, window in step_windows(trace):
        per_step: dict = defaultdict(set)
        for index in window:
            event = trace.events[index]
            if event.is_op and trace.op_parent(index) < 0 and "Input Dims" in event.args:
                per_step[event.name].add(str(event.args["Input Dims"]))
        for name, shapes in per_step.items():
            seen[name].append((_step, shapes))
    dynamic = []
    for name, records in seen.items():
        known: set = set(records[0][1])
        new_steps = []
        for step, shapes in records[1:]:
            if shapes - known:
                new_steps.append(step)
            known |= shapes
        if len(known) >= MIN_SHAPES and len(new_steps) >= max(2, (len(records) - 1) / 2):
            dynamic.append((name, len(known), new_steps, records))
    if not dynamic:
        return []
    dynamic.sort(key=lambda d: (-len(d[2]), -d[1], d[0]))
    names = ", ".join(d[0] for d in dynamic[:8]) + (", ..." if len(dynamic) > 8 else "")
    examples = "; ".join(
        f"{name}: {count} shapes, new ones in {len(new)} of {len(records) - 1} later steps "
        f"(e.g. {_first_dims(records[0][1])} → {_first_dims(records[-1][1])})"
        for name, count, new, records in dynamic[:2]
    )
    first_new = [d[2][0].number for d in dynamic if d[2][0].number is not None]
    return [Finding(
        rule="dynamic-shapes",
        severity="warning",
        title=f"Dynamic shapes: {len(dynamic)} ops change input shape from step to step",
        evidence=f"{len(dynamic)} op types saw new input shapes across {len(trace.steps)} steps ({names}). "
        f"{examples}. "
        "On an NPU each new shape can mean a new operator compilation.",
        fix=(
            "# pad every batch to one length (or a few buckets) so shapes repeat\n"
            "x = torch.nn.functional.pad(x, (0, max_len - x.shape[-1]))\n"
            "# on Ascend, use the prebuilt binary kernels instead of compiling per shape:\n"
            "torch_npu.npu.set_compile_mode(jit_compile=False)\n"
            "torch_npu.npu.config.allow_internal_format = False"
        ),
        trace=trace.name,
        step=min(first_new) if first_new else None,
    )]


def _first_dims(shapes: set) -> str:
    text = sorted(shapes)[0]
    return text if len(text) <= 60 else text[:57] + "..."


def op_compile(trace: Trace) -> list:
    """Many ``aclopCompileAndExecute`` calls: the NPU compiles operators online (jit_compile=True or new shapes)."""
    compiles = [
        e for e in trace.events
        if e.name.endswith("aclopCompileAndExecute") or e.args.get("id") == "aclopCompileAndExecute"
    ]
    if len(compiles) < MAX_OP_COMPILE:
        return []
    per_step = [(step, sum(1 for e in compiles if step.ts <= e.ts < step.end)) for step in trace.steps]
    step, worst = max(per_step, key=lambda r: r[1])
    total_ms = sum(e.dur for e in compiles) / 1e3
    return [Finding(
        rule="op-compile",
        severity="warning",
        title=f"Operator compilation: {len(compiles)} aclopCompileAndExecute calls",
        evidence=(
            f"{len(compiles)} AscendCL@aclopCompileAndExecute calls took {total_ms:.1f} ms in all; "
            f"{worst} of them in {step_label(step.number)}. msprof-analyze flags {MAX_OP_COMPILE} or more."
        ),
        fix=(
            "import torch_npu\n"
            "torch_npu.npu.set_compile_mode(jit_compile=False)  # binary kernels, no online compilation\n"
            "torch_npu.npu.config.allow_internal_format = False\n"
            "# and keep shapes static: pad batches to fixed lengths or a few buckets"
        ),
        trace=trace.name,
        step=step.number,
    )]


RULES = (unfused_optimizer, dispatch_bound, slow_dataloader, dynamic_shapes, op_compile, host_syncs,
         sync_batchnorm, launch_blocking)
