"""Reading training logs: the guide's log.txt (tolerantly and fast) and metrics.jsonl (events skipped)."""

from __future__ import annotations

import json
import math
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ascend_tune.analysis.logs import scan as log_scan
from ascend_tune.analysis.logs.detect import find_runs, locate
from ascend_tune.analysis.logs.read import read_log
from ascend_tune.errors import InputError


def seed_line(step: int, loss: float, rate: float, stamp: bool = True) -> str:
    prefix = "[2026-11-30 12:00:00] " if stamp else ""
    return f"{prefix}(step={step:07d}) Train Loss: {loss:.4f}, Train Steps/Sec: {rate:.2f}"


def test_seed_lines_among_other_lines_ansi_codes_and_missing_timestamps(tmp_path):
    lines = [
        "starting training",
        seed_line(0, 2.5, 10.0),
        "\x1b[32m" + seed_line(1, 2.25, 11.0) + "\x1b[0m",
        "WARNING something unrelated (step=abc)",
        seed_line(2, 2.0, 12.5, stamp=False),
        "INFO trainer: " + seed_line(3, 1.75, 13.0).replace("Train Loss: 1.7500", "Train Loss: \x1b[1m1.7500\x1b[0m"),
    ]
    path = tmp_path / "log.txt"
    path.write_text("\n".join(lines) + "\n")
    log = read_log(str(path))
    assert log.kind == "text" and log.malformed == 0
    assert log.steps.tolist() == [0, 1, 2, 3]
    assert log.losses.tolist() == [2.5, 2.25, 2.0, 1.75]
    assert log.steps_per_sec.tolist() == [10.0, 11.0, 12.5, 13.0]


def test_malformed_loss_lines_are_counted_and_shown_not_fatal(tmp_path):
    path = tmp_path / "log.txt"
    path.write_text(
        seed_line(0, 2.5, 10.0) + "\n"
        + "[2026-11-30 12:00:01] (step=0000001) Train Loss: oops, Train Steps/Sec: 9.00\n"
        + seed_line(2, 2.0, 10.0) + "\n"
        + "[2026-11-30 12:00:03] (step=0000003) Train Lo"  # a line cut by a crash: skipped, not malformed
    )
    log = read_log(str(path))
    assert log.steps.tolist() == [0, 2]
    assert log.malformed == 1
    assert "line 2" in log.malformed_examples[0]
    assert "1 malformed line(s)" in log.notes()[0]
    assert "last line is incomplete" in log.notes()[1]


def test_nan_inf_negative_and_exponent_losses_are_read(tmp_path):
    path = tmp_path / "log.txt"
    path.write_text(
        "(step=0000000) Train Loss: nan, Train Steps/Sec: 1.00\n"
        "(step=0000001) Train Loss: inf, Train Steps/Sec: 1.00\n"
        "(step=0000002) Train Loss: -0.5000, Train Steps/Sec: 1.00\n"
        "(step=0000003) Train Loss: 1.5e-05, Train Steps/Sec: 2e3\n"
    )
    log = read_log(str(path))
    assert math.isnan(log.losses[0]) and log.losses[1] == math.inf
    assert log.losses[2:].tolist() == [-0.5, 1.5e-05]
    assert log.steps_per_sec[3] == 2000.0


_FIELD = st.one_of(
    st.floats(min_value=-1e6, max_value=1e6, allow_nan=False).map(lambda v: f"{v:.4f}"),
    st.floats(min_value=0, max_value=1e4, allow_nan=False).map(lambda v: f"{v:.2f}"),
    st.integers(0, 10**9).map(str),
    st.sampled_from(["nan", "inf", "-inf", "1e-3", ".5", "5.", "-", ".", "12345678901234567", "1.2.3", "+7", "x"]),
)
_LINE = st.one_of(
    st.tuples(st.integers(0, 10**8), _FIELD, _FIELD, st.sampled_from(["", "[2026-11-30 12:00:00] ", "I: "]),
              st.sampled_from(["", " ", "\r", " extra", "e5", ", more"]))
    .map(lambda t: f"{t[3]}(step={t[0]:07d}) Train Loss: {t[1]}, Train Steps/Sec: {t[2]}{t[4]}"),
    st.text(alphabet="(step=)0123456789 TrainLos:,.\n", max_size=40),
)


@settings(max_examples=80, deadline=None)
@given(st.lists(_LINE, min_size=1, max_size=60))
def test_the_vectorised_scan_equals_the_regular_expression_it_implements(lines):
    raw = "\n".join(lines).encode()
    steps, losses, rates, markers = log_scan.scan(raw)
    found = log_scan.LINE.findall(raw)
    assert markers == raw.count(b"(step=")
    assert steps.tolist() == [int(s) for s, _, _ in found]
    np.testing.assert_array_equal(losses, np.array([float(v) for _, v, _ in found], dtype=float))
    np.testing.assert_array_equal(rates, np.array([float(v) for _, _, v in found], dtype=float))


