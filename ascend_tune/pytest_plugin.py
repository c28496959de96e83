"""pytest plugin (entry point ``pytest11``): fixtures, markers and an option for downstream test suites.

- ``training_monitor``: a factory of TrainingMonitor objects logging to the test's tmp folder;
- ``loss_log``: parse a run's log (any format ``compare-loss`` reads) or folder into arrays (``LossLog``);
- ``fake_npu``: the fake torch_npu on ``sys.path`` with device detection reset, undone after the test;
- ``assert_loss_aligned``: the loss-curve check (also importable from ``ascend_tune.testing``);
- ``rank_report``: every rank of a multi-rank run side by side (the report's "Ranks" section), also shown in the
  session's terminal summary;
- markers ``npu`` / ``cuda``: skip the test when that device is absent;
- ``--ascend-tune-device=cpu|cuda|npu``: force device detection for the session.

Kept free of torch imports at module level: pytest loads it in every session of an environment that has
ascend_tune installed.
"""

from __future__ import annotations

import itertools
import os
import sys
from collections.abc import Iterator
from typing import Any, Callable

import pytest

_DEVICE_MARKERS = ("npu", "cuda")


def pytest_addoption(parser: Any) -> None:
    group = parser.getgroup("ascend_tune")
    group.addoption(
        "--ascend-tune-device",
        action="store",
        default=None,
        choices=("cpu", "cuda", "npu"),
        help="force ascend_tune's device detection (sets ASCEND_TUNE_DEVICE for the session)",
    )


def pytest_configure(config: Any) -> None:
    for kind in _DEVICE_MARKERS:
        config.addinivalue_line("markers", f"{kind}: run only where ascend_tune detects a {kind} device")
    forced = config.getoption("--ascend-tune-device", default=None)
    if forced:
        os.environ["ASCEND_TUNE_DEVICE"] = forced


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: Any) -> None:
    wanted = [kind for kind in _DEVICE_MARKERS if item.get_closest_marker(kind) is not None]
    if not wanted:
        return
    from ascend_tune.device import detect_device
    from ascend_tune.errors import AscendTuneError

    try:
        kind = detect_device().kind
    except AscendTuneError as exc:
        pytest.skip(f"device detection failed: {exc}")
    if kind not in wanted:
        pytest.skip(f"needs a {' or '.join(wanted)} device; ascend_tune detected {kind}")


@pytest.fixture
def training_monitor(tmp_path: Any) -> Callable[..., Any]:
    """A factory: ``training_monitor(model, optimizer, loader, **options)`` → a TrainingMonitor.

    Each monitor logs to its own folder under the test's ``tmp_path`` (``run0``, ``run1``, ...) unless
    ``log_dir`` is given, and is quiet unless ``quiet=False``.
    """
    from ascend_tune import TrainingMonitor

    counter = itertools.count()

    def make(model: Any = None, optimizer: Any = None, train_loader: Any = None, **options: Any) -> Any:
        options.setdefault("log_dir", str(tmp_path / f"run{next(counter)}"))
        options.setdefault("quiet", True)
        return TrainingMonitor(model, optimizer, train_loader, **options)

    return make


@pytest.fixture
def loss_log() -> Callable[[Any], Any]:
    """``loss_log(path, **how)`` → a LossLog (steps, losses, steps/sec as arrays) of a log.txt, metrics.jsonl,
    trainer_state.json, Lightning metrics.csv, TensorBoard events or a folder; ``how``: read_log's ``format``,
    ``loss_key``, ``tag``."""
    from ascend_tune.analysis.logs.read import read_log

    return lambda path, **how: read_log(os.fspath(path), **how)


@pytest.fixture
def assert_loss_aligned() -> Callable[..., Any]:
    """The assertion ``assert_loss_aligned(base, target, threshold=...)`` (5% by default), as a fixture."""
    from ascend_tune.testing.alignment import assert_loss_aligned as check

    return check


@pytest.fixture
def rank_report(request: Any) -> Callable[..., Any]:
    """``rank_report(run_dir, jobs=None)`` → the run's ``RanksReport`` (one row per rank, the cross-rank answers:
    the first inf/NaN's rank, the rank the others wait for), None for a one-rank run. Each one is also listed in the
    "ascend_tune ranks" section of the terminal summary."""
    from ascend_tune.analysis.report.ranks import ranks_report

    def make(run_dir: Any, jobs: Any = None) -> Any:
        found = ranks_report(os.fspath(run_dir), jobs)
        if found is not None:
            request.config.stash.setdefault(_RANKS, []).append((request.node.nodeid, found))
        return found

    return make


_RANKS: Any = pytest.StashKey()


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: Any) -> None:
    """The "ascend_tune ranks" section: each rank_report of the session, one row per rank."""
    reports = config.stash.get(_RANKS, [])
    if not reports:
        return
    from ascend_tune.analysis.report.ranks import HEADER

    terminalreporter.section("ascend_tune ranks")
    for nodeid, found in reports:
        terminalreporter.write_line(f"{nodeid}: {found.run}")
        terminalreporter.write_line("  " + " | ".join(HEADER))
        for row in found.rows:
            terminalreporter.write_line("  " + " | ".join(row))
        for line in found.answers():
            terminalreporter.write_line(f"  {line}")


@pytest.fixture
def fake_npu(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Put ascend_tune's fake ``torch_npu`` on ``sys.path`` and detect devices afresh; undone after the test.

    A device forced by ``--ascend-tune-device`` / ``ASCEND_TUNE_DEVICE`` is lifted for the test.

    Set ``ASCEND_TUNE_FAKE_NPU_FAIL`` (``import`` / ``runtime``) or ``ASCEND_TUNE_FAKE_NPU_COUNT`` with
    ``monkeypatch`` to simulate broken installs or a machine without a visible NPU.
    """
    from ascend_tune import device
    from ascend_tune.testing.fakes import fakes_dir

    monkeypatch.syspath_prepend(fakes_dir())
    monkeypatch.delenv("ASCEND_TUNE_DEVICE", raising=False)  # the test asked for the NPU path: detect it
    _drop_torch_npu()
    device.reset_detection()
    try:
        yield
    finally:
        _drop_torch_npu()
        device.reset_detection()


def _drop_torch_npu() -> None:
    for name in [n for n in sys.modules if n == "torch_npu" or n.startswith("torch_npu.")]:
        del sys.modules[name]
