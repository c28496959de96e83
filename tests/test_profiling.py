"""Profiler schedules: traces hold the steps the schedule names, numbered as the log, within a disk budget."""

from __future__ import annotations

import gzip
import json
import logging
import os
import time

import pytest
import torch
import torch.nn.functional as F
from conftest import read_jsonl

from ascend_tune import TrainingMonitor
from ascend_tune.errors import ConfigError
from ascend_tune.profiling import ProfileConfig, step_profiler

SCHEDULE = dict(wait=1, warmup=1, active=2, repeat=1, skip_first=3)


def train(setup, log_dir, steps, raise_at=None, **options):
    """The user's loop, unchanged, under the monitor; ``raise_at`` fails inside that step's forward."""
    model, optimizer, loader = setup
    with TrainingMonitor(model, optimizer, loader, log_dir=log_dir, quiet=True, **options):
        step = 0
        while step < steps:
            for x, y in loader:
                loss = F.cross_entropy(model(x), y)
                if step == raise_at:
                    raise RuntimeError("boom")
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                step += 1
                if step == steps:
                    break


def trace_files(folder):
    if not os.path.isdir(folder):
        return []
    return sorted(os.path.join(folder, name) for name in os.listdir(folder))


def load(path):
    with (gzip.open(path, "rt") if path.endswith(".gz") else open(path)) as fh:
        return json.load(fh)


def profiler_steps(events):
    return sorted(int(e["name"].split("#")[1]) for e in events if e.get("name", "").startswith("ProfilerStep#"))


def straddling(events):
    """Events on a ProfilerStep's thread that start inside it and end outside (or the reverse)."""
    eps = 0.01  # kineto writes times to 1 ns
    spans = [e for e in events if e.get("ph") == "X"]
    bad = []
    for step in (e for e in spans if e["name"].startswith("ProfilerStep#")):
        lo, hi = float(step["ts"]), float(step["ts"]) + float(step["dur"])

        def inside(t, lo=lo, hi=hi):
            return lo + eps < t < hi - eps

        for other in spans:
            if other is step or other["tid"] != step["tid"] or other["pid"] != step["pid"]:
                continue
            start, end = float(other["ts"]), float(other["ts"]) + float(other["dur"])
            if inside(start) != inside(end) and not (start <= lo + eps and end >= hi - eps):
                bad.append((step["name"], other["name"]))
    return bad


def events_of(log_dir, kind):
    return [r for r in read_jsonl(os.path.join(log_dir, "metrics.jsonl")) if r.get("event") == kind]


def test_cpu_run_writes_one_trace_holding_the_scheduled_steps(setup, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="ascend_tune")
    train(setup, tmp_path, steps=10, profile=SCHEDULE)
    files = trace_files(tmp_path / "profile" / "rank0")
    assert len(files) == 1 and files[0].endswith(".pt.trace.json.gz")
    events = load(files[0])["traceEvents"]
    # skip 3 (steps 0-2), wait 1 (3), warm up 1 (4), record 2: steps 5 and 6
    assert profiler_steps(events) == [5, 6]
    assert any(e["name"].startswith("Optimizer.step#SGD") for e in events)
    assert straddling(events) == []  # the step boundary is not inside optimizer.step()'s own range
    (start,) = events_of(tmp_path, "profile_start")
    assert start["backend"] == "torch.profiler" and start["planned"] == [[5, 6]]
    (trace,) = events_of(tmp_path, "profile_trace")
    assert (trace["path"], trace["first_step"], trace["last_step"], trace["complete"]) == (files[0], 5, 6, True)
    assert trace["size_bytes"] == os.path.getsize(files[0])
    assert any("steps 5-6" in r.getMessage() and files[0] in r.getMessage() for r in caplog.records)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert [t["path"] for t in summary["profile"]["traces"]] == files


def test_a_resumed_run_numbers_profiler_steps_as_its_log_in_its_rank_folder(setup, tmp_path):
    train(setup, tmp_path, steps=10, profile=dict(SCHEDULE, gzip=False), start_step=100, rank=1)
    (path,) = trace_files(tmp_path / "profile" / "rank1")
    assert path.endswith(".pt.trace.json")
    # the schedule counts from the first step this process runs, the numbers are the log's
    assert profiler_steps(load(path)["traceEvents"]) == [105, 106]
    assert not os.path.exists(tmp_path / "profile" / "rank0")


