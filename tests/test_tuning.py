"""Tuning on a CPU: by default a report and nothing changed; with tune=True the optimizer runs foreach / fused in
place, trains as before, and is restored at the end."""

from __future__ import annotations

import copy
import inspect
import json

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from ascend_tune import AscendTuneError, TrainingMonitor
from ascend_tune.testing.models import TinyMLP, synthetic_classification
from ascend_tune.testing.torch_features import fused_on_cpu_missing
from ascend_tune.tuning import TuneConfig

X, Y = synthetic_classification(n=64).tensors



def fastest(cls):
    """What the tuning picks without timing: fused where this torch runs it on the CPU (torch 2.4 on), else foreach."""
    return "fused" if fused_on_cpu_missing(cls) is None else "foreach"


OPTIMIZERS = {
    "sgd-momentum": (torch.optim.SGD, {"lr": 0.1, "momentum": 0.9, "weight_decay": 1e-4}, fastest(torch.optim.SGD)),
    "adamw": (torch.optim.AdamW, {"lr": 1e-2}, fastest(torch.optim.AdamW)),
    "adagrad": (torch.optim.Adagrad, {"lr": 0.1}, fastest(torch.optim.Adagrad)),
    "rmsprop": (torch.optim.RMSprop, {"lr": 1e-2, "momentum": 0.5}, "foreach"),  # torch has no fused RMSprop
}


def steps(model, optimizer, n, scheduler=None):
    for _ in range(n):
        optimizer.zero_grad()
        F.cross_entropy(model(X), Y).backward()
        optimizer.step()
        if scheduler is not None:
            scheduler.step()


def pair(cls, kwargs):
    torch.manual_seed(0)
    model = TinyMLP()
    reference = copy.deepcopy(model)
    return model, cls(model.parameters(), **kwargs), reference, cls(reference.parameters(), **kwargs)


def tuning_json(log_dir):
    return json.loads((log_dir / "tuning.json").read_text())


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_swapped_optimizer_trains_like_the_untouched_one(tmp_path, name):
    cls, kwargs, variant = OPTIMIZERS[name]
    model, optimizer, reference, ref_opt = pair(cls, kwargs)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=5, gamma=0.5)  # made before the monitor
    ref_sched = torch.optim.lr_scheduler.StepLR(ref_opt, step_size=5, gamma=0.5)
    with TrainingMonitor(model, optimizer, log_dir=tmp_path, quiet=True, tune={"optimizer": "swap", "measure": False}):
        assert optimizer.param_groups[0][variant] is True
        steps(model, optimizer, 12, scheduler)
        optimizer.load_state_dict(optimizer.state_dict())  # a checkpoint round trip inside the block
        assert optimizer.param_groups[0][variant] is True
        steps(model, optimizer, 8, scheduler)
    steps(reference, ref_opt, 20, ref_sched)
    assert optimizer.param_groups[0]["lr"] == ref_opt.param_groups[0]["lr"] == kwargs["lr"] * 0.5**4
    for got, want in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-7)
    record = tuning_json(tmp_path)["optimizer"]
    assert record["action"] == "swapped" and record["variant"] == variant
    assert "probe" in record["reason"] and record["restored_at_exit"] is True


