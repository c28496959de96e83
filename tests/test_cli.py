"""The ascend-tune command line: the demo end to end, one-line errors, and a cheap import."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import SEED_LINE, read_log

from ascend_tune.cli import main


def test_demo_writes_the_three_outputs_in_the_seed_format(tmp_path, capsys):
    assert main(["demo", "--out", str(tmp_path), "--steps", "12"]) == 0
    out = capsys.readouterr().out
    train = tmp_path / "train"
    for name in ("log.txt", "metrics.jsonl", "summary.json"):
        assert (train / name).exists() and str(train / name) in out
    lines = read_log(train)
    assert len(lines) == 12 and all(SEED_LINE.search(line) for line in lines)
    summary = json.loads((train / "summary.json").read_text())
    assert summary["steps"] == 12 and summary["steady_steps"] == 2
    # it traces two steps, advises on them, and ends with the run's report
    assert summary["profile"]["advice"]["html"] == str(train / "profile" / "rank0" / "advice.html")
    page = (train / "report.html").read_text()
    assert "data:image/png;base64," in page and "Profiler traces and advice" in page
    assert str(train / "report.html") in out


def test_bad_arguments_give_one_line_and_exit_2():
    proc = subprocess.run(
        [sys.executable, "-m", "ascend_tune.cli", "demo", "--steps", "0"], capture_output=True, text=True
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "positive integer" in proc.stderr


def test_device_override_error_is_one_line(monkeypatch, capsys):
    monkeypatch.setenv("ASCEND_TUNE_DEVICE", "tpu")
    assert main(["device"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ascend-tune: error: ") and err.count("\n") == 1


def test_importing_the_package_does_not_import_torch():
    code = "import sys, ascend_tune; print('torch' in sys.modules)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == "False"