def test_npu_path_builds_torch_npu_profiler_by_keyword(fake_npu, setup, tmp_path):
    options = dict(wait=2, warmup=1, active=3, repeat=2, skip_first=1, with_modules=True,
                   profiler_level="Level2", aic_metrics="Memory", l2_cache=True, data_simplification=True)
    train(setup, tmp_path, steps=8, profile=options, start_step=40)
    import torch_npu

    (call,) = torch_npu.profiler.profiler.constructed_profiles
    npu_prof = torch_npu.profiler
    assert list(call["activities"]) == [npu_prof.ProfilerActivity.CPU, npu_prof.ProfilerActivity.NPU]
    expected = torch.profiler.schedule(wait=2, warmup=1, active=3, repeat=2, skip_first=1)  # keyword-only: no mix-up
    assert [call["schedule"](40 + k).name for k in range(20)] == [expected(k).name for k in range(20)]
    assert isinstance(call["schedule"](40), npu_prof.ProfilerAction)
    assert (call["record_shapes"], call["profile_memory"], call["with_stack"], call["with_modules"]) == (
        True, False, False, True)
    config = call["experimental_config"]
    assert isinstance(config, npu_prof._ExperimentalConfig)
    assert config._profiler_level == npu_prof.ProfilerLevel.Level2
    assert config._aic_metrics == npu_prof.AiCMetrics.Memory
    assert config._l2_cache is True and config._data_simplification is True
    assert callable(call["on_trace_ready"])
    (run_dir,) = trace_files(tmp_path / "profile" / "rank0")
    assert run_dir.endswith("_ascend_pt")
    trace_view = os.path.join(run_dir, "ASCEND_PROFILER_OUTPUT", "trace_view.json")
    assert profiler_steps(load(trace_view)) == [44, 45, 46]
    (trace,) = events_of(tmp_path, "profile_trace")
    assert (trace["path"], trace["first_step"], trace["last_step"]) == (run_dir, 44, 46)


def test_keep_last_keeps_the_newest_trace(setup, tmp_path):
    train(setup, tmp_path, steps=10, profile=dict(wait=1, warmup=1, active=1, repeat=3, skip_first=0, keep_last=1))
    (path,) = trace_files(tmp_path / "profile" / "rank0")
    assert profiler_steps(load(path)["traceEvents"]) == [8]  # cycles record steps 2, 5 and 8
    written = events_of(tmp_path, "profile_trace")
    removed = events_of(tmp_path, "profile_trace_removed")
    assert [t["first_step"] for t in written] == [2, 5, 8]
    assert [r["path"] for r in removed] == [t["path"] for t in written[:2]]
    assert all(not os.path.exists(r["path"]) for r in removed)


def test_a_tiny_budget_stops_after_the_first_cycle_with_one_warning(setup, tmp_path, caplog):
    profile = dict(wait=1, warmup=1, active=1, repeat=3, skip_first=0, max_trace_mb=0.001)
    train(setup, tmp_path, steps=10, profile=profile)
    (path,) = trace_files(tmp_path / "profile" / "rank0")
    assert profiler_steps(load(path)["traceEvents"]) == [2]
    warnings = events_of(tmp_path, "warning")
    assert len(warnings) == 1 and "max_trace_mb=0.001" in warnings[0]["message"]
    assert len([r for r in caplog.records if r.levelno == logging.WARNING and "max_trace_mb" in r.getMessage()]) == 1
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["profile"]["stopped_by_budget"] is True


def test_an_exception_exits_the_profiler_and_keeps_finished_traces(setup, tmp_path):
    profile = dict(wait=1, warmup=1, active=2, repeat=0, skip_first=0)  # records 2-3, 6-7, ...
    with pytest.raises(RuntimeError, match="boom"):
        train(setup, tmp_path, steps=20, raise_at=7, profile=profile)
    assert not torch.autograd.profiler._is_profiler_enabled
    assert not torch.nn.modules.module._global_forward_pre_hooks  # the step-boundary hook is gone too
    files = trace_files(tmp_path / "profile" / "rank0")
    steps = [profiler_steps(load(path)["traceEvents"]) for path in files]  # every file loads
    assert [2, 3] in steps
    traces = events_of(tmp_path, "profile_trace")
    assert [(t["first_step"], t["last_step"], t["complete"]) for t in traces] == [(2, 3, True), (6, 6, False)]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["interrupted_by"] == "RuntimeError"


