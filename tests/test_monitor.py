"""TrainingMonitor around unchanged loops: steps, losses, accumulation, restoration, bad input."""

from __future__ import annotations

import contextlib
import json
import math
import os
import sys

import pytest
import torch
import torch.nn.functional as F
from conftest import SEED_LINE, read_by_us, read_jsonl, read_log, train
from torch.utils.data import DataLoader, DistributedSampler

from ascend_tune import AscendTuneError, TrainingMonitor
from ascend_tune.runtime import capture, compiled
from ascend_tune.testing.models import TinyMLP, synthetic_classification
from ascend_tune.testing.torch_features import cpu_grad_scaler_missing


def test_one_line_per_optimizer_step_in_the_seed_format(setup, tmp_path):
    model, optimizer, loader = setup
    with TrainingMonitor(model, optimizer, loader, log_dir=tmp_path, quiet=True):
        seen = train(model, optimizer, loader)
    lines = read_log(tmp_path)
    assert len(lines) == len(loader) == 8
    matches = [SEED_LINE.search(line) for line in lines]
    assert all(matches)
    assert [int(m.group(1)) for m in matches] == list(range(8))
    assert [float(m.group(2)) for m in matches] == pytest.approx([float(v) for v in seen], abs=6e-5)
    assert lines[0].startswith("[") and "\x1b" not in "".join(lines)
    records = read_jsonl(tmp_path / "metrics.jsonl")
    assert [r["loss"] for r in records] == pytest.approx([float(v) for v in seen], rel=1e-6)
    assert all(r["samples"] == 8 and r["window_steps"] == 1 for r in records)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["steps"] == 8 and summary["device"]["kind"] == "cpu"


@pytest.mark.parametrize("accumulate, divide", [("sum", True), ("mean", False)])
def test_gradient_accumulation_logs_the_mean_micro_batch_loss(setup, tmp_path, accumulate, divide):
    model, optimizer, loader = setup
    micro = []
    with TrainingMonitor(model, optimizer, loader, log_dir=tmp_path, quiet=True, accumulate=accumulate):
        optimizer.zero_grad()
        for i, (x, y) in enumerate(loader):
            loss = F.cross_entropy(model(x), y)
            micro.append(float(loss.detach()))
            (loss / 4 if divide else loss).backward()
            if (i + 1) % 4 == 0:
                optimizer.step()
                optimizer.zero_grad()
    records = read_jsonl(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in records] == [0, 1]
    expected = [sum(micro[0:4]) / 4, sum(micro[4:8]) / 4]
    assert [r["loss"] for r in records] == pytest.approx(expected, abs=1e-4)
    assert [r["samples"] for r in records] == [32, 32]
    logged = [float(SEED_LINE.search(line).group(2)) for line in read_log(tmp_path)]
    assert logged == pytest.approx(expected, abs=1e-4)


def test_log_every_k_shows_the_mean_step_loss_of_the_window(setup, tmp_path):
    model, optimizer, loader = setup
    with TrainingMonitor(model, optimizer, loader, log_dir=tmp_path, quiet=True, log_every=3):
        seen = [float(v) for v in train(model, optimizer, loader)]
    records = read_jsonl(tmp_path / "metrics.jsonl")
    # steps 0-2, 3-5, and the partial window 6-7 written at exit
    assert [(r["first_step"], r["step"]) for r in records] == [(0, 2), (3, 5), (6, 7)]
    assert [r["loss"] for r in records] == pytest.approx([sum(seen[0:3]) / 3, sum(seen[3:6]) / 3, sum(seen[6:]) / 2])
    assert records[0]["step_losses"] == pytest.approx(seen[0:3])


