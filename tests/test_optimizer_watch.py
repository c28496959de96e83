"""Steps without being told the optimizer: the one that steps the model's parameters, also one made in the block."""

from __future__ import annotations

import json
import math

import pytest
import torch
import torch.nn.functional as F
from conftest import read_jsonl, read_log
from torch.utils.data import DataLoader

from ascend_tune import TrainingMonitor
from ascend_tune.testing.models import TinyMLP, synthetic_classification
from ascend_tune.testing.torch_features import cpu_grad_scaler_missing

ACCUM = 4


def accumulate_loop(model, loader, make_optimizer, micro_losses):
    """The smallest reproduction of issue 12: the optimizer is made inside the block, four backwards of loss / 4
    per optimizer step. Returns the optimizer."""
    optimizer = make_optimizer(model)
    for i, (x, y) in enumerate(loader):
        loss = F.cross_entropy(model(x), y)
        micro_losses.append(float(loss.detach()))
        (loss / ACCUM).backward()
        if (i + 1) % ACCUM == 0:
            optimizer.step()
            optimizer.zero_grad()
    return optimizer


def fresh(seed=0):
    torch.manual_seed(seed)
    model = TinyMLP()
    loader = DataLoader(synthetic_classification(n=96), batch_size=8)
    return model, loader


@pytest.mark.parametrize("make", [
    lambda m: torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9),
    lambda m: torch.optim.AdamW(m.parameters(), lr=1e-2),
], ids=["sgd", "adamw"])
@pytest.mark.parametrize("pass_loader", [True, False])
def test_an_optimizer_made_inside_the_block_with_accumulation_is_one_line_per_step(tmp_path, make, pass_loader,
                                                                                   caplog):
    ref_model, ref_loader = fresh()
    accumulate_loop(ref_model, ref_loader, make, [])
    model, loader = fresh()
    micro: list = []
    with caplog.at_level("WARNING", logger="ascend_tune"):
        with TrainingMonitor(model, train_loader=loader if pass_loader else None, log_dir=tmp_path, quiet=True):
            accumulate_loop(model, loader, make, micro)
    steps = len(loader) // ACCUM
    assert len(read_log(tmp_path)) == steps == 3
    records = read_jsonl(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in records] == list(range(steps))
    for r in records:  # the mean micro-batch loss of each optimizer step
        want = sum(micro[r["step"] * ACCUM:(r["step"] + 1) * ACCUM]) / ACCUM
        assert math.isclose(r["loss"], want, rel_tol=1e-6)
        assert r["samples"] == (8 * ACCUM if pass_loader else None)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["steps"] == steps
    assert summary["steps_from"] == {"kind": "optimizer", "optimizer": type(make(model)).__name__, "passed": False}
    assert not caplog.records  # no fall back, nothing to warn about
    for got, want in zip(model.parameters(), ref_model.parameters()):  # training bitwise unchanged
        assert torch.equal(got, want)


def manual_sgd(model, loader, lr=0.1):
    for x, y in loader:
        F.cross_entropy(model(x), y).backward()
        with torch.no_grad():
            for p in model.parameters():
                p -= lr * p.grad
                p.grad = None


@pytest.mark.parametrize("pass_loader", [True, False])
def test_a_loop_that_never_steps_an_optimizer_counts_backwards_and_says_so_once(tmp_path, caplog, pass_loader):
    model, loader = fresh()
    with caplog.at_level("WARNING", logger="ascend_tune"):
        with TrainingMonitor(model, train_loader=loader if pass_loader else None, log_dir=tmp_path, quiet=True):
            manual_sgd(model, loader)
    assert len(read_log(tmp_path)) == len(loader) == 12
    warnings = [r for r in caplog.records if "no optimizer stepped" in r.getMessage()]
    assert len(warnings) == 1 and warnings[0].levelname == "WARNING"
    events = [r for r in read_jsonl(tmp_path / "metrics.jsonl") if r.get("event") == "warning"]
    assert len(events) == 1 and "each backward counts as a step" in events[0]["message"]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["steps"] == 12 and summary["steps_from"]["kind"] == "backward"


@pytest.mark.parametrize("reset, reason", [(True, "gradients were reset"), (False, "the block ended")])
def test_with_no_model_the_losses_leaves_are_watched(tmp_path, caplog, reset, reason):
    """No model, no loader, no optimizer: the parameters a loss reaches tell a step; else the block's end does."""
    model, loader = fresh()
    with caplog.at_level("WARNING", logger="ascend_tune"):
        with TrainingMonitor(log_dir=tmp_path, quiet=True):
            for x, y in list(loader)[:3]:
                F.cross_entropy(model(x), y).backward()
                if reset:
                    model.zero_grad()
    assert len(read_log(tmp_path)) == 3
    assert reason in caplog.text


