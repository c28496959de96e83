"""A feature is its package and one row of the registry (contract.callbacks.FEATURES): with nothing else changed,
TrainingMonitor takes its option, the launcher has its flag and carries it in the feature's ``ENV`` to every
process, and a bad SPEC is one line and exit 2 before anything runs. The trial feature is written here, in a
temporary package, exactly as docs/architecture.md's worked example."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from ascend_tune import AscendTuneError, TrainingMonitor
from ascend_tune.contract import callbacks

CONFIG = '''
from dataclasses import dataclass

from ascend_tune.config import FeatureConfig


@dataclass(frozen=True)
class CountConfig(FeatureConfig):
    OPTION = "count"
    ENV = "ASCEND_TUNE_COUNT"
    EXAMPLE = "steps=N"
    RUN_FLAGS = {"count": "count the steps the feature saw (SPEC: steps=N)"}
    steps: int = 5

    def __post_init__(self):
        self.check_int("steps", 1)
'''

CALLBACK = '''
from ascend_tune.contract.callbacks import Callback

from .config import CountConfig


class CountCallback(Callback):
    name = "count"

    def __init__(self, config):
        self.config, self.seen = config, 0

    def on_step_end(self, ctx, step):
        self.seen += step < ctx.start_step + self.config.steps

    def summary(self):
        return {"steps_seen": self.seen, "limit": self.config.steps}


def build_callback(value, ctx):
    config = CountConfig.from_option(value)
    return None if config is None else CountCallback(config)
'''


@pytest.fixture
def count_feature(tmp_path, monkeypatch):
    """The trial feature ``count`` in a package on sys.path and its one registry row."""
    package = tmp_path / "trial_count"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "config.py").write_text(CONFIG)
    (package / "callback.py").write_text(CALLBACK)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(callbacks.FEATURES, "count", "trial_count")
    monkeypatch.delenv("ASCEND_TUNE_COUNT", raising=False)
    return tmp_path


def train(log_dir, steps: int = 4, **options):
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with TrainingMonitor(model, optimizer, log_dir=str(log_dir), quiet=True, tune=False, **options):
        for _ in range(steps):
            loss = model(torch.randn(8, 4)).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return json.loads((log_dir / "summary.json").read_text())


def test_the_monitor_takes_a_registered_features_option_and_its_switch(count_feature, tmp_path, monkeypatch):
    assert train(tmp_path / "a", count=dict(steps=3))["count"] == {"steps_seen": 3, "limit": 3}
    monkeypatch.setenv("ASCEND_TUNE_COUNT", "steps=2")
    assert train(tmp_path / "b")["count"] == {"steps_seen": 2, "limit": 2}


def test_an_unregistered_option_is_still_refused(tmp_path):
    with pytest.raises(AscendTuneError, match="count"):
        TrainingMonitor(torch.nn.Linear(4, 1), log_dir=str(tmp_path), count=True)


RUN = textwrap.dedent("""
    import sys
    from ascend_tune.contract import callbacks
    callbacks.FEATURES["count"] = "trial_count"
    from ascend_tune.cli import main
    sys.exit(main(sys.argv[1:]))
""")


def run_cli(folder, *argv):
    env_code = "import os, sys; print(os.environ.get('ASCEND_TUNE_COUNT'))"
    return subprocess.run([sys.executable, "-c", RUN, "run", *argv, "--", sys.executable, "-c", env_code],
                          cwd=folder, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(folder)})


def test_the_launcher_has_the_features_flag_and_carries_it_in_its_switch(count_feature):
    done = run_cli(count_feature, "--count=steps=7")
    assert done.returncode == 0 and done.stdout == "steps=7\n", done.stderr
    bad = run_cli(count_feature, "--count=steps=0")
    assert bad.returncode == 2 and len(bad.stderr.splitlines()) == 1 and "steps" in bad.stderr, bad.stderr
