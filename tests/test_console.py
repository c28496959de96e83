"""One console rule in every framework: log lines on stderr, rank 0, unless quiet, whatever the app did to logging."""

from __future__ import annotations

import logging

import pytest
import torch.nn.functional as F
from conftest import read_log

from ascend_tune import TrainingMonitor


@pytest.fixture
def app_logging(request, capsys):
    """The application's own logging set-up, undone afterwards: none, HF scripts' ``basicConfig`` (root at
    WARNING), or a root handler at INFO (a verbose app, which used to print every line twice)."""
    root = logging.getLogger()
    saved = (root.level, list(root.handlers))
    if request.param != "none":
        handler = logging.StreamHandler()  # sys.stderr as pytest captures it
        handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
        root.addHandler(handler)
        root.setLevel(logging.WARNING if request.param == "basicConfig" else logging.INFO)
    yield request.param
    root.setLevel(saved[0])
    root.handlers[:] = saved[1]


def _train(model, optimizer, loader):
    for x, y in loader:
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


@pytest.mark.parametrize("app_logging", ["none", "basicConfig", "root-info"], indirect=True)
@pytest.mark.parametrize("quiet", [False, True])
def test_lines_reach_stderr_once_unless_quiet(setup, tmp_path, capsys, app_logging, quiet):
    model, optimizer, loader = setup
    with TrainingMonitor(model, optimizer, loader, log_dir=tmp_path, quiet=quiet, tune=False):
        _train(model, optimizer, loader)
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if "Train Loss:" in line]
    assert len(lines) == (0 if quiet else len(loader))
    assert all(line.startswith("[") and "(step=" in line for line in lines)  # the guide's line, as in log.txt
    assert len(read_log(tmp_path)) == len(loader)  # the log file is unaffected


@pytest.mark.parametrize("app_logging", ["basicConfig"], indirect=True)
def test_other_ranks_print_no_lines(setup, tmp_path, capsys, app_logging):
    model, optimizer, loader = setup
    with TrainingMonitor(model, optimizer, loader, log_dir=tmp_path, rank=1, tune=False):
        _train(model, optimizer, loader)
    assert "Train Loss:" not in capsys.readouterr().err


@pytest.mark.parametrize("app_logging", ["basicConfig"], indirect=True)
def test_the_fall_back_warning_is_seen_under_basic_config(setup, tmp_path, capsys, app_logging):
    model, _optimizer, loader = setup
    with TrainingMonitor(model, None, loader, log_dir=tmp_path, quiet=True):
        for x, y in loader:
            F.cross_entropy(model(x), y).backward()
            model.zero_grad()
    err = capsys.readouterr().err
    assert err.count("no optimizer stepped the model's parameters") == 1