@pytest.mark.parametrize("health", [None, True])
def test_no_host_reads_between_log_steps(setup, tmp_path, monkeypatch, health):
    model, optimizer, loader = setup
    calls = []
    for name in ("item", "cpu", "tolist", "numpy", "__float__"):
        original = getattr(torch.Tensor, name)

        def counting(self, *args, _original=original, _name=name, **kwargs):
            if read_by_us(sys._getframe(1)):  # torch's own reads (the DataLoader's seed) are not ours
                calls.append(_name)
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, counting)
    long_loader = DataLoader(synthetic_classification(n=160), batch_size=8)  # 20 steps
    reads = []
    with TrainingMonitor(model, optimizer, long_loader, log_dir=tmp_path, quiet=True, log_every=5, health=health):
        for x, y in long_loader:
            loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            reads.append(len(calls))
    # reads at the 4 log steps only, none on the 16 other steps: on the host, where nothing is transferred, each of
    # a line's 5 losses is read where it lies, and the health feature's gradient norms ride along (one read);
    # config.json (the experiment feature) reads twice, both by the first step's end: the initial weights as it
    # begins, the first batch's statistics as it ends (the next step's begin, before any dump of it starts)
    assert len(read_log(tmp_path)) == 4
    line = (["tolist"] if health else []) + ["item"] * 5
    assert reads[:2] == [2, 2] and calls == ["tolist"] * 2 + line * 4
    # a log step's line is written as its step is committed, at the next batch (the last one's at the block's end)
    assert {i + 1: b - a for i, (a, b) in enumerate(zip(reads, reads[1:])) if b != a} == {5: len(line), 10: len(line),
                                                                                     15: len(line)}
    assert all((r.get("grad_norm") is not None) == bool(health) for r in read_jsonl(tmp_path / "metrics.jsonl"))


@pytest.mark.parametrize("health", [None, True])
def test_host_losses_are_logged_as_the_loop_reads_them_in_their_own_dtype(tmp_path, health):
    # float64 losses and gradient norms (a float64 reference run) over windows of 3 steps and a partial one: each
    # value exactly what the loop's .item() gives, not rounded through float32
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1).double()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(16, 4, dtype=torch.float64), torch.randn(16, 1, dtype=torch.float64)
    seen, norms = [], []
    with TrainingMonitor(model, optimizer, log_dir=tmp_path, quiet=True, log_every=3, health=health):
        for _ in range(7):
            loss = F.mse_loss(model(x), y) * (1 + 1e-12)
            optimizer.zero_grad()
            loss.backward()
            norms.append(torch.nn.utils.clip_grad_norm_(model.parameters(), 1e9).item())
            optimizer.step()
            seen.append(loss.item())
    records = [r for r in read_jsonl(tmp_path / "metrics.jsonl") if "step_losses" in r]
    assert [v for r in records for v in r["step_losses"]] == seen
    assert all(v != float(torch.tensor(v, dtype=torch.float64).float()) for v in seen)  # float32 would round them
    if health:
        assert [v for r in records for v in r["step_grad_norms"]] == norms


def test_everything_is_restored_after_the_block_even_when_it_raises(setup, tmp_path):
    model, optimizer, loader = setup
    scalers = capture.grad_scaler_classes()  # torch.amp's (torch 2.3 on) or torch.cuda.amp's
    before = (
        torch.Tensor.backward,
        torch.autograd.backward,
        [(c.scale, c.step) for c in scalers],
        type(loader),
        dict(optimizer._optimizer_step_pre_hooks),
        dict(optimizer._optimizer_step_post_hooks),
    )

    def state():
        return (
            torch.Tensor.backward,
            torch.autograd.backward,
            [(c.scale, c.step) for c in scalers],
            type(loader),
            dict(optimizer._optimizer_step_pre_hooks),
            dict(optimizer._optimizer_step_post_hooks),
        )

    with TrainingMonitor(model, optimizer, loader, log_dir=tmp_path / "ok", quiet=True):
        assert state() != before  # the block did patch something
        train(model, optimizer, loader)
    assert state() == before
    assert "_ascend_tune_marks" not in vars(loader)

    with pytest.raises(RuntimeError, match="boom"):
        with TrainingMonitor(model, optimizer, loader, log_dir=tmp_path / "raise", quiet=True):
            for i, (x, y) in enumerate(loader):
                F.cross_entropy(model(x), y).backward()
                optimizer.step()
                if i == 2:
                    raise RuntimeError("boom")
    assert state() == before
    summary = json.loads((tmp_path / "raise" / "summary.json").read_text())
    assert summary["interrupted_by"] == "RuntimeError" and summary["steps"] == 3


