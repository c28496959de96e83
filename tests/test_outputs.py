"""The one fail-soft write path (outputs.Outputs, LineFile) and the hand-written metrics.jsonl line."""

from __future__ import annotations

import errno
import json
import math
import os
import subprocess

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from ascend_tune.contract.outputs import LineFile, Outputs
from ascend_tune.errors import OutputError
from ascend_tune.formats.writing import make_below, write_atomic
from ascend_tune.runtime import sinks, step_clock
from ascend_tune.runtime.steps import ClosedStep


@pytest.fixture
def full_fs(tmp_path):
    """A 16 KiB tmpfs, filled up to its last bytes by a ballast file (skips where it cannot be mounted)."""
    where = tmp_path / "fs"
    where.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", str(where)], capture_output=True,
                          text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip() or done.returncode}")
    yield where
    subprocess.run(["umount", "-l", str(where)], capture_output=True)


def _fill(folder) -> None:
    fd = os.open(os.path.join(folder, "ballast"), os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        while os.write(fd, b"\0" * 512):
            pass
    except OSError:
        pass
    finally:
        os.close(fd)


def test_a_failed_output_warns_once_names_file_and_errno_and_is_not_retried(full_fs):
    warnings = []
    outputs = Outputs(warn=warnings.append)
    _fill(full_fs)
    path = full_fs / "summary.json"
    assert outputs.write_json(path, {"steps": 3}) is False
    os.remove(full_fs / "ballast")  # space comes back
    assert outputs.write_json(path, {"steps": 3}) is False  # nothing is retried
    assert not path.exists() and os.listdir(full_fs) == []  # no temporary file either
    assert len(warnings) == 1
    assert str(path) in warnings[0] and "[Errno 28] ENOSPC" in warnings[0] and "training goes on" in warnings[0]
    (entry,) = outputs.summary()
    assert entry == {"output": str(path), "path": str(path), "errno": 28, "error": "ENOSPC",
                     "reason": "No space left on device"}


def test_a_line_the_disk_cuts_short_is_taken_back(full_fs):
    outputs = Outputs(warn=lambda message: None)
    path = full_fs / "metrics.jsonl"
    lines = LineFile(path, outputs=outputs)
    line = b"x" * 999 + b"\n"
    for _ in range(100):  # 100 KB into 16 KiB: a write is cut short (or refused) on the way
        lines.write(line)
    lines.close()
    data = path.read_bytes()
    assert data and len(data) % len(line) == 0 and data.endswith(b"\n")  # whole lines only
    assert outputs.summary()[0]["errno"] == errno.ENOSPC


def test_a_line_file_without_outputs_raises_and_names_its_file(full_fs):
    _fill(full_fs)
    os.remove(full_fs / "ballast")
    lines = LineFile(full_fs / "dump.journal")
    _fill(full_fs)
    with pytest.raises(OSError) as caught:
        lines.write(b"y" * 4096 + b"\n")
    assert caught.value.errno == errno.ENOSPC and caught.value.filename == str(full_fs / "dump.journal")
    lines.close()


def test_a_file_deleted_under_the_run_counts_as_lost(tmp_path):
    warnings = []
    outputs = Outputs(warn=warnings.append)
    lines = LineFile(tmp_path / "log.txt", outputs=outputs)
    lines.write(b"one\n")
    os.remove(tmp_path / "log.txt")
    lines.write(b"two\n")  # the OS takes it: the file is only unlinked
    lines.close()
    assert outputs.summary()[0]["error"] == "ENOENT" and "deleted" in warnings[0]


def test_atomic_writes_keep_the_errno_and_leave_nothing(full_fs):
    _fill(full_fs)
    with pytest.raises(OutputError) as caught:
        write_atomic(full_fs / "tuning.json", b"{}" * 4096)
    assert caught.value.errno == errno.ENOSPC and str(caught.value).startswith("cannot write")
    assert sorted(os.listdir(full_fs)) == ["ballast"]


def test_make_below_never_makes_the_root_again(tmp_path):
    assert make_below(tmp_path, "step3", "rank0") == str(tmp_path / "step3" / "rank0")
    assert make_below(tmp_path, "step3", "rank0") == str(tmp_path / "step3" / "rank0")  # already there: fine
    with pytest.raises(FileNotFoundError):
        make_below(tmp_path / "deleted", "step4")
    assert not (tmp_path / "deleted").exists()


def test_a_write_in_progress_defers_what_is_asked_meanwhile():
    outputs, ran = Outputs(), []
    assert outputs.defer(lambda: ran.append("now")) is False  # nothing in progress: the caller runs it
    with outputs:
        with outputs:
            assert outputs.defer(lambda: ran.append("later")) is True
        assert ran == []  # the outer write is still going on
    assert ran == ["later"]


_floats = st.floats(allow_nan=True, allow_infinity=True, width=64)


@settings(max_examples=300, deadline=None)
@given(
    losses=st.lists(st.one_of(st.none(), _floats), min_size=1, max_size=4),
    seconds=st.one_of(st.just(0.0), st.floats(min_value=1e-9, max_value=1e6)),
    samples=st.one_of(st.none(), st.integers(min_value=0, max_value=10**9)),
    first=st.integers(min_value=0, max_value=10**8),
    epoch=st.integers(min_value=0, max_value=10**4),
    rank=st.integers(min_value=0, max_value=512),
    warmup=st.booleans(),
    memory=st.one_of(st.none(), st.floats(min_value=0, max_value=1e7)),
    host=st.tuples(st.floats(min_value=0, max_value=1e6), st.floats(min_value=0, max_value=1e6)),
)
def test_the_hand_written_metrics_line_is_jsons_line(losses, seconds, samples, first, epoch, rank, warmup, memory,
                                                     host):
    entries = [ClosedStep(first + i, None, None, i == 0, 0.0, 1796119648.123456 + i) for i in range(len(losses))]
    window = step_clock.make_window(entries, seconds, samples, losses)
    context = {"epoch": epoch, "rank": rank, "world_size": rank + 1, "warmup": warmup, "memory_mib": memory,
               "host_s": {"data": host[0], "backward": host[1]}}
    line = sinks.metrics_line(window, context)
    assert line == sinks.json_line(sinks.window_record(window, **context))
    record = json.loads(line)
    assert record["step_losses"] == [pytest.approx(v, nan_ok=True) if v is not None else None for v in losses]
    assert math.isnan(record["loss"]) == math.isnan(window.loss)


_NORM = 0.1 + 0.2  # one float object in two fields: health's at log_every=1
_numbers = st.one_of(st.none(), st.booleans(), st.integers(-10**12, 10**12), _floats)
_keys = st.one_of(st.sampled_from(["grad_norm", "step_grad_norms", "grad_nonfinite", "losses", "step", "epoch",
                                   'a"b', "a\\b", "\u00e9", "a\tb", ""]),  # a window's own field; what json escapes
                  st.text(max_size=6))
_field_values = st.one_of(_numbers, st.lists(_numbers, max_size=4), st.tuples(_numbers, _numbers),
                          st.dictionaries(st.one_of(st.text(max_size=4), st.integers(0, 3)), _numbers, max_size=3),
                          st.text(max_size=3), st.just(float("inf")).map(lambda v: [v]))


@settings(max_examples=300, deadline=None)
@given(losses=st.lists(st.one_of(st.none(), _floats), min_size=1, max_size=3),
       fields=st.dictionaries(_keys, _field_values, max_size=4), reorder=st.booleans())
@example(losses=[1.0], fields={"step": 3}, reorder=False)  # a window's own field: json keeps its place
@example(losses=[1.0], fields={"a\\b": 1.0, 'q"': 2}, reorder=False)  # keys json escapes
@example(losses=[1.0, 2.0], fields={"grad_norm": 0.5, "pair": (1.0, None), "losses": {"g": 1.5, "d": None}},
         reorder=False)
@example(losses=[1.0], fields={"grad_norm": _NORM, "step_grad_norms": [_NORM], "grad_nonfinite": 0},
         reorder=False)  # one float in two fields, written once
@example(losses=[1.0], fields={"step_grad_norms": [None], "n": 0.25, "m": [0.25]}, reorder=False)  # no float before
def test_the_hand_written_metrics_line_is_jsons_line_with_the_fields_features_add(losses, fields, reorder):
    entries = [ClosedStep(7 + i, None, None, False, 0.0, 1796119648.5 + i) for i in range(len(losses))]
    window = step_clock.make_window(entries, 0.25, 16, losses)
    context = {"epoch": 1, "rank": 0, "world_size": 2, "warmup": False, "memory_mib": 12.5,
               "host_s": {"data": 0.001, "backward": 0.002}}
    if reorder:  # the monitor's own context in another order: json's order is the dict's
        context = {"rank": 0, **context}
    context.update(fields)
    assert sinks.metrics_line(window, context) == sinks.json_line(sinks.window_record(window, **context))


@pytest.mark.parametrize("features", [{}, {"health": True}], ids=["monitor", "health"])
def test_the_monitors_window_lines_take_the_hand_written_path(setup, tmp_path, monkeypatch, features):
    """When window_record gains a field, metrics_line must learn it too, or every line pays json's price; so must
    it for what a feature adds to the line (health's gradient norms)."""
    import torch.nn.functional as F

    from ascend_tune import TrainingMonitor

    calls = []
    monkeypatch.setattr(sinks, "json_line", lambda record: calls.append(record) or b"{}\n")
    model, optimizer, loader = setup
    with TrainingMonitor(model, optimizer, loader, log_dir=tmp_path, quiet=True, tune=False, **features):
        for x, y in loader:
            loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    assert calls == []
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert len(records) == 8
    if features:
        assert all(r["grad_norm"] > 0 and r["step_grad_norms"] == [r["grad_norm"]] for r in records)
