"""Rule ``dispatch-bound``: so many short ops per step that the host's per-op cost sets the step time."""

from __future__ import annotations

from ...traces.model import Trace
from ..breakdown import device_busy_us
from ..findings import Finding, median, step_label, step_windows

MANY_OPS_PER_STEP = 500  # top-level ops per step for the dispatch-bound rule
SMALL_OP_US = 20.0  # an op this short is mostly dispatch cost, on an NPU mostly launch cost
SMALL_OPS_SHARE = 0.3  # small ops filling this share of the step make it dispatch-bound
DEVICE_IDLE_SHARE = 0.5  # device busy under this share of the step: it waits for the host
NPU_LAUNCH_US = 10.0  # order of the host cost to launch one op on an NPU (aclnn two-phase launch)


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
