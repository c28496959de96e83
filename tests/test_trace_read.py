"""The trace reader gives one answer whichever way the file is decoded: with orjson (the ``orjson`` extra) or the
standard library, in 1 MB windows or in tiny ones, with a process name read before or after its events; and it
leaves Python's garbage collector as it found it."""

from __future__ import annotations

import gc
import json
import sys

import pytest
import torch
import torch.profiler as tp

from ascend_tune.analysis.traces import files
from ascend_tune.analysis.traces.pair import compare_traces
from ascend_tune.analysis.traces.read import read_trace
from ascend_tune.errors import InputError
from ascend_tune.testing.models import TinyGPT, synthetic_tokens


def _profile(folder, steps: int = 3) -> str:
    """A real torch.profiler trace (CPU, shapes recorded) of a tiny GPT; its path."""
    torch.manual_seed(0)
    net = TinyGPT(vocab=32, block=8, dim=16, heads=2, layers=1)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    x, y = synthetic_tokens(n=2, block=8, vocab=32).tensors
    with tp.profile(activities=[tp.ProfilerActivity.CPU], record_shapes=True,
                    schedule=tp.schedule(wait=0, warmup=1, active=steps, repeat=1),
                    on_trace_ready=tp.tensorboard_trace_handler(str(folder))) as prof:
        for _ in range(steps + 1):
            net(x, y).backward()
            opt.step()
            opt.zero_grad()
            prof.step()
    return str(next(p for p in folder.iterdir() if p.name.endswith(".pt.trace.json")))


@pytest.fixture(scope="module")
def real_trace(tmp_path_factory) -> str:
    return _profile(tmp_path_factory.mktemp("profile"))


def _standard_library(monkeypatch):
    monkeypatch.setattr(files, "fast_json_loads", lambda: json.loads)


def _npu_events() -> list:
    """torch_npu's bare list: string ts, a CANN process named after its events, and what only the standard
    library decodes (a NaN, a lone surrogate)."""
    events = []
    for step in range(1, 4):
        start = 1_700_000_000_000_000 + step * 1_000
        events += [
            {"ph": "X", "cat": "cpu_op", "name": f"ProfilerStep#{step}", "pid": 7, "tid": 1, "ts": f"{start}.250",
             "dur": 900.0, "args": {}},
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 7, "tid": 1, "ts": f"{start + 10}.500",
             "dur": 300.0, "args": {"Input Dims": [[4, 8], [8, 4]], "Sequence number": step, "Call stack": "a.py"}},
            # a runtime call and a device task by their process alone (no AscendCL@ prefix, no Task Type)
            {"ph": "X", "cat": "", "name": "aclrtLaunchKernel", "pid": 9, "tid": 2, "ts": f"{start + 20}.000",
             "dur": 100.0, "args": {}},
            {"ph": "X", "cat": "", "name": "MatMulV2", "pid": 11, "tid": 3, "ts": f"{start + 40}.000",
             "dur": 200.0, "args": {"id": step}},
            {"ph": "C", "name": "odd \ud800 counter", "pid": 7, "tid": 1, "ts": start, "args": {"v": float("nan")}},
        ]
    return events + [
        {"ph": "M", "name": "process_name", "pid": 9, "args": {"name": "CANN"}},
        {"ph": "M", "name": "process_name", "pid": 11, "args": {"name": "Ascend Hardware"}},
    ]


@pytest.fixture
def npu_trace(tmp_path) -> str:
    path = tmp_path / "trace_view.json"
    path.write_text(json.dumps(_npu_events()))  # json writes NaN and the lone surrogate as the standard library reads
    return str(path)


def test_orjson_and_the_standard_library_read_a_real_trace_alike(real_trace, monkeypatch):
    pytest.importorskip("orjson", reason="the orjson extra is not installed")
    assert files.fast_json_loads() is not json.loads
    fast = read_trace(real_trace)
    _standard_library(monkeypatch)
    plain = read_trace(real_trace)
    assert fast == plain and fast.starts == plain.starts
    assert fast.has_shapes and len(fast.steps) == 3
    assert compare_traces(real_trace, real_trace) == compare_traces(real_trace, real_trace)


def test_what_orjson_refuses_is_read_by_the_standard_library(npu_trace, monkeypatch):
    pytest.importorskip("orjson", reason="the orjson extra is not installed")
    fast = read_trace(npu_trace)
    _standard_library(monkeypatch)
    assert fast == read_trace(npu_trace)


def test_a_torch_npu_trace_reads_with_string_times_and_late_process_names(npu_trace, monkeypatch):
    _standard_library(monkeypatch)
    trace = read_trace(npu_trace)
    assert (trace.kind, trace.device) == ("torch_npu", "npu")
    assert [s.number for s in trace.steps] == [1, 2, 3]
    assert trace.steps[0].ts == float("1700000000001000.250")
    roles = {e.name: e.role for e in trace.events}
    # both processes are named after their events: the roles are those of the names
    assert roles == {"ProfilerStep#1": "host", "ProfilerStep#2": "host", "ProfilerStep#3": "host",
                     "aten::mm": "host", "aclrtLaunchKernel": "runtime", "MatMulV2": "device"}
    mm = [e for e in trace.events if e.name == "aten::mm"]
    assert mm[0].args == {"Call stack": "a.py", "Input Dims": "[[4, 8], [8, 4]]", "Sequence number": 1}


def test_without_orjson_the_standard_library_reads(real_trace, monkeypatch):
    expected = read_trace(real_trace)
    monkeypatch.setitem(sys.modules, "orjson", None)  # an import of it fails, as where it is not installed
    assert files.fast_json_loads() is json.loads
    assert read_trace(real_trace) == expected


def test_events_cut_by_small_windows_read_the_same(real_trace, npu_trace, monkeypatch):
    expected = [read_trace(real_trace), read_trace(npu_trace)]
    monkeypatch.setattr(files, "_CHUNK", 333)  # every event crosses a window's edge, some several
    monkeypatch.setattr(files, "_TAIL", 333)
    assert [read_trace(real_trace), read_trace(npu_trace)] == expected


@pytest.mark.parametrize("enabled", [True, False])
def test_reading_leaves_the_garbage_collector_as_it_was(real_trace, tmp_path, enabled):
    truncated = tmp_path / "cut.pt.trace.json"
    with open(real_trace, encoding="utf-8") as fh:
        truncated.write_text(fh.read()[:5000])
    was = gc.isenabled()
    (gc.enable if enabled else gc.disable)()
    try:
        read_trace(real_trace)
        assert gc.isenabled() is enabled
        with pytest.raises(InputError, match="truncated"):
            read_trace(truncated)
        assert gc.isenabled() is enabled
        compare_traces(real_trace, real_trace)
        assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()
