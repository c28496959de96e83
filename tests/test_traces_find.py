"""One trace finder: the ``trace`` listing, the advisor and the report find the same traces in one run folder."""

from __future__ import annotations

import gzip
import json
import sys

import pytest

from ascend_tune.analysis.advisor.analyse import advise_traces
from ascend_tune.analysis.report.build import build_report
from ascend_tune.analysis.traces.files import load_trace_file
from ascend_tune.analysis.traces.find import find_traces
from ascend_tune.analysis.traces.listing import scan_traces
from ascend_tune.errors import InputError
from ascend_tune.formats.log_line import format_log_line
from ascend_tune.formats.run_dir import LOG_TXT, PROFILE_DIR, rank_dir_name


def torch_events(steps: int = 2, ts_type=float) -> list:
    """Events as torch.profiler writes them: ProfilerStep#N around a forward op and a DataLoader annotation."""
    events, now = [], 1_000.0
    for step in range(1, steps + 1):
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}", "pid": 1, "tid": 1,
                       "ts": ts_type(now), "dur": 400.0, "args": {}})
        events.append({"ph": "X", "cat": "user_annotation", "name": "enumerate(DataLoader)#_SingleProcessDataLoader"
                       "Iter.__next__", "pid": 1, "tid": 1, "ts": ts_type(now + 1), "dur": 50.0, "args": {}})
        events.append({"ph": "X", "cat": "cpu_op", "name": "aten::linear", "pid": 1, "tid": 1, "ts": ts_type(now + 60),
                       "dur": 300.0, "args": {}})
        now += 400.0
    return events


@pytest.fixture
def run_folder(tmp_path, monkeypatch):
    """A run folder: log.txt, and under profile/ a torch trace, a gzipped one and a torch_npu trace_view.json."""
    monkeypatch.setitem(sys.modules, "msprof_analyze", None)  # the advisor must not start Ascend's own tool here
    run = tmp_path / "run"
    profile = run / PROFILE_DIR
    plain = profile / rank_dir_name(0) / "host_1.1700000000.pt.trace.json"
    zipped = profile / rank_dir_name(1) / "host_2.1700000000.pt.trace.json.gz"
    npu = profile / rank_dir_name(2) / "host_3_20260101_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "trace_view.json"
    for path in (plain, zipped, npu):
        path.parent.mkdir(parents=True)
    plain.write_text(json.dumps({"schemaVersion": 1, "traceEvents": torch_events()}))
    zipped.write_bytes(gzip.compress(json.dumps({"schemaVersion": 1, "traceEvents": torch_events()}).encode()))
    npu.write_text(json.dumps(torch_events(ts_type=lambda t: f"{t:.3f}")))  # torch_npu: a bare list, string ts
    (profile / rank_dir_name(0) / "notes.json").write_text("{}")  # other JSON is not a trace
    (run / LOG_TXT).write_text("".join(format_log_line(n, 1.0 / (n + 1), 10.0) + "\n" for n in range(4)))
    return run, (str(plain), str(zipped), str(npu))


def test_the_listing_the_advisor_and_the_report_find_the_same_traces(run_folder):
    run, expected = run_folder
    profile = str(run / PROFILE_DIR)
    listing = scan_traces(profile)  # writes trace_view.perfetto.json beside the torch_npu trace
    assert listing.problems == ()
    assert [t.path for t in listing.traces] == list(expected)
    assert [(t.kind, t.rank, t.steps) for t in listing.traces] == [
        ("torch", 0, (1, 2)), ("torch", 1, (1, 2)), ("torch_npu", 2, (1, 2)),
    ]
    assert listing.traces[2].normalised and listing.traces[2].normalised.endswith("trace_view.perfetto.json")

    # the repaired copy is not a trace of its own for anyone
    advice = advise_traces(profile)
    assert [t.path for t in advice.traces] == list(expected)
    assert [t.kind for t in advice.traces] == ["torch.profiler", "torch.profiler", "torch_npu"]
    assert all([s.step for s in t.steps] == [1, 2] for t in advice.traces)
    report = build_report(str(run))
    assert report.traces == expected
    assert [t.path for t in report.advice.traces] == list(expected)
    assert [t.path for t in scan_traces(profile).traces] == list(expected)
    assert find_traces(profile) == expected


def test_the_loader_reads_every_layout_into_numeric_timestamps(run_folder):
    _run, paths = run_folder
    loaded = [load_trace_file(path) for path in paths]
    assert [f.kind for f in loaded] == ["torch", "torch", "torch_npu"]
    assert [f.string_ts for f in loaded] == [0, 0, 6]
    assert loaded[0].events == loaded[1].events == loaded[2].events  # gzip and string ts read like a plain trace
    assert loaded[0].header == {"schemaVersion": 1}


def test_a_missing_folder_is_bad_input_and_an_empty_one_finds_nothing(tmp_path):
    with pytest.raises(InputError, match="no such file or folder"):
        find_traces(tmp_path / "nothing")
    assert find_traces(tmp_path) == ()
    with pytest.raises(InputError, match=str(tmp_path)):
        advise_traces(tmp_path)
