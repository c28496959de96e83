"""``ascend-tune trace``: lists traces with steps and sizes, repairs torch_npu's string ts, rejects bad files."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys

import pytest
import torch

from ascend_tune.cli import main
from ascend_tune.profiling import step_profiler

SCHEDULE = dict(wait=0, warmup=1, active=2, repeat=1, skip_first=1)  # records steps 2 and 3


def write_trace(out_dir, **options):
    """Profile a tiny loop; returns the trace path (a file from torch, the trace_view.json from torch_npu)."""
    model = torch.nn.Linear(4, 2)
    with step_profiler(dict(SCHEDULE, **options), out_dir) as prof:
        for _ in range(5):
            model(torch.randn(3, 4)).sum().backward()
            prof.step()
    (trace,) = prof.traces
    if os.path.isdir(trace.path):
        return os.path.join(trace.path, "ASCEND_PROFILER_OUTPUT", "trace_view.json")
    return trace.path


def one_line_error(captured):
    assert captured.err.startswith("ascend-tune: error: ") and captured.err.count("\n") == 1
    return captured.err


def test_lists_gzip_and_plain_traces_with_their_steps_and_sizes(tmp_path, capsys):
    gz = write_trace(tmp_path / "profile")
    plain = tmp_path / "profile" / "rank1" / "worker.1.pt.trace.json"
    plain.parent.mkdir()
    plain.write_bytes(gzip.decompress(open(gz, "rb").read()))
    assert main(["trace", str(tmp_path / "profile")]) == 0
    out = capsys.readouterr().out
    assert "2 trace(s)" in out and "chrome://tracing" in out and "ui.perfetto.dev" in out
    rows = [line.split() for line in out.splitlines() if line.rstrip().endswith(".json.gz") or
            line.rstrip().endswith(".pt.trace.json")]
    assert [(r[0], r[1], r[-1]) for r in rows] == [("0", "2-3", gz), ("1", "2-3", str(plain))]
    assert not list(tmp_path.rglob("*.perfetto.json"))  # torch traces have numeric ts already


def test_a_string_ts_trace_gets_a_copy_whose_every_ts_is_a_number(fake_npu, tmp_path, capsys):
    trace_view = write_trace(tmp_path / "profile")
    original = json.loads(open(trace_view).read())
    assert any(isinstance(e.get("ts"), str) for e in original)  # the torch_npu bug the copy repairs
    assert main(["trace", str(tmp_path / "profile")]) == 0
    out = capsys.readouterr().out
    copy = trace_view.replace("trace_view.json", "trace_view.perfetto.json")
    assert copy in out and " 2-3 " in out
    fixed = json.loads(open(copy).read())
    assert len(fixed) == len(original)
    stamped = [(a, b) for a, b in zip(original, fixed) if "ts" in a]
    assert stamped and all(type(b["ts"]) in (int, float) for _, b in stamped)
    assert all(b["ts"] == pytest.approx(float(a["ts"]), abs=1e-3) for a, b in stamped)
    assert json.loads(open(trace_view).read()) == original  # the original is left as torch_npu wrote it


def test_out_puts_the_repaired_copies_elsewhere(fake_npu, tmp_path, capsys):
    trace_view = write_trace(tmp_path / "profile")
    assert main(["trace", str(tmp_path / "profile"), "--out", str(tmp_path / "fixed")]) == 0
    relative = os.path.relpath(os.path.dirname(trace_view), tmp_path / "profile")
    assert (tmp_path / "fixed" / relative / "trace_view.perfetto.json").exists()
    assert not os.path.exists(trace_view.replace("trace_view.json", "trace_view.perfetto.json"))


def test_a_missing_folder_exits_2_with_one_line(tmp_path, capsys):
    assert main(["trace", str(tmp_path / "nothing")]) == 2
    assert "no such file or folder" in one_line_error(capsys.readouterr())
    (tmp_path / "empty").mkdir()
    assert main(["trace", str(tmp_path / "empty")]) == 2
    assert "no profiler traces found" in one_line_error(capsys.readouterr())


@pytest.mark.parametrize(
    ("name", "content", "reason"),
    [
        ("bad.pt.trace.json", b'{"traceEvents": [{"name": ', "not a readable trace"),
        ("cut.pt.trace.json.gz", gzip.compress(b'{"traceEvents": []}')[:-6], "not a readable trace"),
        ("trace_view.json", b'{"schemaVersion": 1}', "not a Chrome trace"),
        ("odd.pt.trace.json", b'[{"name": "x", "ph": "X", "ts": "12a"}]', "ts is not a number"),
    ],
)
def test_a_corrupt_trace_exits_2_with_one_line_naming_it(tmp_path, capsys, name, content, reason):
    good = write_trace(tmp_path)
    bad = tmp_path / "rank0" / name
    bad.write_bytes(content)
    assert main(["trace", str(tmp_path)]) == 2
    captured = capsys.readouterr()
    err = one_line_error(captured)
    assert str(bad) in err and reason in err
    assert good in captured.out  # the traces that load are still listed


def test_the_trace_command_does_not_import_torch(tmp_path):
    path = tmp_path / "t.pt.trace.json"
    path.write_text(json.dumps({"traceEvents": [{"name": "ProfilerStep#4", "ph": "X", "ts": 1, "dur": 2}]}))
    code = (
        "import sys; from ascend_tune.cli import traces as t; "
        "from ascend_tune.analysis.traces.listing import scan_traces; "
        f"listing = scan_traces({str(path)!r}); "
        "print(listing.traces[0].steps, 'torch' in sys.modules)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == "(4,) False"
