"""pytest plugin (entry point ``pytest11``): options and fixtures for downstream test suites.

Kept free of torch imports at module level: pytest loads it in every session of an environment that has
ascend_tune installed.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest


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
    forced = config.getoption("--ascend-tune-device", default=None)
    if forced:
        os.environ["ASCEND_TUNE_DEVICE"] = forced


@pytest.fixture
def fake_npu(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Put ascend_tune's fake ``torch_npu`` on ``sys.path`` and detect devices afresh; undone after the test.

    Set ``ASCEND_TUNE_FAKE_NPU_FAIL`` / ``ASCEND_TUNE_FAKE_NPU_COUNT`` with
    ``monkeypatch`` before using it to simulate broken installs.
    """
    from ascend_tune import device
    from ascend_tune.testing.fakes import fakes_dir

    monkeypatch.syspath_prepend(fakes_dir())
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