def test_the_user_keeps_flags_class_and_state_after_the_block(tmp_path):
    model, optimizer, *_ = pair(torch.optim.AdamW, {"lr": 1e-2})
    with TrainingMonitor(model, optimizer, log_dir=tmp_path, quiet=True, tune={"optimizer": "swap", "measure": False}):
        steps(model, optimizer, 3)
        saved = optimizer.state_dict()
        assert optimizer.param_groups[0][fastest(torch.optim.AdamW)] is True
    assert type(optimizer) is torch.optim.AdamW
    assert (optimizer.param_groups[0]["foreach"], optimizer.param_groups[0]["fused"]) == (None, None)
    assert (saved["param_groups"][0]["foreach"], saved["param_groups"][0]["fused"]) == (None, None)  # checkpoints too
    assert all(float(s["step"]) == 3 for s in optimizer.state.values())
    before = [p.detach().clone() for p in model.parameters()]
    steps(model, optimizer, 1)  # the kept state goes on training with torch's own loop
    assert all(not torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_timing_touches_neither_parameters_nor_state_nor_the_random_stream(tmp_path):
    model, optimizer, *_ = pair(torch.optim.SGD, {"lr": 0.1, "momentum": 0.9})
    params = [p.detach().clone() for p in model.parameters()]
    rng = torch.get_rng_state()
    with TrainingMonitor(model, optimizer, log_dir=tmp_path, quiet=True):
        assert torch.equal(torch.get_rng_state(), rng)
        assert all(torch.equal(a, b) and b.grad is None for a, b in zip(params, model.parameters()))
        assert not optimizer.state
    record = tuning_json(tmp_path)["optimizer"]
    timed = {"for-loop", "foreach"} | ({"fused"} if fused_on_cpu_missing(torch.optim.SGD) is None else set())
    assert set(record["measured_ms"]) == timed
    assert record["would_run"] == min(record["measured_ms"], key=record["measured_ms"].get)
    assert "measured fastest" in record["reason"]


@pytest.mark.parametrize("flag", ["foreach", "fused"])
def test_an_explicit_false_is_the_users_choice_unless_forced(tmp_path, flag):
    no_fused = "fused" not in inspect.signature(torch.optim.SGD).parameters
    if flag == "fused" and no_fused:
        pytest.skip(fused_on_cpu_missing(torch.optim.SGD))
    model, optimizer, *_ = pair(torch.optim.SGD, {"lr": 0.1, "momentum": 0.9, flag: False})
    with TrainingMonitor(model, optimizer, log_dir=tmp_path / "auto", quiet=True, tune=True):
        assert (optimizer.param_groups[0]["foreach"], optimizer.param_groups[0].get("fused")) == (
            (False, None) if flag == "foreach" else (None, False)
        )
    record = tuning_json(tmp_path / "auto")["optimizer"]
    assert record["action"] == "kept" and f"{flag}=False is set explicitly" in record["reason"]
    assert "force" in record["reason"]
    with TrainingMonitor(model, optimizer, log_dir=tmp_path / "force", quiet=True,
                         tune={"optimizer": "force", "measure": False}):
        assert optimizer.param_groups[0][fastest(torch.optim.SGD)] is True
    assert tuning_json(tmp_path / "force")["optimizer"]["action"] == "swapped"
    assert optimizer.param_groups[0][flag] is False  # and back to the user's choice


def test_tune_false_changes_and_records_nothing(tmp_path, caplog):
    model, optimizer, *_ = pair(torch.optim.SGD, {"lr": 0.1, "momentum": 0.9})
    with caplog.at_level("INFO", logger="ascend_tune"):
        with TrainingMonitor(model, optimizer, log_dir=tmp_path, quiet=True, tune=False):
            assert (optimizer.param_groups[0]["foreach"], optimizer.param_groups[0].get("fused")) == (None, None)
            steps(model, optimizer, 2)
    assert not (tmp_path / "tuning.json").exists()
    assert "tuning" not in json.loads((tmp_path / "summary.json").read_text())
    assert not any("ascend_tune: tune " in r.getMessage() for r in caplog.records)


def test_every_decision_is_logged_and_summarised(tmp_path, caplog):
    model, optimizer, *_ = pair(torch.optim.SGD, {"lr": 0.1})
    with caplog.at_level("INFO", logger="ascend_tune"):
        with TrainingMonitor(model, optimizer, log_dir=tmp_path, quiet=True, tune={"optimizer": "swap",
                                                                                   "measure": False}):
            steps(model, optimizer, 1)
    messages = [r.getMessage() for r in caplog.records]
    assert any(f"tune optimizer SGD: swapped {fastest(torch.optim.SGD)}" in m for m in messages)
    assert any("tune compile mode: skipped" in m and "NPU runtime setting" in m for m in messages)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["tuning"]["optimizer"]["variant"] == fastest(torch.optim.SGD)
    assert tuning_json(tmp_path)["compile_mode"]["action"] == "skipped"


def test_several_ranks_choose_by_rule_not_by_timing(tmp_path, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    model, optimizer, *_ = pair(torch.optim.SGD, {"lr": 0.1, "momentum": 0.9})
    with TrainingMonitor(model, optimizer, log_dir=tmp_path, quiet=True, tune=True):
        pass
    record = tuning_json(tmp_path)["optimizer"]
    assert record["variant"] == fastest(torch.optim.SGD) and "measured_ms" not in record
    assert "2 ranks must all pick the same variant" in record["reason"]


def test_optimizers_without_a_faster_path_are_left_with_the_reason(tmp_path):
    model = TinyMLP()
    optimizer = torch.optim.LBFGS(model.parameters())
    with TrainingMonitor(model, optimizer, log_dir=tmp_path, quiet=True, tune=True):
        pass
    record = tuning_json(tmp_path)["optimizer"]
    assert record["action"] == "kept" and "no foreach / fused implementation" in record["reason"]


def test_sparse_embeddings_rule_out_fused(tmp_path):
    if "fused" not in inspect.signature(torch.optim.SGD).parameters:
        pytest.skip(fused_on_cpu_missing(torch.optim.SGD))  # no fused SGD to rule out
    model = nn.Sequential(nn.Embedding(10, 4, sparse=True), nn.Linear(4, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with TrainingMonitor(model, optimizer, log_dir=tmp_path, quiet=True, tune={"optimizer": "swap", "measure": False}):
        model(torch.tensor([[1, 2]])).sum().backward()
        optimizer.step()
    record = tuning_json(tmp_path)["optimizer"]
    assert record["variant"] == "foreach" and "sparse gradients" in record["refused"]["fused"]


def test_config_from_any_and_the_environment(tmp_path, monkeypatch):
    assert TuneConfig.from_any(None) is None  # not given, as for every feature; on by default is the factory's
    assert TuneConfig.from_option(None, default=TuneConfig()) == TuneConfig() == TuneConfig(optimizer="auto")
    assert TuneConfig.from_any(True) == TuneConfig.from_text("1") == TuneConfig(optimizer="swap")  # swaps anywhere
    assert TuneConfig.from_text("report") == TuneConfig(optimizer="report")
    assert not TuneConfig.from_any(False).enabled
    assert TuneConfig.from_any({"optimizer": False, "jit_compile": None}).enabled is False
    assert TuneConfig.from_any({"optimizer": True}).optimizer == "swap"
    assert TuneConfig().swaps_on("npu") and not TuneConfig().swaps_on("cpu") and not TuneConfig().swaps_on("cuda")
    for bad, message in [({"optimiser": "force"}, "did you mean 'optimizer'"), ({"optimizer": "always"}, "one of"),
                         ({"jit_compile": "no"}, "jit_compile"), ("yes", "True, False, a dict")]:
        with pytest.raises(AscendTuneError, match=message):
            TuneConfig.from_any(bad)
    model, optimizer, *_ = pair(torch.optim.SGD, {"lr": 0.1})
    monkeypatch.setenv("ASCEND_TUNE_TUNE", "0")
    with TrainingMonitor(model, optimizer, log_dir=tmp_path / "off", quiet=True):
        pass
    assert not (tmp_path / "off" / "tuning.json").exists()
    monkeypatch.setenv("ASCEND_TUNE_TUNE", "maybe")
    with pytest.raises(AscendTuneError, match="ASCEND_TUNE_TUNE"):
        with TrainingMonitor(model, optimizer, log_dir=tmp_path / "bad", quiet=True):
            pass


def unmonitored_run(cls, kwargs, n=6):
    torch.manual_seed(0)
    model = TinyMLP()
    optimizer = cls(model.parameters(), **kwargs)
    losses = []
    for _ in range(n):
        optimizer.zero_grad()
        loss = F.cross_entropy(model(X), Y)
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())
    return model, optimizer, losses


@pytest.mark.parametrize("name", ["adamw", "sgd-momentum"])
def test_by_default_on_cpu_nothing_changes_and_the_faster_variant_is_reported(tmp_path, capsys, name):
    cls, kwargs, _ = OPTIMIZERS[name]
    ref_model, ref_opt, ref_losses = unmonitored_run(cls, kwargs)
    torch.manual_seed(0)
    model = TinyMLP()
    optimizer = cls(model.parameters(), **kwargs)
    groups_before = [{k: v for k, v in g.items() if k != "params"} for g in optimizer.param_groups]
    losses = []
    with TrainingMonitor(model, optimizer, log_dir=tmp_path):
        assert [{k: v for k, v in g.items() if k != "params"} for g in optimizer.param_groups] == groups_before
        for _ in range(6):
            optimizer.zero_grad()
            loss = F.cross_entropy(model(X), Y)
            loss.backward()
            optimizer.step()
            losses.append(loss.detach())
    assert all(torch.equal(a, b) for a, b in zip(losses, ref_losses))  # bitwise the user's own run
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), ref_model.parameters()))
    assert [{k: v for k, v in g.items() if k != "params"} for g in optimizer.param_groups] == [
        {k: v for k, v in g.items() if k != "params"} for g in ref_opt.param_groups]
    record = tuning_json(tmp_path)["optimizer"]
    ms = record["measured_ms"]
    assert record["action"] == "reported" and record["variant"] == "for-loop"
    assert record["would_run"] == min(ms, key=ms.get) and "flags_during" not in record
    assert record["gain"] == pytest.approx(ms["for-loop"] / ms[record["would_run"]], rel=1e-3)
    lines = [line for line in capsys.readouterr().err.splitlines() if "ascend_tune: tune:" in line]
    # a torch whose for-loop is the fastest it has (torch 2.1: no fused SGD) has nothing faster to report
    faster = record["would_run"] != "for-loop"
    assert len(lines) == 1 and ("left as built on cpu" if faster else "nothing faster to run here") in lines[0]
    if record["would_run"] != "for-loop":
        assert f"as fast with {record['would_run']}=True" in lines[0]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["tuning"]["optimizer"]["action"] == "reported"
    assert summary["tuning"]["optimizer"]["would_run"] == record["would_run"]

