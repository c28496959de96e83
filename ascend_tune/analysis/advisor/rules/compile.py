"""Rule ``op-compile``: many ``aclopCompileAndExecute`` calls, the NPU compiling operators online."""

from __future__ import annotations

from ...traces.model import Trace
from ..findings import Finding, step_label

MAX_OP_COMPILE = 20  # msprof-analyze's MAX_OP_COMPILE_NUM


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