@pytest.mark.parametrize(
    ("switch", "expected"),
    [("1", [12, 13]), ("wait=1,warmup=1,active=2,repeat=1,skip_first=5", [7, 8]), ("0", None)],
)
def test_the_environment_switch_profiles_an_unchanged_script(setup, tmp_path, monkeypatch, switch, expected):
    monkeypatch.setenv("ASCEND_TUNE_PROFILE", switch)
    train(setup, tmp_path, steps=15)
    files = trace_files(tmp_path / "profile" / "rank0")
    if expected is None:
        assert files == []
    else:
        (path,) = files
        assert profiler_steps(load(path)["traceEvents"]) == expected


def test_profile_false_wins_over_the_environment(setup, tmp_path, monkeypatch):
    monkeypatch.setenv("ASCEND_TUNE_PROFILE", "1")
    train(setup, tmp_path, steps=15, profile=False)
    assert not os.path.exists(tmp_path / "profile")


def test_a_hand_written_loop_uses_step_profiler_or_its_null_context(tmp_path):
    model = torch.nn.Linear(4, 2)

    def loop(prof):
        with prof:
            for _ in range(6):
                model(torch.randn(3, 4)).sum().backward()
                prof.step()

    off = step_profiler(None, tmp_path / "off")
    loop(off)
    assert not os.path.exists(tmp_path / "off") and off.traces == ()
    on = step_profiler(ProfileConfig(wait=0, warmup=1, active=2, skip_first=1, out_dir=str(tmp_path / "p")),
                       out_dir=tmp_path / "unused", rank=3)
    loop(on)
    (path,) = trace_files(tmp_path / "p" / "rank3")  # the config's out_dir wins
    assert profiler_steps(load(path)["traceEvents"]) == [2, 3]
    assert [(t.first_step, t.last_step, t.complete) for t in on.traces] == [(2, 3, True)]
    assert not os.path.exists(tmp_path / "unused")


@pytest.mark.parametrize(
    ("profile", "message"),
    [
        (dict(skip_frist=3), "did you mean 'skip_first'"),
        (dict(active=0), "active must be an integer >= 1"),
        (dict(profiler_level="L1"), "profiler_level must be one of Level_none, .*, got 'L1'"),
        (dict(max_trace_mb=0), "max_trace_mb must be"),
        ("wait=1,active", "key=value"),
        (3, "profile must be True, False"),
    ],
)
def test_bad_options_fail_before_the_first_step(setup, tmp_path, profile, message):
    with pytest.raises(ConfigError, match=message):
        train(setup, tmp_path, steps=1, profile=profile)


def test_a_bad_environment_value_names_the_variable(setup, tmp_path, monkeypatch):
    monkeypatch.setenv("ASCEND_TUNE_PROFILE", "skip_first=five")
    with pytest.raises(ConfigError, match="ASCEND_TUNE_PROFILE='skip_first=five': profile option skip_first='five'"):
        train(setup, tmp_path, steps=1)


def test_config_from_text_reads_every_kind_of_value():
    config = ProfileConfig.from_text("active=3,gzip=false,keep_last=2,max_trace_mb=none,out_dir=/tmp/x")
    assert (config.active, config.gzip, config.keep_last, config.max_trace_mb, config.out_dir) == (
        3, False, 2, None, "/tmp/x")
    assert ProfileConfig.from_any(True) == ProfileConfig() and ProfileConfig.from_any(None) is None
    assert ProfileConfig(skip_first=2, wait=1, warmup=1, active=2, repeat=2).traced_steps(10) == [(14, 15), (18, 19)]


class SlowData(torch.utils.data.Dataset):
    """16 samples, each taking 3 ms to load: 24 ms per batch of 8, a slow loader."""

    def __init__(self, data):
        self.data = data

    def __len__(self):
        return len(self.data)

    def __getitem__(self, i):
        time.sleep(0.003)
        return self.data[i]


def test_advise_runs_the_advisor_on_this_runs_traces_at_exit(setup, tmp_path):
    model, optimizer, loader = setup
    slow = torch.utils.data.DataLoader(SlowData(loader.dataset), batch_size=8)
    train((model, optimizer, slow), tmp_path, steps=10, profile=dict(SCHEDULE, advise=True), tune=False)
    html = tmp_path / "profile" / "rank0" / "advice.html"
    assert html.exists() and "Slow DataLoader" in html.read_text()
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["profile"]["advice"]["html"] == str(html) and summary["profile"]["advice"]["findings"] >= 1
    (event,) = events_of(tmp_path, "advice")
    assert event["html"] == str(html)
    warnings = [e["message"] for e in events_of(tmp_path, "warning")]
    assert any("DataLoader" in m for m in warnings)
