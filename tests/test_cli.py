"""The ascend-tune command line: the demo end to end, one-line errors, a reader that stops early, a cheap import,
and the layers (analysis/ and tuning/ never reach up into cli/)."""

from __future__ import annotations

import ast
import errno
import json
import os
import pathlib
import subprocess
import sys

from conftest import SEED_LINE, read_log

import ascend_tune
from ascend_tune.cli import BROKEN_PIPE_EXIT, main


def test_demo_trains_a_reference_and_a_target_and_writes_their_alignment_page(tmp_path, capsys):
    assert main(["demo", "--out", str(tmp_path), "--steps", "12"]) == 0
    out = capsys.readouterr().out
    for run in ("reference", "target"):
        folder = tmp_path / run
        for name in ("log.txt", "metrics.jsonl", "summary.json"):
            assert (folder / name).exists() and str(folder / name) in out
        lines = read_log(folder)
        assert len(lines) == 12 and all(SEED_LINE.search(line) for line in lines)
        summary = json.loads((folder / "summary.json").read_text())
        assert summary["steps"] == 12 and summary["steady_steps"] == 2
        assert (folder / "dump" / "step0" / "rank0" / "dump.json").exists()  # step 0 dumped in both runs
    # the target also replays step 0 on the CPU in float64, beside its dump
    assert {"replay.csv", "replay.json"} <= set(os.listdir(tmp_path / "target" / "dump" / "step0" / "rank0"))
    assert not (tmp_path / "reference" / "dump" / "step0" / "rank0" / "replay.json").exists()
    # the target traces two steps and advises on them
    summary = json.loads((tmp_path / "target" / "summary.json").read_text())
    assert summary["profile"]["advice"]["html"] == str(tmp_path / "target" / "profile" / "rank0" / "advice.html")
    page = (tmp_path / "alignment.html").read_text()
    assert page.count("data:image/png;base64,") == 4  # loss curves, loss gap, steps/sec, time by kind
    for section in ("Verdict", "Loss against the baseline", "Throughput", "Where the time goes", "First divergence",
                    "Profiler traces and advice", "Tuning", "Replay on the CPU in float64"):
        assert f"<h2>{section}" in page
    # the bfloat16 target is a correct port: no op diverges, and the page says it judged it by bfloat16's rounding
    assert "first diverging op" not in page
    assert "no op diverges: this run computes in bfloat16 where the reference has float32" in page
    assert (tmp_path / "alignment_dump_compare.csv").exists()
    # it ends with where the page is and the three-line verdict
    tail = out.strip().splitlines()[-4:]
    assert tail[0] == f"alignment page: {tmp_path / 'alignment.html'}"
    assert tail[1].strip().startswith("loss: ") and "threshold 5%" in tail[1]
    assert tail[2].strip().startswith("first divergence: none at step 0; aligned")
    assert "TARGET computes in bfloat16 where BASE has float32" in tail[2]
    assert tail[3].strip().startswith("speed: ") and " the reference, " in tail[3]
    assert "(no interval: under 3 steady log lines in a run)" in tail[3]  # 12 steps, 10 of them warm-up


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


def test_an_os_error_of_any_command_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys):
    from ascend_tune.cli import shapes

    def unreadable(path):
        raise IsADirectoryError(errno.EISDIR, "Is a directory", path)

    monkeypatch.setattr(shapes, "read_shapes_report", unreadable)
    assert main(["shapes", str(tmp_path / "shapes.csv")]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (f"ascend-tune: error: cannot access {tmp_path / 'shapes.csv'} (Is a directory); "
                            "check the paths and permissions\n")


def test_a_reader_that_stops_early_ends_the_command_quietly(tmp_path):
    # `ascend-tune parse DUMP OP | head -n 1` on an output (~1 MB) far larger than a pipe's buffer: the command
    # writes into a closed pipe, and must end without a message or a traceback.
    entry = {"type": "torch.Tensor", "dtype": "torch.float32", "shape": [2], "Max": 1.0, "Min": 0.0, "Mean": 0.5,
             "Norm": 1.0, "requires_grad": False}
    data = {f"Functional.linear.{i}.forward": {"input_args": [entry, entry], "input_kwargs": {}, "output": [entry]}
            for i in range(3000)}
    (tmp_path / "dump.json").write_text(json.dumps({"task": "statistics", "level": "L1", "data": data}))
    command = subprocess.Popen([sys.executable, "-m", "ascend_tune.cli", "parse", str(tmp_path), "Functional"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    head = subprocess.Popen(["head", "-n", "1"], stdin=command.stdout, stdout=subprocess.PIPE)
    command.stdout.close()  # head holds the only reading end: when it exits, the command's writes fail
    first, _ = head.communicate(timeout=120)
    err = command.stderr.read()
    command.stderr.close()
    assert command.wait(timeout=120) == BROKEN_PIPE_EXIT
    assert first.decode().endswith(": 3000 op(s)\n")
    assert err.decode() == ""


def _imported_names(path: pathlib.Path, module: str) -> list:
    """Every module name ``path`` (the module ``module``) imports, relative imports resolved, and import strings."""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    names = []
    for node in ast.walk(ast.parse(path.read_bytes(), str(path))):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            base = ".".join(base + ([node.module] if node.module else []))
            names += [base] + [f"{base}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("ascend_tune."):
            names.append(node.value)  # importlib.import_module("ascend_tune.cli...")
    return names


def test_analysis_and_tuning_never_import_the_command_line():
    root = pathlib.Path(ascend_tune.__file__).parent
    reaching_up = []
    for room in ("analysis", "tuning"):
        for path in sorted((root / room).rglob("*.py")):
            parts = path.relative_to(root.parent).with_suffix("").parts
            module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            reaching_up += [f"{module} imports {name}" for name in _imported_names(path, module)
                            if name == "ascend_tune.cli" or name.startswith("ascend_tune.cli.")]
    assert len(list((root / "analysis").rglob("*.py"))) > 10
    assert reaching_up == []
