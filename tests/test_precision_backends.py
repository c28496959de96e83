"""Which backend runs, and how the ptdbg_ascend backend drives the guide's debugger (a faithful fake here)."""

from __future__ import annotations

import json
import os
import sys

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

from ascend_tune import TrainingMonitor
from ascend_tune.precision.backends import msprobe_installed
from ascend_tune.testing.fakes import fakes_dir, legacy_dir
from ascend_tune.testing.models import TinyMLP, synthetic_classification


def _drop(prefixes):
    for name in [n for n in sys.modules if n.split(".")[0] in prefixes]:
        del sys.modules[name]


@pytest.fixture
def fake_ptdbg(monkeypatch):
    """The fakes folder on sys.path: ``ptdbg_ascend`` and ``torch_npu`` both importable, dropped afterwards."""
    monkeypatch.syspath_prepend(fakes_dir())
    monkeypatch.syspath_prepend(legacy_dir())
    _drop(("ptdbg_ascend", "torch_npu"))
    import ptdbg_ascend

    ptdbg_ascend.reset()
    yield ptdbg_ascend
    _drop(("ptdbg_ascend", "torch_npu"))


def train(tmp_path, batches=5, **precision):
    torch.manual_seed(0)
    model = TinyMLP()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(synthetic_classification(n=8 * batches), batch_size=8)
    with TrainingMonitor(model, optimizer, loader, log_dir=tmp_path, quiet=True, precision=precision):
        for x, y in loader:
            loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    with open(tmp_path / "summary.json", encoding="utf-8") as fh:
        return json.load(fh)["precision"]


def test_auto_picks_ptdbg_when_importable_and_drives_it_with_the_seed_api(tmp_path, fake_ptdbg):
    summary = train(tmp_path, steps=[1, 3])
    assert summary["backend"] == "ptdbg_ascend" and summary["steps_dumped"] == [1, 3]
    calls = fake_ptdbg.CALLS
    init = [c for c in calls if c[0] == "init"]
    assert init == [("init", dict(dump_path=str(tmp_path / "dump"), hook_name="dump", rank=None, step=[1, 3],
                                  enable_dataloader=False, model=None))]
    configured = [c[1] for c in calls if c[0] == "configure_hook"]
    assert configured[-1] == dict(mode="api_stack", scope=[], api_list=[], input_output_mode=["all"],
                                  summary_only=True)
    assert [c for c in calls if c[0] == "start"] == [("start", 1), ("start", 3)]  # its counter follows the log
    assert [c for c in calls if c[0] == "stop"] == [("stop", 1), ("stop", 3)]
    # step 4 runs after the last selected step: no start() (ptdbg's would raise "exit after iteration")
    assert sorted(os.listdir(tmp_path / "dump")) == ["step1", "step3"]
    assert os.path.exists(tmp_path / "dump" / "step3" / "ptdbg_dump_v4.0" / "rank0" / "api_stack_dump.pkl")


def test_the_fake_ends_training_past_the_last_step_as_ptdbg_did(fake_ptdbg, tmp_path):
    debugger = fake_ptdbg.PrecisionDebugger(dump_path=str(tmp_path), hook_name="dump", step=[0])
    debugger.start()
    debugger.stop()
    debugger.step()
    with pytest.raises(Exception, match="ptdbg: exit after iteration 0"):
        debugger.start()


def test_ptdbg_overflow_check_and_filters(tmp_path, fake_ptdbg):
    train(tmp_path / "overflow", batches=2, task="overflow_check", overflow_nums=3, steps=[0], backend="ptdbg_ascend")
    init = next(c[1] for c in fake_ptdbg.CALLS if c[0] == "init")
    assert init["hook_name"] == "overflow_check"
    assert [c[1] for c in fake_ptdbg.CALLS if c[0] == "configure_hook"][-1] == dict(mode="api", overflow_nums=3)
    fake_ptdbg.reset()
    train(tmp_path / "list", batches=2, steps=[0], list=["linear"], data_mode=["forward"], task="tensor")
    configured = [c[1] for c in fake_ptdbg.CALLS if c[0] == "configure_hook"][-1]
    assert configured == dict(mode="list", scope=["linear"], api_list=[], input_output_mode=["forward"],
                              summary_only=False)


def test_auto_uses_the_builtin_engine_on_cpu_even_with_msprobe_installed(tmp_path):
    summary = train(tmp_path, batches=1)
    assert summary["backend"] == "builtin"
    assert "msprobe" not in sys.modules


@pytest.mark.skipif(not msprobe_installed(), reason="mindstudio-probe is not installed")
def test_auto_uses_msprobe_on_an_npu_created_only_when_a_step_is_dumped(tmp_path, monkeypatch):
    # only the fake torch_npu (no ptdbg_ascend) on the path: an NPU image with msprobe
    monkeypatch.syspath_prepend(fakes_dir())
    _drop(("torch_npu",))
    try:
        summary = train(tmp_path / "run", batches=2, steps=[10])  # the selected step never comes
    finally:
        _drop(("torch_npu",))
    assert summary["backend"] == "msprobe" and summary["steps_dumped"] == []
    assert "msprobe" not in sys.modules  # created lazily: never imported, torch never patched
