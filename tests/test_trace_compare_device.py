"""compare-trace on traces with a device timeline (CUDA kernels): the kinds are the device's busy time by kind and
its idle time split by what the host was doing, adding up to the step. No GPU here: kineto-shaped traces."""

from __future__ import annotations

import json

import pytest

from ascend_tune.analysis.traces.compare import UNATTRIBUTED
from ascend_tune.analysis.traces.pair import compare_traces


def cuda_trace(gemm_us: float, steps: int = 5) -> dict:
    """Each 1000 µs step: the host launches an addmm (a gemm kernel of ``gemm_us``) and a relu (a 50 µs kernel),
    then reads the loss back (aten::item waiting on a cudaMemcpy)."""
    events, now = [], 10_000.0
    for step in range(steps):
        t = now
        events += [
            {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}", "pid": 1, "tid": 1, "ts": t,
             "dur": 1000.0 + gemm_us},
            {"ph": "X", "cat": "cpu_op", "name": "aten::addmm", "pid": 1, "tid": 1, "ts": t + 10, "dur": 40.0},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": t + 20,
             "dur": 10.0},
            {"ph": "X", "cat": "kernel", "name": "ampere_sgemm_128x64_tn", "pid": 0, "tid": 7, "ts": t + 35,
             "dur": gemm_us},
            {"ph": "X", "cat": "cpu_op", "name": "aten::relu", "pid": 1, "tid": 1, "ts": t + 60, "dur": 20.0},
            {"ph": "X", "cat": "kernel", "name": "vectorized_elementwise_kernel", "pid": 0, "tid": 7,
             "ts": t + 40 + gemm_us, "dur": 50.0},
            {"ph": "X", "cat": "cpu_op", "name": "aten::item", "pid": 1, "tid": 1, "ts": t + 100,
             "dur": gemm_us + 100},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpyAsync", "pid": 1, "tid": 1, "ts": t + 110,
             "dur": gemm_us + 80},
        ]
        now += 1000.0 + gemm_us
    return {"schemaVersion": 1, "deviceProperties": [{"id": 0}], "traceEvents": events}


@pytest.fixture
def pair(tmp_path):
    paths = []
    for name, gemm in (("base", 200.0), ("target", 700.0)):
        path = tmp_path / f"{name}.pt.trace.json"
        path.write_text(json.dumps(cuda_trace(gemm)))
        paths.append(str(path))
    return paths


def test_device_kinds_add_up_and_the_slower_kernel_kind_is_on_top(pair):
    result = compare_traces(*pair)
    assert result.target.device == "gpu" and result.gap_ms == pytest.approx(0.5)
    for side in (result.base, result.target):
        assert sum(side.rows["kind"].values()) == pytest.approx(side.median_ms)
    assert result.base.rows["kind"]["matmul / conv"] == pytest.approx(0.2)
    assert result.target.rows["kind"]["matmul / conv"] == pytest.approx(0.7)
    assert result.top_of("kind").name == "matmul / conv"
    kinds = result.level_rows("kind")
    assert sum(r.delta_ms for r in kinds) == pytest.approx(result.gap_ms)
    assert next(r for r in kinds if r.name == UNATTRIBUTED).delta_ms == pytest.approx(0.0, abs=1e-9)
