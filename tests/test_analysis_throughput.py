"""perf: steps/sec statistics per run after warm-up, samples/sec where logged, speed-up over the first run."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ascend_tune.analysis.logs.read import read_log
from ascend_tune.analysis.logs.throughput import throughput
from ascend_tune.cli import main
from ascend_tune.errors import InputError


def write_text_run(folder, rates):
    folder.mkdir(parents=True)
    lines = [f"[2026-11-30 12:00:00] (step={i:07d}) Train Loss: 1.0000, Train Steps/Sec: {r:.2f}"
             for i, r in enumerate(rates)]
    (folder / "log.txt").write_text("\n".join(lines) + "\n")
    return folder


def write_jsonl_run(folder, rates, batch):
    folder.mkdir(parents=True)
    records = [{"step": i, "loss": 1.0, "steps_per_sec": r, "samples_per_sec": r * batch} for i, r in enumerate(rates)]
    records.insert(3, {"event": "trace", "steps": [3]})
    (folder / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in records) + "\n")
    return folder


def test_statistics_leave_out_warm_up_lines_and_speed_up_is_against_the_first_run(tmp_path):
    warm = [0.5] * 10
    gpu = write_text_run(tmp_path / "runs" / "a_gpu", warm + [10.0, 11.0, 12.0, 13.0, 14.0])
    npu = write_jsonl_run(tmp_path / "runs" / "b_npu", warm + [20.0, 22.0, 24.0, 26.0, 28.0], batch=8)
    report = throughput([read_log(str(gpu)), read_log(str(npu))], exclude_first=10)
    first, second = report.runs
    assert first.steps_per_sec.median == 12.0 and first.steps_per_sec.lines == 5
    assert first.steps_per_sec.p10 == pytest.approx(np.percentile([10, 11, 12, 13, 14], 10))
    assert first.samples_per_sec is None
    assert second.steps_per_sec.mean == 24.0 and second.samples_per_sec.median == 24.0 * 8
    assert first.speedup == 1.0 and second.speedup == 2.0


def test_the_cli_walks_a_folder_of_runs_and_prints_a_table_or_json(tmp_path, capsys):
    write_text_run(tmp_path / "runs" / "a", [5.0] * 12)
    write_text_run(tmp_path / "runs" / "b", [10.0] * 12)
    assert main(["perf", str(tmp_path / "runs"), "--exclude-first", "2"]) == 0
    out = capsys.readouterr().out
    assert "2.00x" in out and "1.00x" in out and "median" in out
    assert main(["perf", str(tmp_path / "runs" / "b"), str(tmp_path / "runs" / "a"), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [r["speedup"] for r in report["runs"]] == [1.0, 0.5]
    assert report["runs"][0]["steps_per_sec"]["lines"] == 2


def test_a_run_too_short_for_the_warm_up_is_noted_and_all_too_short_is_bad_input(tmp_path, capsys):
    short = write_text_run(tmp_path / "short", [5.0] * 3)
    long = write_text_run(tmp_path / "long", [5.0] * 20)
    report = throughput([read_log(str(long)), read_log(str(short))], exclude_first=10)
    assert report.runs[1].steps_per_sec is None and "lower --exclude-first" in report.runs[1].notes[0]
    with pytest.raises(InputError, match="exclude-first"):
        throughput([read_log(str(short))], exclude_first=10)
    assert main(["perf", str(short)]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_perf_flags_a_slow_rank_of_a_multi_rank_run(tmp_path, capsys):
    import json as _json

    from ascend_tune.cli import main as cli_main

    run = tmp_path / "run"
    for rank, rate in ((0, 10.0), (1, 10.2), (2, 6.0), (3, 9.9)):
        folder = run / f"rank{rank}"
        folder.mkdir(parents=True)
        with open(folder / "metrics.jsonl", "w") as fh:
            for step in range(30):
                fh.write(_json.dumps({"step": step, "loss": 1.0, "steps_per_sec": rate, "rank": rank}) + "\n")
    with open(run / "metrics.jsonl", "w") as fh:
        for step in range(30):
            fh.write(_json.dumps({"step": step, "loss": 1.0, "steps_per_sec": 10.0}) + "\n")
    assert cli_main(["perf", str(run)]) == 0
    out = capsys.readouterr().out
    slow = [line for line in out.splitlines() if line.endswith("SLOW")]
    assert len(slow) == 1 and slow[0].split()[0] == "2"
    assert cli_main(["perf", str(run), "--json"]) == 0
    ranks = _json.loads(capsys.readouterr().out)["runs"][0]["ranks"]
    assert [r["slow"] for r in ranks] == [False, False, True, False]