def test_without_the_optimizer_passed_the_one_stepping_the_model_ends_steps(setup, tmp_path):
    model, optimizer, loader = setup
    with TrainingMonitor(model, None, loader, log_dir=tmp_path, quiet=True):
        train(model, optimizer, loader)
    assert len(read_log(tmp_path)) == 8
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["steps_from"] == {"kind": "optimizer", "optimizer": "SGD", "passed": False}


def test_explicit_step_and_loader_do_not_double_count(setup, tmp_path):
    model, optimizer, loader = setup
    losses = []
    with TrainingMonitor(model, optimizer, log_dir=tmp_path, quiet=True) as mon:
        for x, y in mon.loader(loader):
            loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            mon.step(loss * 0 + 7.0)  # an explicit loss wins over the captured one
            losses.append(7.0)
    records = read_jsonl(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in records] == list(range(8))
    assert [r["loss"] for r in records] == pytest.approx(losses)
    assert all(r["samples"] == 8 for r in records)


def test_explicit_step_without_optimizer_or_loader(tmp_path):
    model = TinyMLP()
    x, y = synthetic_classification(n=8).tensors
    with TrainingMonitor(model, log_dir=tmp_path, quiet=True) as mon:
        for _ in range(5):
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            mon.step()
    records = read_jsonl(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in records] == list(range(5))
    assert all(r["samples"] is None for r in records)


def test_non_scalar_backward_and_autograd_grad_are_not_losses(setup, tmp_path):
    model, optimizer, loader = setup
    with TrainingMonitor(model, optimizer, loader, log_dir=tmp_path, quiet=True):
        for x, y in loader:
            x = x.requires_grad_(True)
            out = model(x)
            # a gradient penalty through torch.autograd.grad, and a pipeline-style backward of activations
            (gx,) = torch.autograd.grad(out.sum(), x, create_graph=True)
            hidden = model.fc1(x)
            hidden.backward(torch.ones_like(hidden) * 0)
            loss = F.cross_entropy(out, y) + 0 * gx.pow(2).sum()
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            break
    (record,) = read_jsonl(tmp_path / "metrics.jsonl")
    assert record["loss"] == pytest.approx(float(loss.detach()), rel=1e-6)


def test_a_reentrant_checkpoints_backward_is_not_a_loss(setup, tmp_path):
    model, optimizer, loader = setup
    seen = []
    with TrainingMonitor(model, optimizer, loader, log_dir=tmp_path, quiet=True):
        for x, y in loader:
            # the checkpointed output is the scalar loss: the recompute inside its backward back-propagates it again
            loss = torch.utils.checkpoint.checkpoint(
                lambda inputs, targets: F.cross_entropy(model(inputs), targets), x.requires_grad_(True), y,
                use_reentrant=True)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            seen.append(float(loss.detach()))
    records = read_jsonl(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in records] == list(range(len(loader)))
    assert [r["loss"] for r in records] == pytest.approx(seen, rel=1e-6)


def test_lbfgs_closure_step_loss_is_the_first_evaluation(tmp_path):
    torch.manual_seed(0)
    model = TinyMLP()
    x, y = synthetic_classification(n=32).tensors
    optimizer = torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=4)
    returned = []

    def closure():
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        return loss

    with TrainingMonitor(model, optimizer, log_dir=tmp_path, quiet=True):
        for _ in range(3):
            returned.append(float(optimizer.step(closure).detach()))
    records = read_jsonl(tmp_path / "metrics.jsonl")
    assert [r["loss"] for r in records] == pytest.approx(returned, rel=1e-6)


def _torch_cpu_scaler() -> object:
    if cpu_grad_scaler_missing():  # the torch_npu case covers this torch's torch.cuda.amp.GradScaler
        pytest.skip(cpu_grad_scaler_missing())
    return torch.amp.GradScaler("cpu", init_scale=1024.0)


def _npu_scaler() -> object:
    # torch_npu's GradScaler derives from torch.amp.GradScaler, or torch.cuda.amp.GradScaler before torch 2.3
    import torch_npu

    return torch_npu.npu.amp.GradScaler(init_scale=1024.0)


