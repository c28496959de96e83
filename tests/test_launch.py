"""``ascend-tune run -- COMMAND``: a script nobody edited is monitored; its exit status, signal, stdout and stderr are
its own; processes that do not train write nothing; launcher errors are one line and exit 2 before anything runs."""

from __future__ import annotations

import json
import os
import signal
import sys
import textwrap

import pytest
from conftest import read_jsonl, read_log
from launch_helpers import CHECKOUT, ROOT, bare, launch, our_lines

SCRIPT = textwrap.dedent("""
    import os, signal, sys
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8)
    how = sys.argv[1] if len(sys.argv) > 1 else "end"
    for epoch in range(2):
        for x, y in loader:
            loss = torch.nn.functional.mse_loss(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            print(f"loss {loss.item():.6f}")
    sys.stdout.flush()
    print("to stderr", file=sys.stderr)
    if how == "exit3":
        sys.exit(3)
    if how == "raise":
        raise ValueError("the script's own error")
    if how == "sigterm":
        os.kill(os.getpid(), signal.SIGTERM)
""")


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "train.py"
    path.write_text(SCRIPT)
    return path


@pytest.mark.parametrize("how, status, ended_by", [
    ("end", 0, None), ("exit3", 3, "SystemExit"), ("raise", 1, "ValueError"), ("sigterm", -signal.SIGTERM, "SIGTERM"),
])
def test_a_script_ends_as_it_would_and_summary_says_how(tmp_path, script, how, status, ended_by):
    run = tmp_path / "run"
    proc = launch(["--log-dir", str(run), "--warmup-steps", "1"], [sys.executable, str(script), how], cwd=tmp_path)
    plain = bare([sys.executable, str(script), how], cwd=tmp_path)
    assert proc.returncode == plain.returncode == status
    assert proc.stdout == plain.stdout and proc.stdout.count("loss ") == 8
    ours = [line for line in proc.stderr.splitlines() if line.startswith("ascend-tune run: ") or "(step=" in line]
    assert [line for line in proc.stderr.splitlines() if line not in ours] == plain.stderr.splitlines()
    summary = json.loads((run / "summary.json").read_text())
    assert summary["interrupted_by"] == ended_by
    if how != "sigterm":  # SIGTERM ends the process before the loop's prints are read back here
        assert len(read_log(run)) == summary["steps"] == 8
    assert summary["steps_from"]["optimizer"] == "SGD"