def test_the_scan_agrees_with_the_regex_on_a_long_log_with_changing_widths():
    rng = random.Random(0)
    lines = []
    for step in range(12000):  # losses cross 10 and 1, rates cross 9.99 -> 10
        lines.append(seed_line(step, 20 * 0.9997**step, 9.5 + step / 8000 + rng.random() / 100))
        if step % 997 == 0:
            lines.append("Traceback (most recent call last): (step=?)")
    raw = ("\n".join(lines) + "\n").encode()
    steps, losses, rates, _ = log_scan.scan(raw)
    found = log_scan.LINE.findall(raw)
    assert steps.size == len(found) == 12000
    assert losses.tolist() == [float(v) for _, v, _ in found]
    assert rates.tolist() == [float(v) for _, _, v in found]


def test_metrics_jsonl_skips_events_counts_broken_lines_and_keeps_step_losses(tmp_path):
    path = tmp_path / "metrics.jsonl"
    records = [
        {"step": 1, "loss": 0.00071, "steps_per_sec": 5.0, "samples_per_sec": 40.0, "first_step": 0,
         "step_losses": [0.0008, 0.00062]},
        {"event": "trace", "steps": [2]},
        {"step": 3, "loss": float("nan"), "steps_per_sec": 6.0, "samples_per_sec": None, "first_step": 2,
         "step_losses": [None, float("nan")]},
    ]
    text = "\n".join(json.dumps(r) for r in records) + "\n{broken\n"
    path.write_text(text)
    log = read_log(str(path))
    assert log.kind == "jsonl" and log.events == 1 and log.malformed == 1
    assert log.steps.tolist() == [1, 3] and log.losses[0] == 0.00071  # full precision, not %.4f
    assert log.samples_per_sec[0] == 40.0 and math.isnan(log.samples_per_sec[1])
    assert log.step_numbers.tolist() == [0, 1, 2, 3]
    assert log.step_losses[:2].tolist() == [0.0008, 0.00062]


def test_metrics_jsonl_beside_log_txt_is_preferred_unless_the_seed_input_is_asked_for(tmp_path):
    (tmp_path / "log.txt").write_text(seed_line(0, 0.0007, 1.0) + "\n")
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"step": 0, "loss": 0.00071, "steps_per_sec": 1.0}) + "\n")
    assert locate(str(tmp_path / "log.txt")).path.endswith("metrics.jsonl")
    assert locate(str(tmp_path)).path.endswith("metrics.jsonl")
    assert locate(str(tmp_path), prefer="text").path.endswith("log.txt")
    assert read_log(str(tmp_path)).losses[0] == 0.00071
    assert read_log(str(tmp_path / "log.txt"), prefer="text").losses[0] == 0.0007


@pytest.mark.parametrize(
    "content, message",
    [(b"", "is empty"), (b"\x00\x01\x02binary", "binary"), (b"hello\nworld\n", "no loss lines"),
     (b'{"a": 1}\n', "no metrics records")],
)
def test_bad_logs_raise_input_errors_that_say_what_to_do(tmp_path, content, message):
    path = tmp_path / "log.txt"
    path.write_bytes(content)
    with pytest.raises(InputError, match=message):
        read_log(str(path))


def test_missing_paths_and_folders_without_logs_are_input_errors(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        read_log(str(tmp_path / "nope"))
    with pytest.raises(InputError, match="holds no log.txt"):
        read_log(str(tmp_path))


def test_find_runs_walks_run_folders_like_the_seed(tmp_path):
    for name in ("b", "a"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "log.txt").write_text(seed_line(0, 1.0, 1.0) + "\n")
    (tmp_path / "notes").mkdir()
    assert find_runs(str(tmp_path)) == [str(tmp_path / "a"), str(tmp_path / "b")]
    assert find_runs(str(tmp_path / "a")) == [str(tmp_path / "a")]
    with pytest.raises(InputError):
        find_runs(str(tmp_path / "notes"))


def test_a_stray_parenthesis_between_loss_lines_is_no_line():
    # found by hypothesis: every marker parsed on the fast path, and a "(" that starts no marker
    line = "(step=0000000) Train Loss: 0.0000, Train Steps/Sec: 0.0000"
    raw = "\n".join([line, "(", line, line, line, line.replace("0.0000\x00", "") + " ", "000000000"]).encode()
    raw = raw.replace(b"Sec: 0.0000 ", b"Sec: 10000.0000 ")
    steps, losses, rates, markers = log_scan.scan(raw)
    assert markers == 5 and steps.size == 5
    assert rates.tolist() == [float(v) for _, _, v in log_scan.LINE.findall(raw)]
