"""Crash safety: a process killed with SIGKILL inside a dumped step leaves earlier steps whole and a journal."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from ascend_tune.precision import find_dumps, find_overflows, read_dump

SCRIPT = textwrap.dedent(
    """
    import os, signal, sys
    import torch
    import torch.nn.functional as F
    from torch import nn
    from torch.utils.data import DataLoader
    from ascend_tune import TrainingMonitor
    from ascend_tune.testing.models import synthetic_classification

    torch.set_num_threads(1)
    STEP = [0]

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = nn.Linear(16, 32)
            self.fc2 = nn.Linear(32, 4)

        def forward(self, x):
            h = self.fc1(x)
            if STEP[0] == 2:
                os.kill(os.getpid(), signal.SIGKILL)  # dies in the middle of a dumped step
            return self.fc2(torch.relu(h))

    torch.manual_seed(0)
    model = Model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(synthetic_classification(n=40), batch_size=8)
    with TrainingMonitor(model, optimizer, loader, log_dir=sys.argv[1], quiet=True, tune=False,
                         precision=dict(steps="0-3", level="mix")):
        for step, (x, y) in enumerate(loader):
            STEP[0] = step
            loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    """
)


@pytest.fixture(scope="module")
def killed_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("killed")
    script = folder / "train.py"
    script.write_text(SCRIPT)
    proc = subprocess.run([sys.executable, str(script), str(folder / "run")], capture_output=True, text=True,
                          timeout=120)
    return proc, folder / "run" / "dump"


def test_the_process_died_by_sigkill_inside_step_2(killed_run):
    proc, dump = killed_run
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert sorted(os.listdir(dump)) == ["step0", "step1", "step2"]


def test_every_earlier_step_is_valid_json(killed_run):
    _, dump = killed_run
    for step in (0, 1):
        folder = dump / f"step{step}" / "rank0"
        assert sorted(os.listdir(folder)) == ["construct.json", "dump.json", "stack.json"]  # journal dropped
        for name in os.listdir(folder):
            with open(folder / name, encoding="utf-8") as fh:
                json.load(fh)
        complete = read_dump(folder)
        assert complete.complete and "Tensor.add_.3.forward" in complete.names
        assert complete.data["Functional.linear.0.forward"]["output"][0]["Max"] is not None


def test_the_partial_step_is_recovered_from_its_journal(killed_run):
    _, dump = killed_run
    folder = dump / "step2" / "rank0"
    assert os.listdir(folder) == ["dump.journal"]
    partial = read_dump(dump / "step2")
    assert (partial.complete, partial.source, partial.step, partial.rank) == (False, "dump.journal", 2, 0)
    assert (partial.task, partial.level) == ("statistics", "mix")
    assert partial.names == ["Module.fc1.Linear.forward.0", "Functional.linear.0.forward"]
    linear = partial.data["Functional.linear.0.forward"]
    assert linear["input_args"][0]["shape"] == [8, 16] and linear["output"][0]["shape"] == [8, 32]
    assert linear["output"][0]["Max"] is None  # statistics are read back at step end, which never came
    assert partial.construct["Functional.linear.0.forward"] == "Module.fc1.Linear.forward.0"
    frame = partial.stack_of("Functional.linear.0.forward")[0]
    assert (frame.function, frame.code) == ("forward", "h = self.fc1(x)")
    assert [loc.step for loc in find_dumps(dump)] == [0, 1, 2]
    assert find_overflows(str(dump)) == []  # a journal without statistics reports nothing, and does not fail