@pytest.mark.parametrize("make_scaler", [_torch_cpu_scaler, _npu_scaler], ids=["torch", "torch_npu"])
def test_grad_scaler_loss_is_unscaled_and_skipped_steps_are_not_merged(setup, tmp_path, request, make_scaler):
    model, optimizer, loader = setup
    if make_scaler is _npu_scaler:
        request.getfixturevalue("fake_npu")
    scaler = make_scaler()
    seen = []
    # torch_npu's scaler class overrides scale/step, so it is passed; torch's own is seen without it
    passed = scaler if make_scaler is _npu_scaler else None
    with TrainingMonitor(model, optimizer, loader, log_dir=tmp_path, quiet=True, scaler=passed, tune=False):
        for i, (x, y) in enumerate(loader):
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            seen.append(float(loss.detach()))
            poison = torch.tensor(float("inf")) if i == 2 else torch.tensor(1.0)
            # step 2 gets inf gradients (its loss stays finite): GradScaler skips optimizer.step()
            scaler.scale(loss + 0 * (model.fc2.bias.sum() * poison)).backward()
            scaler.step(optimizer)
            scaler.update()
    records = read_jsonl(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in records] == list(range(8))
    assert [r["skipped"] for r in records] == [0, 0, 1, 0, 0, 0, 0, 0]
    finite = [r["loss"] for i, r in enumerate(records) if i != 2]
    assert finite == pytest.approx([v for i, v in enumerate(seen) if i != 2], rel=1e-5)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["skipped_steps"] == 1


def test_non_finite_loss_is_logged_not_raised(setup, tmp_path):
    model, optimizer, loader = setup
    with TrainingMonitor(model, optimizer, loader, log_dir=tmp_path, quiet=True, warmup_steps=0):
        for i, (x, y) in enumerate(loader):
            loss = F.cross_entropy(model(x), y) * (float("nan") if i == 3 else 1.0)
            loss.backward()
            optimizer.zero_grad()  # keep the weights finite
            optimizer.step()
    lines = read_log(tmp_path)
    assert "Train Loss: nan," in lines[3]
    assert all(SEED_LINE.search(line) for i, line in enumerate(lines) if i != 3)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["nonfinite_steps"] == 1 and summary["steps"] == 8


def test_warmup_steps_are_logged_but_not_in_the_statistics(setup, tmp_path):
    model, optimizer, loader = setup
    with TrainingMonitor(model, optimizer, loader, log_dir=tmp_path, quiet=True, warmup_steps=3):
        train(model, optimizer, loader)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["steps"] == 8 and summary["steady_steps"] == 5
    assert summary["steps_per_sec"]["windows"] == 5
    records = read_jsonl(tmp_path / "metrics.jsonl")
    assert [r["warmup"] for r in records] == [True] * 3 + [False] * 5


def test_fresh_run_sets_earlier_logs_aside_and_resume_appends(setup, tmp_path):
    model, optimizer, loader = setup
    with TrainingMonitor(model, optimizer, loader, log_dir=tmp_path, quiet=True):
        train(model, optimizer, loader)
    first = (tmp_path / "log.txt").read_text()
    with TrainingMonitor(model, optimizer, loader, log_dir=tmp_path, quiet=True):
        train(model, optimizer, loader)
    (previous,) = [p for p in tmp_path.iterdir() if p.name.startswith("previous-")]
    assert (previous / "log.txt").read_text() == first
    assert {p.name for p in previous.iterdir()} == {"log.txt", "metrics.jsonl", "summary.json", "config.json"}
    with TrainingMonitor(model, optimizer, loader, log_dir=tmp_path, quiet=True, start_step=8):
        train(model, optimizer, loader)
    steps = [int(SEED_LINE.search(line).group(1)) for line in read_log(tmp_path)]
    assert steps == list(range(16))
    assert len(read_jsonl(tmp_path / "metrics.jsonl")) == 16


def test_rank_other_than_zero_writes_no_log(setup, tmp_path, monkeypatch):
    model, optimizer, loader = setup
    monkeypatch.setenv("RANK", "1")
    with TrainingMonitor(model, optimizer, loader, log_dir=tmp_path / "run", quiet=True) as mon:
        train(model, optimizer, loader)
    assert mon.rank == 1
    assert not (tmp_path / "run" / "log.txt").exists()
    assert mon.totals.summary()["steps"] == 8


