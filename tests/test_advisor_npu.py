"""The advisor on torch_npu-style trace_view.json (string ts, CANN and Ascend Hardware layers), and msprof-analyze."""

from __future__ import annotations

import importlib.util
import json
import re
import sys

import pytest

from ascend_tune.analysis.advisor.analyse import advise_traces
from ascend_tune.analysis.advisor.render import render_markdown
from ascend_tune.cli import main

PID_PYTHON, PID_CANN, PID_DEVICE, TID = 1_000, 2_000, 3_000, 77


def _meta(pid: int, name: str) -> dict:
    return {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": name}}


def write_trace_view(
    path, steps: int = 3, ops_per_step: int = 100, compile_every: int = 1, syncbn_per_step: int = 0,
    blocking: bool = False, op_us: float = 40.0,
) -> None:
    """A trace_view.json as torch_npu writes it: a bare list, ``ts`` as strings of µs, one op per CANN call."""
    events = [_meta(PID_PYTHON, "Python"), _meta(PID_CANN, "CANN"), _meta(PID_DEVICE, "Ascend Hardware")]

    def x(pid, tid, name, ts, dur, cat=None, **args):
        event = {"ph": "X", "name": name, "pid": pid, "tid": tid, "ts": f"{ts:.3f}", "dur": dur, "args": args}
        if cat:
            event["cat"] = cat
        events.append(event)

    now, flow = 1_700_000_000_000_000.0, 0  # µs since the epoch, as torch_npu writes them
    for step in range(1, steps + 1):
        start = now
        now += 5.0
        for index in range(ops_per_step):
            x(PID_PYTHON, TID, "aten::add", now, op_us, "cpu_op", **{"Input Dims": [[8, 16], [8, 16]]})
            if index % compile_every == 0:
                x(PID_CANN, TID, "AscendCL@aclopCompileAndExecute", now + 5, 30.0, id="aclopCompileAndExecute")
            else:
                x(PID_CANN, TID, "Node@launch", now + 5, 10.0)
            if blocking:
                x(PID_CANN, TID, "AscendCL@aclrtSynchronizeStream", now + 36, 2.0)
            x(PID_DEVICE, 5, "Add", now + 30, 8.0, **{"Task Type": "AI_VECTOR_CORE"})
            flow += 1
            events.append({"ph": "s", "bp": "e", "name": "torch_to_npu", "id": flow, "pid": PID_PYTHON, "tid": TID,
                           "ts": f"{now:.3f}", "cat": "async_npu"})
            events.append({"ph": "f", "bp": "e", "name": "torch_to_npu", "id": flow, "pid": PID_DEVICE, "tid": 5,
                           "ts": f"{now + 30:.3f}", "cat": "async_npu"})
            now += op_us + 5.0
        for _ in range(syncbn_per_step):
            stack = "model.py(12): forward;train.py(40): main"
            x(PID_PYTHON, TID, "SyncBatchNorm", now, 20.0, "cpu_op", **{"Call stack": stack})
            now += 25.0
        x(PID_PYTHON, TID, f"ProfilerStep#{step}", start, now - start + 5.0, "cpu_op")
        now += 10.0
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(events))


@pytest.fixture
def ascend_pt(tmp_path):
    """A torch_npu profiler folder, ``*_ascend_pt/ASCEND_PROFILER_OUTPUT/trace_view.json``, with 300 compilations."""
    folder = tmp_path / "prof" / "host_123_20260101_ascend_pt"
    write_trace_view(folder / "ASCEND_PROFILER_OUTPUT" / "trace_view.json")
    return folder


def _by_rule(report, rule: str) -> list:
    return [f for f in report.findings if f.rule == rule]


def test_string_ts_trace_view_parses_into_steps_with_a_device_timeline(tmp_path):
    write_trace_view(tmp_path / "trace_view.json", steps=3, ops_per_step=50)
    (trace,) = advise_traces(tmp_path / "trace_view.json").traces
    assert (trace.kind, trace.device) == ("torch_npu", "npu")
    assert [s.step for s in trace.steps] == [1, 2, 3]
    step = trace.steps[0]
    assert step.total_ms == pytest.approx((5 + 50 * 45 + 5) / 1e3)
    assert step.device_busy_ms == pytest.approx(50 * 8 / 1e3)
    assert trace.top_ops[0].name == "aten::add" and trace.top_ops[0].calls_per_step == 50


