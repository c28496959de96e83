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


def monitored_run(log_dir, warmup_steps, steps=62, log_every=5):
    """A real monitored run: a tiny model, ``steps`` optimizer steps, one log line every ``log_every``."""
    import torch
    import torch.nn.functional as F
    from torch.utils.data import DataLoader

    from ascend_tune import TrainingMonitor
    from ascend_tune.testing.models import TinyMLP, synthetic_classification

    torch.manual_seed(0)
    model = TinyMLP()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(synthetic_classification(n=steps * 4), batch_size=4)
    with TrainingMonitor(model, optimizer, loader, log_dir=str(log_dir), log_every=log_every,
                         warmup_steps=warmup_steps, quiet=True, tune=False):
        for x, y in loader:
            loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return json.loads((log_dir / "summary.json").read_text())


@pytest.mark.parametrize("warmup_steps", [10, 7])  # a multiple of log_every, and one that splits a log window
def test_perf_prints_the_median_of_summary_json_for_a_run_with_log_every_5(tmp_path, capsys, warmup_steps):
    run = tmp_path / "run"
    summary = monitored_run(run, warmup_steps)
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    steady = [r for r in records if r["first_step"] >= warmup_steps]
    assert summary["steps_per_sec"]["windows"] == len(steady) == len([r for r in records if not r["warmup"]])

    assert main(["perf", str(run), "--json"]) == 0
    perf = json.loads(capsys.readouterr().out)["runs"][0]
    assert perf["steps_per_sec"]["median"] == summary["steps_per_sec"]["median"]
    assert perf["steps_per_sec"]["lines"] == summary["steps_per_sec"]["windows"]
    for key in ("mean", "p10", "p90"):
        assert perf["steps_per_sec"][key] == pytest.approx(summary["steps_per_sec"][key], rel=1e-12)
    assert perf["samples_per_sec"]["median"] == summary["samples_per_sec"]["median"]
    assert perf["warmup"] == {"start_step": 0, "steps": warmup_steps, "from": "summary.json"}
    assert perf["excluded"] == len(records) - len(steady)

    assert main(["perf", str(run)]) == 0  # the table shows the same median
    table = capsys.readouterr().out
    assert f"{summary['steps_per_sec']['median']:9.3f}" in table


def test_an_explicit_exclude_first_wins_over_summary_json(tmp_path, capsys):
    run = tmp_path / "run"
    monitored_run(run, warmup_steps=10, steps=40)  # lines at steps 4, 9, ..., 39: two of them warm-up
    assert main(["perf", str(run), "--json", "--exclude-first", "20"]) == 0
    perf = json.loads(capsys.readouterr().out)["runs"][0]
    assert perf["warmup"] == {"start_step": 0, "steps": 20, "from": "exclude_first"}
    assert perf["excluded"] == 4 and perf["steps_per_sec"]["lines"] == 4


def test_a_log_txt_with_summary_json_beside_it_leaves_out_the_same_windows(tmp_path):
    run = tmp_path / "run"
    summary = monitored_run(run, warmup_steps=7)
    (run / "metrics.jsonl").unlink()  # log.txt only: a line's first step is the previous line's step + 1
    log = read_log(str(run))
    assert log.kind == "text" and log.first_steps.tolist()[:3] == [0, 5, 10]
    stats = throughput([log]).runs[0].steps_per_sec
    assert stats.lines == summary["steps_per_sec"]["windows"]


def test_without_a_summary_the_warm_up_is_exclude_first_steps_not_lines(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    lines = [f"(step={step:07d}) Train Loss: 1.0000, Train Steps/Sec: {rate:.2f}"
             for step, rate in zip(range(4, 60, 5), [1.0, 1.0, 1.0] + [5.0] * 9)]
    (folder / "log.txt").write_text("\n".join(lines) + "\n")
    run = throughput([read_log(str(folder))], exclude_first=12).runs[0]
    # windows 0-4, 5-9, 10-14 hold warm-up steps (< 12); 10 lines would have left out most of the run
    assert run.excluded == 3 and run.steps_per_sec.lines == 9 and run.steps_per_sec.median == 5.0


def test_a_rate_log_txt_rounded_to_zero_counts_as_slow_not_as_missing(tmp_path):
    run = write_text_run(tmp_path / "slow", [0.0] * 6 + [0.01] * 4)
    stats = throughput([read_log(str(run))], exclude_first=0).runs[0].steps_per_sec
    assert stats.lines == 10 and stats.median == 0.0


def test_rate_statistics_maths():
    from ascend_tune.analysis.logs.rates import RateStats, WarmUp, window_first_steps

    stats = RateStats.of([4.0, None, float("nan"), float("inf"), 0.0, 2.0, -1.0], [5, 5, 5, 5, 5, 5, 5], [1] * 7)
    assert (stats.median, stats.mean, stats.windows, stats.overall) == (2.0, 2.0, 3, 5.0)
    assert stats.p10 == pytest.approx(np.percentile([0, 2, 4], 10))
    assert RateStats.of([None, float("nan")]) is None
    assert WarmUp(100, 7).steady([100, 105, 110]).tolist() == [False, False, True]
    assert window_first_steps([100, 200, 300]).tolist() == [1, 101, 201]  # the guide's 1-based steps
    assert window_first_steps([9, 19, 4], recorded=[5, np.nan, np.nan]).tolist() == [5, 10, 4]  # a restart