def test_torch_save_of_the_model_inside_the_block(setup, tmp_path):
    model, optimizer, loader = setup
    with TrainingMonitor(model, optimizer, loader, log_dir=tmp_path, quiet=True):
        train(model, optimizer, loader)
        torch.save(model, tmp_path / "model.pt")
        torch.save(optimizer.state_dict(), tmp_path / "opt.pt")
    assert isinstance(torch.load(tmp_path / "model.pt", weights_only=False), TinyMLP)


def test_distributed_sampler_epoch_advances_unless_the_script_sets_it(tmp_path):
    data = synthetic_classification(n=16)
    model = TinyMLP()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    sampler = DistributedSampler(data, num_replicas=1, rank=0, shuffle=True)
    loader = DataLoader(data, batch_size=8, sampler=sampler)
    epochs = []
    with TrainingMonitor(model, optimizer, loader, log_dir=tmp_path / "a", quiet=True):
        for _ in range(3):
            train(model, optimizer, loader)
            epochs.append(sampler.epoch)
    assert epochs == [0, 1, 2]

    sampler.set_epoch(0)
    with TrainingMonitor(model, optimizer, loader, log_dir=tmp_path / "b", quiet=True) as mon:
        for epoch in (5, 6, 7):  # a resumed script manages its own epochs
            sampler.set_epoch(epoch)
            train(model, optimizer, loader)
            epochs.append((sampler.epoch, mon.epoch))
    assert epochs[3:] == [(5, 5), (6, 6), (7, 7)]


def test_samples_are_counted_from_dict_batches_and_samples_per_step_wins(tmp_path):
    model = TinyMLP()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = synthetic_classification(n=24).tensors
    batches = [{"x": x[i : i + 6], "y": y[i : i + 6]} for i in range(0, 24, 6)]
    loader = DataLoader(batches, batch_size=None)
    with TrainingMonitor(model, optimizer, loader, log_dir=tmp_path / "a", quiet=True):
        for batch in loader:
            F.cross_entropy(model(batch["x"]), batch["y"]).backward()
            optimizer.step()
    assert [r["samples"] for r in read_jsonl(tmp_path / "a" / "metrics.jsonl")] == [6] * 4
    with TrainingMonitor(model, optimizer, loader, log_dir=tmp_path / "b", quiet=True, samples_per_step=100):
        for batch in loader:
            F.cross_entropy(model(batch["x"]), batch["y"]).backward()
            optimizer.step()
    assert [r["samples"] for r in read_jsonl(tmp_path / "b" / "metrics.jsonl")] == [100] * 4


def test_log_lines_are_echoed_to_stderr_unless_quiet(setup, tmp_path, capsys):
    model, optimizer, loader = setup
    with TrainingMonitor(model, optimizer, loader, log_dir=tmp_path / "a"):
        train(model, optimizer, loader)
    assert capsys.readouterr().err.count("Train Loss:") == 8
    with TrainingMonitor(model, optimizer, loader, log_dir=tmp_path / "b", quiet=True):
        train(model, optimizer, loader)
    assert "Train Loss:" not in capsys.readouterr().err


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"model": [1, 2]}, "torch.nn.Module"),
        ({"model": "resnet"}, "torch.nn.Module"),
        ({"optimizer": "sgd"}, "torch.optim.Optimizer"),
        ({"log_evry": 5}, "did you mean 'log_every'"),
        ({"log_every": 0}, "log_every must be an integer >= 1"),
        ({"accumulate": "max"}, "accumulate"),
    ],
)
def test_bad_options_fail_before_any_step(setup, tmp_path, kwargs, message):
    model, optimizer, loader = setup
    args = {"model": model, "optimizer": optimizer, "train_loader": loader, "log_dir": tmp_path, "quiet": True}
    args.update(kwargs)
    stepped = []
    with pytest.raises(AscendTuneError, match=message):
        with TrainingMonitor(**args):
            stepped.append(True)
    assert not stepped


def test_unwritable_log_dir_fails_at_enter_and_keeps_the_file(setup, tmp_path):
    model, optimizer, loader = setup
    blocker = tmp_path / "a-file"
    blocker.write_text("the user's data")
    with pytest.raises(AscendTuneError, match="cannot write to log_dir"):
        with TrainingMonitor(model, optimizer, loader, log_dir=blocker / "sub", quiet=True):
            pytest.fail("the block must not run")
    assert blocker.read_text() == "the user's data"
    assert torch.autograd.backward.__name__ == "backward" and type(loader) is DataLoader