def test_hundreds_of_aclop_compilations_give_the_compile_finding(tmp_path):
    write_trace_view(tmp_path / "trace_view.json", steps=3, ops_per_step=100)
    report = advise_traces(tmp_path)
    (finding,) = _by_rule(report, "op-compile")
    assert "300 AscendCL@aclopCompileAndExecute" in finding.evidence and "100 of them in step #1" in finding.evidence
    assert "set_compile_mode(jit_compile=False)" in finding.fix
    assert report.exit_code == 1


def test_a_few_compilations_are_not_a_finding(tmp_path):
    write_trace_view(tmp_path / "trace_view.json", steps=3, ops_per_step=100, compile_every=50)  # 6 in all
    assert _by_rule(advise_traces(tmp_path), "op-compile") == []


def test_many_syncbatchnorm_calls_are_found_with_their_call_stack(tmp_path):
    write_trace_view(tmp_path / "trace_view.json", steps=2, ops_per_step=5, compile_every=10, syncbn_per_step=25)
    (finding,) = _by_rule(advise_traces(tmp_path), "sync-batchnorm")
    assert finding.title == "SyncBatchNorm: 25 calls per step"
    assert finding.where and finding.where[0] == "model.py(12): forward"


def test_a_synchronize_after_every_launch_points_at_ascend_launch_blocking(tmp_path):
    write_trace_view(tmp_path / "trace_view.json", steps=2, ops_per_step=30, compile_every=1000, blocking=True)
    (finding,) = _by_rule(advise_traces(tmp_path), "launch-blocking")
    assert finding.severity == "critical" and "ASCEND_LAUNCH_BLOCKING" in finding.fix
    write_trace_view(tmp_path / "trace_view.json", steps=2, ops_per_step=30, compile_every=1000, blocking=False)
    assert _by_rule(advise_traces(tmp_path), "launch-blocking") == []


def test_many_short_ops_with_an_idle_device_are_dispatch_bound(tmp_path):
    write_trace_view(tmp_path / "trace_view.json", steps=2, ops_per_step=600, compile_every=10_000, op_us=12.0)
    (finding,) = _by_rule(advise_traces(tmp_path), "dispatch-bound")
    assert finding.severity == "warning"
    assert "600 top-level ops in step #1" in finding.evidence
    busy_ms, share = re.search(r"device busy ([\d.]+) ms \((\d+)%\)", finding.evidence).groups()
    assert 4.0 < float(busy_ms) <= 4.8 and int(share) < 50  # up to 600 kernels of 8 µs in a 10.21 ms step


def test_without_msprof_analyze_the_report_says_so_and_still_advises(ascend_pt, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "msprof_analyze", None)  # what find_spec sees when it is not installed
    assert main(["advise", str(ascend_pt.parent), "-o", str(ascend_pt.parent / "out")]) == 1
    out = capsys.readouterr().out
    assert "[warning] Operator compilation" in out
    assert "msprof-analyze advisor: host_123_20260101_ascend_pt (not installed)" in out
    assert "pip install msprof-analyze" in out


@pytest.mark.skipif(importlib.util.find_spec("msprof_analyze") is None, reason="msprof-analyze is not installed")
def test_msprof_analyze_runs_on_an_ascend_pt_folder_and_its_report_is_folded_in(ascend_pt, tmp_path):
    report = advise_traces(ascend_pt, out_dir=tmp_path / "out")
    (run,) = report.msprof
    assert run.status == "ran", run.message
    assert any(path.endswith(".html") for path in run.files)
    assert run.summary  # its findings, as text
    markdown = render_markdown(report)
    assert "(ran)" in markdown and run.summary[0] in markdown


@pytest.mark.skipif(importlib.util.find_spec("msprof_analyze") is None, reason="msprof-analyze is not installed")
def test_an_msprof_analyze_run_that_writes_no_report_is_shown_with_its_reason(tmp_path):
    # torch.profiler's dict layout where msprof-analyze wants torch_npu's list: it logs errors, exits 0, writes nothing
    folder = tmp_path / "prof" / "host_9_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    folder.mkdir(parents=True)
    events = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0.0, "dur": 5.0},
        {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 1.0, "dur": 2.0},
    ]
    (folder / "trace_view.json").write_text(json.dumps({"traceEvents": events}))
    report = advise_traces(tmp_path / "prof", out_dir=tmp_path / "out")
    (run,) = report.msprof
    assert (run.status, run.files, run.summary) == ("no output", (), ())
    assert run.message.startswith("msprof-analyze wrote no report: ")
    assert "(no output)" in render_markdown(report)
