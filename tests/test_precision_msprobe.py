"""msprobe and the built-in engine read each other's dumps (msprobe runs in subprocesses: it patches torch for good).

One subprocess, once for the module, runs a training with backend="msprobe" through TrainingMonitor, then
``msprobe compare -tp A/dump/step0 -gp B/dump/step0 -o OUT`` on two built-in dumps made here (through the entry
point the ``msprobe`` console script calls, so torch and msprobe are imported once); every test reads the results.
"""

from __future__ import annotations

import csv
import glob
import json
import math
import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

from ascend_tune import TrainingMonitor
from ascend_tune.precision import read_dump
from ascend_tune.precision.backends import msprobe_installed
from ascend_tune.testing.models import TinyMLP, synthetic_classification

pytestmark = pytest.mark.skipif(not msprobe_installed(), reason="mindstudio-probe is not installed")

TRAIN = textwrap.dedent(
    """
    import sys
    import torch
    import torch.nn.functional as F
    from torch.utils.data import DataLoader
    from ascend_tune import TrainingMonitor
    from ascend_tune.testing.models import TinyMLP, synthetic_classification

    def run(log_dir, backend, scale=1.0):
        torch.manual_seed(0)
        model = TinyMLP()
        with torch.no_grad():
            model.fc2.weight.mul_(scale)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        loader = DataLoader(synthetic_classification(n=32), batch_size=8)
        with TrainingMonitor(model, optimizer, loader, log_dir=log_dir, quiet=True, tune=False,
                             precision=dict(backend=backend, level="mix", steps=[0, 2])):
            for x, y in loader:
                loss = F.cross_entropy(model(x), y)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()

    if __name__ == "__main__":
        torch.set_num_threads(1)
        run(sys.argv[1], "msprobe")
        from msprobe.msprobe import main  # what the `msprobe` console script runs

        sys.argv = ["msprobe", "compare", "-tp", sys.argv[2], "-gp", sys.argv[3], "-o", sys.argv[4]]
        main()
    """
)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("msprobe")
    script = root / "train.py"
    script.write_text(TRAIN)
    sys.path.insert(0, str(root))
    try:
        import train  # the same training function, run here with the builtin engine
    finally:
        sys.path.remove(str(root))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        train.run(str(root / "A"), "builtin")
        train.run(str(root / "B"), "builtin", scale=1.5)
    finally:
        torch.set_num_threads(threads)
    os.makedirs(root / "compare")
    proc = subprocess.run(
        [sys.executable, str(script), str(root / "M"), str(root / "A" / "dump" / "step0"),
         str(root / "B" / "dump" / "step0"), str(root / "compare")],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:]
    return root


def test_msprobe_compare_runs_on_two_builtin_dumps(runs):
    results = glob.glob(str(runs / "compare" / "compare_result_*.csv")) + glob.glob(
        str(runs / "compare" / "compare_result_*.xlsx")
    )
    assert len(results) == 1, os.listdir(runs / "compare")
    assert results[0].endswith(".csv")
    with open(results[0], encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    names = [row["NPU Name"] for row in rows]
    assert "Functional.linear.0.forward.input.0" in names and "Functional.linear.1.forward.output.0" in names
    assert "Module.fc2.Linear.forward.0.output.0" in names
    by_name = {row["NPU Name"]: row for row in rows}
    # fc1 saw the same input in both runs; fc2's output differs (its weight was scaled in B)
    assert float(by_name["Functional.linear.0.forward.input.0"]["Max diff"]) == 0.0
    assert float(by_name["Functional.linear.1.forward.output.0"]["L2norm diff"]) != 0.0
    assert rows[0]["NPU_Stack_Info"]  # stack.json was found and read


def test_the_msprobe_backend_dumps_exactly_the_selected_steps(runs):
    dump = runs / "M" / "dump"
    assert sorted(os.listdir(dump)) == ["step0", "step2"]
    with open(runs / "M" / "summary.json", encoding="utf-8") as fh:
        precision = json.load(fh)["precision"]
    assert precision["backend"] == "msprobe" and precision["steps_dumped"] == [0, 2]
    assert [name.startswith("proc") for name in os.listdir(dump / "step0")] == [True]


def test_a_msprobe_dump_reads_with_the_same_op_names_and_values(runs):
    ours = read_dump(runs / "A" / "dump" / "step0")
    theirs = read_dump(runs / "M" / "dump" / "step0")
    assert theirs.rank is None and theirs.level == "mix" and theirs.complete
    assert theirs.names == ours.names
    for name in ("Functional.linear.0.forward", "Torch.relu.0.forward", "Functional.linear.1.backward",
                 "Module.fc1.Linear.forward.0", "Module.fc2.Linear.parameters_grad.0", "Tensor.add_.0.forward"):
        assert _close(theirs.data[name], ours.data[name]), name
    frames = theirs.stack_of("Torch.relu.0.forward")
    assert any(frame.file.endswith("models.py") and frame.function == "forward" for frame in frames)
    assert theirs.construct["Functional.linear.0.forward"] == ours.construct["Functional.linear.0.forward"]


def test_builtin_dumps_step2_match_msprobe_too(runs):
    assert read_dump(runs / "M" / "dump" / "step2").names == read_dump(runs / "A" / "dump" / "step2").names


def _close(a, b) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-5, abs_tol=1e-7)
    return a == b


def test_builtin_training_in_this_process_is_unaffected(runs):
    # the msprobe runs happened in subprocesses: torch here is not patched
    assert F.linear.__module__ in (None, "torch._C._nn") and "msprobe" not in sys.modules
    model = TinyMLP()
    loader = DataLoader(synthetic_classification(n=8), batch_size=8)
    with TrainingMonitor(model, log_dir=runs / "unaffected", quiet=True):
        for x, y in loader:
            F.cross_entropy(model(x), y).backward()