def test_a_gan_the_optimizer_of_the_model_passed_defines_the_steps(tmp_path):
    torch.manual_seed(0)
    gen, disc = torch.nn.Linear(8, 8), torch.nn.Linear(8, 1)
    with TrainingMonitor(gen, log_dir=tmp_path, quiet=True):
        opt_g = torch.optim.Adam(gen.parameters(), lr=1e-3)
        opt_d = torch.optim.Adam(disc.parameters(), lr=1e-3)
        seen = []
        for _ in range(5):
            real, noise = torch.randn(16, 8), torch.randn(16, 8)
            d_loss = F.softplus(-disc(real)).mean() + F.softplus(disc(gen(noise).detach())).mean()
            opt_d.zero_grad()
            d_loss.backward()
            opt_d.step()  # the discriminator steps first: not a training step of the model passed
            g_loss = F.softplus(-disc(gen(noise))).mean()
            opt_g.zero_grad()
            g_loss.backward()
            opt_g.step()
            seen.append((float(d_loss.detach()), float(g_loss.detach())))
    records = read_jsonl(tmp_path / "metrics.jsonl")
    assert len(records) == 5  # one per generator step
    # a backward belongs to the next optimizer that steps: the step's loss is the generator's alone, and each
    # optimizer's loss of the batch is beside it (the passed model's class names its optimizer)
    assert [r["loss"] for r in records] == pytest.approx([g for _, g in seen], rel=1e-6)
    assert [r["losses"] for r in records] == [
        {"optimizer0": pytest.approx(d, rel=1e-6), "Linear": pytest.approx(g, rel=1e-6)} for d, g in seen]
    assert json.loads((tmp_path / "summary.json").read_text())["steps_from"]["optimizer"] == "Adam"


class Wrapper(torch.optim.Optimizer):
    """An optimizer that is a hooked torch Optimizer itself and steps an inner one (as ZeroRedundancyOptimizer)."""

    def __init__(self, inner):
        self.inner = inner
        super().__init__([p for g in inner.param_groups for p in g["params"]], {})

    def step(self, closure=None):
        return self.inner.step(closure)


def test_a_wrapping_optimizer_and_closures_count_once_per_real_step(tmp_path):
    model, loader = fresh()
    with TrainingMonitor(model, train_loader=loader, log_dir=tmp_path, quiet=True):
        optimizer = Wrapper(torch.optim.SGD(model.parameters(), lr=0.1))
        for x, y in loader:
            def closure(x=x, y=y):
                optimizer.zero_grad()
                loss = F.cross_entropy(model(x), y)
                loss.backward()
                return loss

            optimizer.step(closure)
    assert len(read_log(tmp_path)) == len(loader) == 12


def test_a_step_gradscaler_skips_is_a_skipped_step_also_before_the_first_real_one(tmp_path):
    if cpu_grad_scaler_missing():
        pytest.skip(cpu_grad_scaler_missing())
    model, loader = fresh()
    batches = list(loader)[:4]
    with TrainingMonitor(model, log_dir=tmp_path, quiet=True):
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 4)
        for i, (x, y) in enumerate(batches):
            loss = F.cross_entropy(model(x), y)
            if i in (0, 2):
                loss = loss * float("inf")  # inf gradients: GradScaler skips optimizer.step()
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
    records = read_jsonl(tmp_path / "metrics.jsonl")
    assert [(r["step"], r["skipped"]) for r in records] == [(0, 1), (1, 0), (2, 1), (3, 0)]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["steps"] == 4 and summary["skipped_steps"] == 2


def test_each_optimizers_loss_rides_with_the_window_read_and_is_not_read_one_by_one(tmp_path, host_reads):
    """Several optimizers: each one's loss goes back with the window's values in one read of a log line (a
    ``float()`` per loss would stall an accelerator's queue once per loss); on the host, where nothing is
    transferred, the window's own losses are read where they lie."""
    torch.manual_seed(0)
    gen, disc = torch.nn.Linear(8, 8), torch.nn.Linear(8, 1)
    opt_g = torch.optim.Adam(gen.parameters(), lr=1e-3)
    opt_d = torch.optim.Adam(disc.parameters(), lr=1e-3)
    seen = []
    with TrainingMonitor(gen, opt_g, log_dir=tmp_path, quiet=True, log_every=5):
        for _ in range(10):
            real, noise = torch.randn(16, 8), torch.randn(16, 8)
            d_loss = F.softplus(-disc(real)).mean() + F.softplus(disc(gen(noise).detach())).mean()
            opt_d.zero_grad()
            d_loss.backward()
            opt_d.step()
            g_loss = F.softplus(-disc(gen(noise))).mean()
            opt_g.zero_grad()
            g_loss.backward()
            opt_g.step()
            seen.append((d_loss.detach().clone(), g_loss.detach().clone()))
    # config.json's two in the first step; per log line: the other optimizer's 5 losses in one read, then the
    # window's 5 losses, each where it lies
    assert host_reads == ["tolist"] * 2 + (["tolist"] + ["item"] * 5) * 2
    records = read_jsonl(tmp_path / "metrics.jsonl")
    for record, window in zip(records, (seen[:5], seen[5:])):
        d_mean = sum(float(d) for d, _ in window) / 5
        assert record["losses"]["optimizer0"] == pytest.approx(d_mean, rel=1e-6)
        assert record["losses"]["Linear"] == pytest.approx(record["loss"], rel=1e-6)
