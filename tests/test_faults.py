"""The monitor never stops a training run: a full disk, a vanished folder, SIGTERM and SIGKILL, on real scripts.

Full disks are real: a small tmpfs mounted for the test (the suite runs as root here); where mounting is not
permitted the tests that need one skip and say why. Each fault runs ``tests/scripts/fault_train.py`` in a process of
its own, so its exit status, its stderr and the way it ended are the script's own.
"""

from __future__ import annotations

import collections
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest
from conftest import read_jsonl, read_log

from ascend_tune.analysis.logs.read import read_log as read_loss_log
from ascend_tune.analysis.traces.files import load_trace_file
from ascend_tune.cli import main

SCRIPT = os.path.join(os.path.dirname(__file__), "scripts", "fault_train.py")
WARNING = re.compile(r"ascend_tune: cannot write (\S+) \(\[Errno (\d+)\]")


@pytest.fixture
def small_fs(tmp_path):
    """A real file system of a given size (KiB), mounted under tmp_path and unmounted after the test."""
    mounted = []

    def mount(kib: int) -> str:
        where = tmp_path / f"fs{len(mounted)}"
        where.mkdir()
        if os.geteuid() != 0:
            pytest.skip("mounting a small tmpfs needs root")
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={kib}k", "tmpfs", str(where)],
                              capture_output=True, text=True)
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip() or done.returncode}")
        mounted.append(where)
        return str(where)

    yield mount
    for where in mounted:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


