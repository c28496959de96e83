"""What ``ascend-tune advise`` accepts: trace files, gzipped traces, folders; anything else is one line and exit 2."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys

import pytest

from ascend_tune.analysis.advisor.analyse import advise_traces
from ascend_tune.cli import main
from ascend_tune.errors import InputError


def kineto_trace(steps: int = 2, with_steps: bool = True) -> dict:
    """A torch.profiler-shaped trace: numeric ts, ProfilerStep#N around a forward op and a DataLoader annotation."""
    events, now = [], 1_000.0
    for step in range(steps):
        start = now
        events.append({"ph": "X", "cat": "user_annotation", "name": "enumerate(DataLoader)#_SingleProcessDataLoaderIter"
                       ".__next__", "pid": 1, "tid": 1, "ts": now + 1, "dur": 50.0, "args": {}})
        events.append({"ph": "X", "cat": "cpu_op", "name": "aten::linear", "pid": 1, "tid": 1, "ts": now + 60,
                       "dur": 300.0, "args": {"Input Dims": [[8, 16], [4, 16], [4]]}})
        now += 400.0
        if with_steps:
            events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step + 5}", "pid": 1,
                           "tid": 1, "ts": start, "dur": 400.0, "args": {}})
    return {"schemaVersion": 1, "deviceProperties": [], "record_shapes": 1, "traceEvents": events}


def test_a_gzipped_trace_reads_like_a_plain_one(tmp_path):
    plain = tmp_path / "plain" / "w.pt.trace.json"
    plain.parent.mkdir()
    plain.write_text(json.dumps(kineto_trace()))
    zipped = tmp_path / "zipped" / "w.pt.trace.json.gz"
    zipped.parent.mkdir()
    with gzip.open(zipped, "wt", encoding="utf-8") as fh:
        json.dump(kineto_trace(), fh)
    (a,), (b,) = advise_traces(plain.parent).traces, advise_traces(zipped.parent).traces
    assert [s.step for s in a.steps] == [s.step for s in b.steps] == [5, 6]
    assert a.steps == b.steps and a.top_ops == b.top_ops
    assert a.steps[0].part("data loading") == pytest.approx(0.05)


def test_a_folder_is_searched_recursively_and_other_json_is_ignored(tmp_path):
    (tmp_path / "run" / "rank0").mkdir(parents=True)
    (tmp_path / "run" / "rank0" / "a.pt.trace.json").write_text(json.dumps(kineto_trace()))
    (tmp_path / "run" / "rank1").mkdir()
    (tmp_path / "run" / "rank1" / "b.pt.trace.json").write_text(json.dumps(kineto_trace()))
    (tmp_path / "run" / "summary.json").write_text("{}")
    report = advise_traces(tmp_path / "run")
    assert [t.name for t in report.traces] == ["a.pt.trace.json", "b.pt.trace.json"]


def test_a_trace_without_step_markers_counts_as_one_step(tmp_path):
    path = tmp_path / "t.pt.trace.json"
    path.write_text(json.dumps(kineto_trace(with_steps=False)))
    (trace,) = advise_traces(path).traces
    assert [s.step for s in trace.steps] == [None]
    assert any("ProfilerStep" in note for note in trace.notes)


BAD_INPUTS = {
    "truncated": lambda: json.dumps(kineto_trace())[:-40],
    "empty": lambda: "",
    "not a trace": lambda: json.dumps({"loss": [1.0, 0.9]}),
    "events without durations": lambda: json.dumps({"traceEvents": [{"ph": "M", "name": "process_name"}]}),
    "a list of numbers": lambda: "[1, 2, 3]",
}