def test_mon_step_outside_the_block_is_a_clear_error(tmp_path):
    mon = TrainingMonitor(TinyMLP(), log_dir=tmp_path)
    with pytest.raises(AscendTuneError, match="inside `with TrainingMonitor"):
        mon.step(torch.tensor(1.0))


def test_a_list_cannot_be_wrapped_but_steps_are_still_counted(tmp_path, caplog):
    model = TinyMLP()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    batches = list(DataLoader(synthetic_classification(n=16), batch_size=8))
    with caplog.at_level("WARNING", logger="ascend_tune"):
        with TrainingMonitor(model, optimizer, batches, log_dir=tmp_path, quiet=True):
            for x, y in batches:
                F.cross_entropy(model(x), y).backward()
                optimizer.step()
    assert "cannot be wrapped" in caplog.text
    assert len(read_log(tmp_path)) == 2
    assert math.isfinite(read_jsonl(tmp_path / "metrics.jsonl")[0]["loss"])
    assert os.path.exists(tmp_path / "summary.json")


def test_event_records_are_told_apart_from_step_records_and_readers_skip_them(setup, tmp_path):
    from ascend_tune.analysis.logs.read import read_log as read_loss_log

    model, optimizer, loader = setup
    with TrainingMonitor(model, optimizer, loader, log_dir=tmp_path, quiet=True, tune=False,
                         profile=dict(skip_first=1, wait=0, warmup=1, active=1, repeat=1),
                         precision=dict(steps=[2], level="L1")):
        train(model, optimizer, loader)
    records = read_jsonl(tmp_path / "metrics.jsonl")
    events = [r for r in records if "event" in r]
    kinds = {r["event"] for r in events}
    assert {"precision_dump", "profile_trace"} <= kinds
    assert any("step" in r for r in events)  # events name their step too ...
    steps = [r for r in records if "event" not in r]
    assert all("loss" in r and "window_steps" in r for r in steps)  # ... but only step records have these
    log = read_loss_log(str(tmp_path / "metrics.jsonl"))
    assert list(log.steps) == list(range(8)) and log.events == len(events)  # one record per step, no duplicate


@pytest.mark.parametrize("path", ["python", "compiled"])
def test_a_step_that_writes_no_line_runs_a_handful_of_our_calls(tmp_path, path):
    """The per-step path's shape (issue #34): past config.json's window, a step that writes no line calls one
    function of ours per event it sees (the batch, the backward, the step's two hooks), a few inside them, and no
    feature at all; where the step path is compiled (runtime/step_path.c), none. Counted, not timed, so it holds on
    a loaded machine."""
    import ascend_tune

    if path == "compiled" and compiled.module() is None:
        pytest.skip("the step path is not compiled here (no C compiler or no Python.h)")

    package = os.path.dirname(ascend_tune.__file__)
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(torch.utils.data.TensorDataset(torch.randn(400, 4), torch.randint(0, 2, (400,))),
                        batch_size=2)
    ours: dict = {}

    def profile(frame, event, arg):
        if event == "call" and frame.f_code.co_filename.startswith(package):
            name = f"{os.path.relpath(frame.f_code.co_filename, package)}:{frame.f_code.co_name}"
            ours[name] = ours.get(name, 0) + 1

    with compiled.python_only() if path == "python" else contextlib.nullcontext(), \
            TrainingMonitor(model, optimizer, loader, log_dir=tmp_path, log_every=1000, quiet=True, tune=False):
        for i, (x, y) in enumerate(loader):
            if i == 50:
                sys.setprofile(profile)
            loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if i == 149:
                sys.setprofile(None)  # the batch of step 50 through the step of 149: 100 whole steps
        sys.setprofile(None)
    per_step = {name: count / 100 for name, count in ours.items()}
    if path == "compiled":
        assert per_step == {}
    assert sum(per_step.values()) <= 12, per_step  # 24.9 before issue #34
    assert not [name for name in per_step if not name.startswith("runtime/")], per_step  # no feature's