def _run(log_dir, *args, timeout=300):
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env["OMP_NUM_THREADS"] = "1"
    return subprocess.run([sys.executable, SCRIPT, str(log_dir), *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


def _leftovers(root) -> list:
    """Temporary files an atomic write or a trace export left behind."""
    return [os.path.join(d, n) for d, _, names in os.walk(root) for n in names if ".tmp" in n]


def _warned_outputs(stderr: str) -> collections.Counter:
    """How many warnings each output got: a dump's files count as the one dump output."""
    outputs = collections.Counter()
    for path, _ in WARNING.findall(stderr):
        outputs["dump" if f"{os.sep}dump{os.sep}" in path else path] += 1
    return outputs


def _assert_ran_to_the_end(done, steps):
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == f"loop end {steps}"


@pytest.mark.parametrize("extra", [[], ["--dump-every", "3"], ["--tensorboard"]],
                         ids=["logs", "statistics-dumps-every-3rd-step", "tensorboard"])
def test_a_run_whose_log_dir_fills_up_goes_to_its_end(small_fs, extra):
    if extra == ["--tensorboard"]:
        pytest.importorskip("tensorboard", reason="the tensorboard extra is not installed")
    log_dir = os.path.join(small_fs(40), "run")
    done = _run(log_dir, "--steps", "2000", *extra)
    _assert_ran_to_the_end(done, 2000)
    warned = _warned_outputs(done.stderr)
    assert warned, done.stderr[-3000:]  # 40 KiB fill within the first ~100 steps
    assert set(warned.values()) == {1}, warned  # one warning per failed output
    assert {os.path.join(log_dir, "log.txt"), os.path.join(log_dir, "metrics.jsonl")} <= set(warned)
    assert all(code == "28" for _, code in WARNING.findall(done.stderr))  # ENOSPC, named
    if extra == ["--dump-every", "3"]:
        assert "dump" in warned
    assert _leftovers(os.path.dirname(log_dir)) == []
    # only whole lines: every line of both logs parses, and they agree on the steps they hold
    lines = read_log(log_dir)
    records = [r for r in read_jsonl(os.path.join(log_dir, "metrics.jsonl")) if "event" not in r]
    assert 0 < len(lines) < 2000 and 0 < len(records) < 2000
    assert read_loss_log(os.path.join(log_dir, "log.txt"), prefer="text").malformed == 0


def test_when_space_comes_back_nothing_is_retried_and_the_summary_says_what_was_lost(small_fs):
    log_dir = os.path.join(small_fs(256), "run")
    done = _run(log_dir, "--steps", "600", "--fill-at", "50", "--free-at", "300")
    _assert_ran_to_the_end(done, 600)
    summary = json.loads(open(os.path.join(log_dir, "summary.json")).read())
    lost = {entry["output"]: entry for entry in summary["outputs_failed"]}
    assert set(lost) == {os.path.join(log_dir, "log.txt"), os.path.join(log_dir, "metrics.jsonl")}
    assert {entry["errno"] for entry in lost.values()} == {28}
    assert {entry["error"] for entry in lost.values()} == {"ENOSPC"}
    assert summary["steps"] == 600 and summary["interrupted_by"] is None
    last = int(re.search(r"step=(\d+)", read_log(log_dir)[-1]).group(1))
    assert last < 60  # the log stopped when the disk filled and did not start again at step 300
    assert _warned_outputs(done.stderr) == {path: 1 for path in lost}


def test_log_dir_removed_mid_run(tmp_path):
    log_dir = tmp_path / "run"
    done = _run(log_dir, "--steps", "400", "--remove-at", "100", "--dump-every", "50", "--profile")
    _assert_ran_to_the_end(done, 400)
    assert not log_dir.exists()  # not made again behind the user's back
    warned = _warned_outputs(done.stderr)
    assert set(warned.values()) == {1}, warned
    assert str(log_dir / "log.txt") in warned and str(log_dir / "summary.json") in warned


def test_sigterm_writes_the_summary_and_the_process_still_dies_of_it(tmp_path):
    log_dir = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, SCRIPT, str(log_dir), "--forever", "--progress", "--profile"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_for_step(proc, 40)  # the profiler cycle (steps 4-5) is long written
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == -signal.SIGTERM, stderr[-3000:]
    summary = json.loads((log_dir / "summary.json").read_text())
    assert summary["interrupted_by"] == "SIGTERM"
    assert summary["steps"] >= 40 and summary["outputs_failed"] == []
    (trace,) = summary["profile"]["traces"]
    assert trace["complete"] and (trace["first_step"], trace["last_step"]) == (4, 5)
    events = load_trace_file(trace["path"]).events  # a whole trace: it loads
    steps = sorted(e["name"] for e in events if str(e.get("name", "")).startswith("ProfilerStep#"))
    assert steps == ["ProfilerStep#4", "ProfilerStep#5"]
    assert not _leftovers(log_dir)


def test_sigterm_hands_the_signal_to_the_handler_installed_before(tmp_path):
    log_dir, marker = tmp_path / "run", tmp_path / "handler-ran"
    proc = subprocess.Popen([sys.executable, SCRIPT, str(log_dir), "--forever", "--progress", "--handler",
                             str(marker)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_for_step(proc, 20)
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=120)
    assert proc.returncode == 143  # what the script's own handler decided
    assert marker.read_text() == "previous handler ran"
    assert json.loads((log_dir / "summary.json").read_text())["interrupted_by"] == "SIGTERM"


def test_sigkill_loses_at_most_one_step_and_the_tools_read_the_killed_run(tmp_path):
    log_dir = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, SCRIPT, str(log_dir), "--forever", "--progress"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_for_step(proc, 300)
    proc.kill()
    rest, _ = proc.communicate(timeout=60)
    completed = int(rest.split()[-1]) if rest.split() else 300  # what the script printed before it died
    assert proc.returncode == -signal.SIGKILL
    assert not (log_dir / "summary.json").exists()
    text_steps = [int(re.search(r"step=(\d+)", line).group(1)) for line in read_log(log_dir)]
    jsonl_steps = [r["step"] for r in read_jsonl(log_dir / "metrics.jsonl") if "event" not in r]
    for steps in (text_steps, jsonl_steps):
        assert steps == list(range(len(steps)))
        assert len(steps) >= completed  # steps 0..completed were done: at most one of them is missing
    for command in (["perf", str(log_dir)], ["compare-loss", str(log_dir), str(log_dir)],
                    ["compare-loss", str(log_dir / "log.txt"), str(log_dir / "metrics.jsonl")],
                    ["report", str(log_dir), "-o", str(tmp_path / "report.html"), "--no-advise"]):
        assert main(command) == 0, command


def _wait_for_step(proc: subprocess.Popen, step: int, timeout: float = 240) -> None:
    """Read the script's progress until it has done ``step`` steps (a loaded machine may take a while)."""
    deadline = time.monotonic() + timeout
    for line in proc.stdout:
        if line.strip() == str(step):
            return
        if time.monotonic() > deadline:
            break
    proc.kill()
    raise AssertionError(f"the script did not reach step {step}: {proc.stderr.read()[-3000:]}")


# --- in the test's own process: what the monitor does with errors of its own and of its features ----------------


def _train(model, optimizer, loader, epochs=1):
    import torch.nn.functional as F

    for _ in range(epochs):
        for x, y in loader:
            loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()


def test_a_feature_that_raises_is_warned_once_and_driven_no_more(setup, tmp_path, monkeypatch, caplog):
    from ascend_tune import TrainingMonitor
    from ascend_tune.shapes.callback import ShapesCallback

    calls = []

    def broken(self, ctx, step):
        calls.append(step)
        raise RuntimeError("a bug of ours")

    monkeypatch.setattr(ShapesCallback, "on_step_end", broken)
    model, optimizer, loader = setup
    with caplog.at_level("WARNING", logger="ascend_tune"):
        with TrainingMonitor(model, optimizer, loader, log_dir=tmp_path, quiet=True, shapes=True):
            _train(model, optimizer, loader, epochs=2)
    assert calls == [0]  # driven no more after it raised
    assert caplog.text.count("a bug of ours") == 1
    assert len(read_log(tmp_path)) == 16  # the run and its log went on
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["features_failed"] == [{"feature": "shapes", "method": "on_step_end",
                                           "error": "RuntimeError: a bug of ours"}]
    assert "shapes" not in summary


def test_a_users_callback_error_is_the_users_own(setup, tmp_path):
    from ascend_tune import TrainingMonitor
    from ascend_tune.contract.callbacks import Callback

    class Stop(Callback):
        def on_step_end(self, ctx, step):
            if step == 2:
                raise ValueError("stop here")

    model, optimizer, loader = setup
    with pytest.raises(ValueError, match="stop here"):
        with TrainingMonitor(model, optimizer, loader, log_dir=tmp_path, quiet=True, callbacks=[Stop()]):
            _train(model, optimizer, loader)
    assert json.loads((tmp_path / "summary.json").read_text())["interrupted_by"] == "ValueError"


@pytest.mark.parametrize("path", ["compiled", "python"])
def test_a_bug_in_the_step_log_costs_the_log_not_the_run(setup, tmp_path, caplog, path):
    import contextlib

    import torch.nn.functional as F

    from ascend_tune import TrainingMonitor
    from ascend_tune.runtime import compiled

    model, optimizer, loader = setup
    with caplog.at_level("WARNING", logger="ascend_tune"), \
            (compiled.python_only() if path == "python" else contextlib.nullcontext()):
        with TrainingMonitor(model, optimizer, loader, log_dir=tmp_path, quiet=True) as monitor:
            for step, (x, y) in enumerate(loader):  # 8 steps
                if step == 3:  # steps 0-2 are logged (each at the next batch); the clock's state breaks, as a bug
                    monitor.clock._window_start = "our maths"  # would break it: step 3's window cannot be made
                loss = F.cross_entropy(model(x), y)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
    assert len(read_log(tmp_path)) == 3 and caplog.text.count("unsupported operand type") == 1
    assert json.loads((tmp_path / "summary.json").read_text())["steps"] == 3


def test_sigint_keeps_working_and_the_sigterm_handler_is_restored(setup, tmp_path):
    from ascend_tune import TrainingMonitor

    before = signal.getsignal(signal.SIGTERM)
    model, optimizer, loader = setup
    with pytest.raises(KeyboardInterrupt):
        with TrainingMonitor(model, optimizer, loader, log_dir=tmp_path, quiet=True):
            assert signal.getsignal(signal.SIGTERM) != before  # ours, for the block
            _train(model, optimizer, loader)
            raise KeyboardInterrupt
    assert signal.getsignal(signal.SIGTERM) == before
    assert json.loads((tmp_path / "summary.json").read_text())["interrupted_by"] == "KeyboardInterrupt"


def test_a_sigterm_during_a_write_waits_for_it_and_a_forked_child_only_passes_it_on():
    import contextlib

    from ascend_tune.contract.outputs import Outputs
    from ascend_tune.runtime.sigterm import SigtermHandler

    seen = []
    before = signal.signal(signal.SIGTERM, lambda signum, frame: seen.append("previous"))
    try:
        outputs = Outputs()
        with contextlib.ExitStack() as stack:
            assert SigtermHandler(lambda: seen.append("closed"), outputs).install(stack)
            pid = os.fork()
            if pid == 0:  # a DataLoader worker, say: the run is not its to close
                os.kill(os.getpid(), signal.SIGTERM)
                os._exit(0 if seen == ["previous"] else 1)
            assert os.waitpid(pid, 0)[1] == 0
            with outputs:  # a line is being written
                os.kill(os.getpid(), signal.SIGTERM)
                assert seen == []
            assert seen == ["closed", "previous"]
    finally:
        signal.signal(signal.SIGTERM, before)
