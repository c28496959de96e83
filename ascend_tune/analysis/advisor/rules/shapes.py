"""Rule ``dynamic-shapes``: the same op sees new input shapes step after step (``record_shapes=True``)."""

from __future__ import annotations

from collections import defaultdict

from ...traces.model import Trace
from ..findings import Finding, step_windows

MIN_SHAPES = 3  # distinct input shapes of one op across steps before it counts as dynamic


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