def test_the_loader_the_loop_iterates_is_found_and_marked_from_its_next_pass(tmp_path, script):
    run = tmp_path / "run"
    proc = launch(["--log-dir", str(run), "--warmup-steps", "0"], [sys.executable, str(script)], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert any("loader DataLoader" in line for line in our_lines(proc.stderr))
    records = [r for r in read_jsonl(run / "metrics.jsonl") if "step" in r]
    assert [r["epoch"] for r in records][4:] == [1] * 4  # the second pass is the loader's marked pass 1
    assert all(r["samples_per_sec"] > 0 for r in records[4:])


def test_health_by_flag_logs_each_steps_gradient_norm(tmp_path, script):
    run = tmp_path / "run"
    proc = launch(["--log-dir", str(run), "--health"], [sys.executable, str(script)], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    records = [r for r in read_jsonl(run / "metrics.jsonl") if "step" in r]
    assert len(records) == 8 and all(r["grad_norm"] > 0 for r in records)


@pytest.mark.parametrize("argv, says", [
    ([], "no command to run"),
    (["--bogus", "--"], "unrecognized arguments: --bogus"),
    (["--", "no-such-program-here"], "command not found"),
    (["--dump=steps=x", "--"], "precision steps"),
    (["--log-every", "0", "--"], "--log-every"),
    (["--health=bogus=1", "--"], "--health"),
])
def test_launcher_errors_are_one_line_exit_2_before_anything_runs(tmp_path, argv, says):
    marker = tmp_path / "ran"
    command = [sys.executable, "-c", f"open({str(marker)!r}, 'w')"] if argv[-1:] == ["--"] else []
    import subprocess

    from launch_helpers import env

    proc = subprocess.run([sys.executable, "-m", "ascend_tune", "run", *argv, *command], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120, env=env())
    assert proc.returncode == 2
    assert len(proc.stderr.splitlines()) == 1 and says in proc.stderr, proc.stderr
    assert not marker.exists() and proc.stdout == ""


def test_processes_that_do_not_train_stay_untouched_and_quiet(tmp_path):
    code = textwrap.dedent("""
        import subprocess, sys
        import torch
        model = torch.nn.Linear(4, 2)
        with torch.no_grad():
            print(model(torch.ones(1, 4)).shape)
        print(subprocess.run([sys.executable, "-c", "print('child')"], capture_output=True, text=True).stdout.strip())
    """)
    run = tmp_path / "run"
    proc = launch(["--log-dir", str(run)], [sys.executable, "-c", code], cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout == "torch.Size([1, 2])\nchild\n"
    assert proc.stderr == "" and not run.exists()


def test_a_script_with_the_two_lines_is_monitored_once_by_its_own_block(tmp_path):
    own = tmp_path / "own"
    code = SCRIPT.replace("for epoch in range(2):", f"from ascend_tune import TrainingMonitor\n"
                          f"with TrainingMonitor(model, optimizer, loader, log_dir={str(own)!r}, quiet=True):\n"
                          f"  for epoch in range(2):")
    code = code.replace("\n    for x, y", "\n      for x, y").replace("\n        ", "\n          ")
    path = tmp_path / "two_lines.py"
    path.write_text(code)
    run = tmp_path / "run"
    proc = launch(["--log-dir", str(run)], [sys.executable, str(path)], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert len(read_log(own)) == 8 and not run.exists()
    assert any("its own TrainingMonitor block" in line for line in our_lines(proc.stderr))


def test_an_existing_sitecustomize_still_runs(tmp_path, script):
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import os\nos.environ['SITE_WAS_HERE'] = '1'\n")
    code = "import os; print(os.environ.get('SITE_WAS_HERE'))"
    proc = launch([], [sys.executable, "-c", code], cwd=tmp_path,
                  PYTHONPATH=os.pathsep.join([str(site), *([ROOT] if CHECKOUT else [])]))
    assert proc.returncode == 0 and proc.stdout == "1\n", proc.stderr


def test_the_launchers_monitor_gives_way_to_a_block_the_script_opens_later(tmp_path):
    own = tmp_path / "own"
    code = textwrap.dedent(f"""
        import torch
        from ascend_tune import TrainingMonitor
        model = torch.nn.Linear(4, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

        def step():
            loss = model(torch.randn(8, 4)).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()

        for _ in range(2):  # a warm-up outside any block: the launcher's monitor opens here
            step()
        with TrainingMonitor(model, optimizer, log_dir={str(own)!r}, quiet=True):
            for _ in range(3):
                step()
    """)
    run = tmp_path / "run"
    proc = launch(["--log-dir", str(run), "--quiet"], [sys.executable, "-c", code], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert len(read_log(own)) == 3 and len(read_log(run)) == 2  # each step monitored once
    assert json.loads((run / "summary.json").read_text())["interrupted_by"] == "TrainingMonitor"


def test_an_install_without_the_bootstrap_says_so_and_the_command_runs_as_it_would(tmp_path, script):
    import shutil

    import ascend_tune

    broken = tmp_path / "install"
    shutil.copytree(os.path.dirname(ascend_tune.__file__), broken / "ascend_tune",
                    ignore=shutil.ignore_patterns("bootstrap", "__pycache__"))
    run = tmp_path / "run"
    proc = launch(["--log-dir", str(run)], [sys.executable, str(script), "exit3"], cwd=tmp_path,
                  PYTHONPATH=str(broken))
    assert proc.returncode == 3 and proc.stdout.count("loss ") == 8
    ours = our_lines(proc.stderr)
    assert len(ours) == 1 and "sitecustomize.py: the command runs unmonitored; reinstall" in ours[0], proc.stderr
    assert not run.exists()


def test_a_process_that_steps_an_optimizer_unmonitored_says_so_at_its_end(tmp_path):
    code = textwrap.dedent("""
        import sys
        import torch
        w = torch.zeros(4, requires_grad=True)  # no module: the launcher never sees a training forward
        optimizer = torch.optim.SGD([w], lr=0.1)
        for _ in range(3):
            loss = (torch.randn(8, 4) @ w - 1).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        sys.exit(4)
    """)
    run = tmp_path / "run"
    proc = launch(["--log-dir", str(run)], [sys.executable, "-c", code], cwd=tmp_path)
    assert proc.returncode == 4
    assert our_lines(proc.stderr) == ["ascend-tune run: 3 optimizer steps ran in this process but no monitor "
                                      "started: no training forward was seen (a module called with gradients on and "
                                      "parameters that require them)"], proc.stderr
    summary = json.loads((run / "summary.json").read_text())
    assert summary["monitored"] is False and summary["optimizer_steps_seen"] == 3