@pytest.mark.parametrize("kind", sorted(BAD_INPUTS))
def test_bad_json_is_one_line_on_stderr_and_exit_2(kind, tmp_path, capsys):
    path = tmp_path / "x.pt.trace.json"
    path.write_text(BAD_INPUTS[kind]())
    assert main(["advise", str(path), "-o", str(tmp_path / "out")]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("ascend-tune: error: ") and captured.err.count("\n") == 1
    assert str(path) in captured.err
    assert not (tmp_path / "out" / "advice.html").exists()


def test_a_truncated_gzip_is_bad_input(tmp_path):
    path = tmp_path / "x.pt.trace.json.gz"
    path.write_bytes(gzip.compress(json.dumps(kineto_trace()).encode())[:-30])
    with pytest.raises(InputError, match="x.pt.trace.json.gz"):
        advise_traces(path)


@pytest.mark.parametrize("make", ["missing", "folder without traces"])
def test_nothing_to_read_is_bad_input(make, tmp_path, capsys):
    target = tmp_path / "nothing"
    if make == "folder without traces":
        target.mkdir()
        (target / "notes.txt").write_text("hello")
    assert main(["advise", str(target)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(target) in err


def test_the_console_command_prints_no_traceback_on_a_truncated_trace(tmp_path):
    path = tmp_path / "x.pt.trace.json"
    path.write_text(json.dumps(kineto_trace())[:100])
    proc = subprocess.run([sys.executable, "-m", "ascend_tune.cli", "advise", str(path)], capture_output=True,
                          text=True)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "truncated" in proc.stderr and "Traceback" not in proc.stderr


def test_advising_does_not_import_torch(tmp_path):
    path = tmp_path / "t.pt.trace.json"
    path.write_text(json.dumps(kineto_trace()))
    code = (
        "import sys; from ascend_tune.cli import main; "
        f"rc = main(['advise', {str(path)!r}, '-o', {str(tmp_path / 'out')!r}]); "
        "print(rc, 'torch' in sys.modules)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.strip().splitlines()[-1] == "0 False"


def cuda_item_trace(steps: int = 2, host_reads: int = 32) -> dict:
    """A CUDA trace as torch.profiler writes it: per step one ``loss.item()`` of a device tensor (its
    ``_local_scalar_dense`` copies through ``cudaMemcpyAsync`` and waits in ``cudaStreamSynchronize``), and
    ``host_reads`` ``.item()`` calls on CPU tensors (nanoGPT's ``data[i:i+block_size]`` with ``i`` a CPU index
    tensor), which reach no runtime call."""
    events, now = [], 1_000.0

    def x(cat, name, ts, dur, tid=1):
        events.append({"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur, "args": {}})

    for step in range(steps):
        start = now
        x("cpu_op", "aten::linear", now + 1, 20.0)
        x("cuda_runtime", "cudaLaunchKernel", now + 2, 5.0)
        x("kernel", "sgemm_kernel", now + 10, 30.0, tid=7)
        now += 30
        for _ in range(host_reads):
            x("cpu_op", "aten::item", now, 3.0)
            x("cpu_op", "aten::_local_scalar_dense", now + 0.5, 2.0)
            now += 4
        x("cpu_op", "aten::item", now, 60.0)
        x("cpu_op", "aten::_local_scalar_dense", now + 1, 58.0)
        x("cuda_runtime", "cudaMemcpyAsync", now + 2, 10.0)
        x("cuda_runtime", "cudaStreamSynchronize", now + 13, 40.0)
        x("gpu_memcpy", "Memcpy DtoH (Device -> Pinned)", now + 50, 2.0, tid=7)
        now += 70
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step + 5}", "pid": 1, "tid": 1,
                       "ts": start, "dur": now - start, "args": {}})
        now += 5
    return {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H200"}], "traceEvents": events}


def test_on_a_gpu_trace_only_reads_of_device_tensors_are_host_syncs(tmp_path):
    path = tmp_path / "gpu.pt.trace.json"
    path.write_text(json.dumps(cuda_item_trace()))
    (finding,) = [f for f in advise_traces(path).findings if f.rule == "host-sync"]
    # one sync per step (the device loss), not 33: the CPU index tensors' .item() copy nothing from the device
    assert "1 host sync per step" in finding.evidence and "(Free on a CPU" not in finding.evidence
    assert "aten::item ×1.0 per step from ProfilerStep" in finding.evidence  # one site over the steps, not per step
    # a trace without a runtime layer cannot tell the two apart: every read counts there
    cpu = tmp_path / "cpu.pt.trace.json"
    trace = cuda_item_trace()
    trace["traceEvents"] = [e for e in trace["traceEvents"] if e["cat"] in ("cpu_op", "user_annotation")]
    trace["deviceProperties"] = []
    cpu.write_text(json.dumps(trace))
    (finding,) = [f for f in advise_traces(cpu).findings if f.rule == "host-sync"]
    assert "33 host syncs per step" in finding.evidence and "aten::item ×33.0 per step from ProfilerStep" in (
        finding.evidence)
