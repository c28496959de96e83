"""The health feature (``health=``): the step's gradient norm read back with the loss, module statistics, spikes.

Real torch loops and the real Hugging Face Trainer; every expected number is computed here by the test's own loop.
"""

from __future__ import annotations

import json
import math
import random
import statistics
from collections import deque

import pytest
import torch
import torch.nn.functional as F
from conftest import read_jsonl
from torch.utils.data import DataLoader, TensorDataset

from ascend_tune import HealthConfig, TrainingMonitor
from ascend_tune.analysis.stats import MAD_TO_SIGMA, SortedWindow
from ascend_tune.errors import ConfigError
from ascend_tune.health.spikes import SpikeRule
from ascend_tune.testing.torch_features import transformers_missing

pytestmark = pytest.mark.usefixtures("one_thread")


def setup(seed: int = 0, n: int = 64, batch: int = 8):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(seed)
    data = TensorDataset(torch.randn(n, 8, generator=gen), torch.randint(0, 2, (n,), generator=gen))
    return model, optimizer, DataLoader(data, batch_size=batch, shuffle=True, generator=gen)


def total_norm(model) -> float:
    return float(torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in model.parameters()])))


def step_records(folder) -> list:
    return [r for r in read_jsonl(folder / "metrics.jsonl") if "event" not in r]


# --- the gradient norm ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("clip", [False, True])
def test_grad_norm_is_the_norm_the_step_applied_with_and_without_clip(tmp_path, clip):
    model, optimizer, loader = setup()
    expected = []
    with TrainingMonitor(model, optimizer, loader, log_dir=tmp_path, quiet=True, health=True):
        for x, y in loader:
            loss = F.cross_entropy(model(x), y) * 20  # large gradients: clipping changes them
            optimizer.zero_grad()
            loss.backward()
            if clip:
                expected.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)))
                assert total_norm(model) <= 1.0 + 1e-5  # clipped: the optimizer's gradients are not the logged norm
            else:
                expected.append(total_norm(model))
            optimizer.step()
    records = step_records(tmp_path)
    assert [r["grad_norm"] for r in records] == pytest.approx(expected, rel=1e-5)
    assert all(r["grad_nonfinite"] == 0 for r in records)
    assert max(expected) > 1.0


def test_grad_norm_with_grad_scaler_is_the_unscaled_norm_and_log_every_k_is_the_window_mean(tmp_path):
    scaler_class = getattr(torch.amp, "GradScaler", None)
    if scaler_class is None:
        pytest.skip(f"torch {torch.__version__} has no torch.amp.GradScaler (the CPU GradScaler is torch 2.3's)")
    model, optimizer, loader = setup()
    scaler = scaler_class("cpu", init_scale=1024.0)
    expected = []
    with TrainingMonitor(model, optimizer, loader, log_dir=tmp_path, quiet=True, log_every=4, health=True):
        for x, y in loader:
            loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad()
            scaler.scale(loss).backward()
            scaler.unscale_(optimizer)
            expected.append(total_norm(model))
            scaler.step(optimizer)
            scaler.update()
    records = step_records(tmp_path)
    assert [r["step_grad_norms"] for r in records] == [pytest.approx(expected[:4], rel=1e-5),
                                                       pytest.approx(expected[4:], rel=1e-5)]
    assert [r["grad_norm"] for r in records] == pytest.approx([sum(expected[:4]) / 4, sum(expected[4:]) / 4], rel=1e-5)


def test_grad_norm_with_gradient_accumulation_is_the_accumulated_gradients_norm(tmp_path):
    model, optimizer, loader = setup()
    expected = []
    with TrainingMonitor(model, optimizer, loader, log_dir=tmp_path, quiet=True, health=True):
        for i, (x, y) in enumerate(loader):
            (F.cross_entropy(model(x), y) / 4).backward()
            if i % 4 == 3:
                expected.append(total_norm(model))
                optimizer.step()
                optimizer.zero_grad()
    records = step_records(tmp_path)
    assert len(records) == 2
    assert [r["grad_norm"] for r in records] == pytest.approx(expected, rel=1e-5)


def test_no_optimizer_passed_still_gives_the_grad_norm_and_tensorboard_shows_it(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    model, optimizer, loader = setup()
    expected = []
    with TrainingMonitor(model, None, loader, log_dir=tmp_path, quiet=True, health=True, tensorboard=True):
        for x, y in loader:
            loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            expected.append(total_norm(model))
            optimizer.step()
    assert [r["grad_norm"] for r in step_records(tmp_path)] == pytest.approx(expected, rel=1e-5)
    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    assert [e.value for e in events.Scalars("train/grad_norm")] == pytest.approx(expected, rel=1e-5)


def test_health_reads_nothing_back_between_log_steps(tmp_path, host_reads):
    model, optimizer, _ = setup()
    gen = torch.Generator().manual_seed(1)
    loader = DataLoader(TensorDataset(torch.randn(160, 8, generator=gen), torch.randint(0, 2, (160,), generator=gen)),
                        batch_size=8)  # 20 steps
    with TrainingMonitor(model, optimizer, loader, log_dir=tmp_path, quiet=True, log_every=5, health=True):
        for x, y in loader:
            loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
    # reads at the 4 log lines only: the window's grad norms (one read, riding along with the losses) and, on the
    # host where nothing is transferred, each of its 5 losses where it lies; config.json's two by the first step's end
    assert host_reads == ["tolist"] * 2 + (["tolist"] + ["item"] * 5) * 4
    assert all(r["grad_norm"] is not None for r in step_records(tmp_path))


@pytest.mark.parametrize("health, begins", [(True, 0), (dict(on_anomaly="modules"), 21), (dict(modules=True), 21)])
def test_a_steps_beginning_calls_health_only_where_it_has_work(tmp_path, monkeypatch, health, begins):
    # the default (norms, warnings) does nothing at a step's beginning: no step dispatches to it; module statistics
    # and an anomaly's response need the step under way: every step's beginning (the first at the block's start)
    from ascend_tune.health.callback import HealthCallback

    calls = []
    original = HealthCallback.on_step_begin
    monkeypatch.setattr(HealthCallback, "on_step_begin", lambda self, ctx, step: calls.append(step) or original(
        self, ctx, step))
    model, optimizer, loader = setup(n=160)  # 20 steps
    with TrainingMonitor(model, optimizer, loader, log_dir=tmp_path, quiet=True, health=health):
        for x, y in loader:
            loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    assert calls == list(range(begins))
    records = step_records(tmp_path)
    assert len(records) == 20 and all(r["grad_norm"] is not None for r in records)


class NormCalls(torch.overrides.TorchFunctionMode):
    """Counts the gradient-norm calls made while it is on (the clip's own and anyone else's)."""

    def __init__(self):
        super().__init__()
        self.calls = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in (torch._foreach_norm, torch.linalg.vector_norm, torch.norm, torch.Tensor.norm):
            self.calls += 1
        return func(*args, **(kwargs or {}))


def clipped_run(folder, health, nan_at: int = -1, clip_first_only: bool = False, nan_grad_at: int = -1):
    """8 clipped SGD steps; the loss at ``nan_at`` is NaN; at ``nan_grad_at`` the last layer's weight gradient gets
    a NaN after backward. Returns (clip's returned norms, norm calls seen, the run's losses)."""
    model, optimizer, loader = setup()
    returned, losses = [], []
    counter = NormCalls()
    with TrainingMonitor(model, optimizer, loader, log_dir=folder, quiet=True, health=health), counter:
        for i, (x, y) in enumerate(loader):
            loss = F.cross_entropy(model(x), y) * 20
            if i == nan_at:
                loss = loss * float("nan")
            optimizer.zero_grad()
            loss.backward()
            if i == nan_grad_at:
                model[2].weight.grad[0, 0] = float("nan")
            params = model[0].parameters() if clip_first_only else model.parameters()
            returned.append(float(torch.nn.utils.clip_grad_norm_(params, 1.0)))
            optimizer.step()
            losses.append(float(loss.detach()))
    return returned, counter.calls, losses


def test_a_clipped_step_logs_the_clips_own_norm_and_computes_no_norm_of_its_own(tmp_path):
    returned, calls, losses = clipped_run(tmp_path / "health", True, nan_at=5)
    _, alone, losses_alone = clipped_run(tmp_path / "alone", None, nan_at=5)
    records = step_records(tmp_path / "health")
    assert [r["grad_norm"] for r in records[:5]] == returned[:5]  # the very value clip_grad_norm_ returned
    assert math.isnan(returned[5]) and math.isnan(records[5]["grad_norm"])
    assert [r["grad_nonfinite"] for r in records] == [0] * 5 + [4] + [4] * 2  # the NaN step's 4 gradients, then
    # the NaN weights' own (clipping by a NaN norm made every gradient NaN, as the optimizer then saw them)
    assert calls == alone == 2 * 8  # the clip's own two a step (per-parameter norms, their norm); health added none
    assert losses[:5] == losses_alone[:5]


def test_windows_of_clipped_steps_and_of_mixed_steps_log_each_steps_norm_and_count(tmp_path):
    model, optimizer, loader = setup(n=96)  # 12 steps, log_every=4: three windows
    returned = []
    with TrainingMonitor(model, optimizer, loader, log_dir=tmp_path, quiet=True, log_every=4, health=True):
        for i, (x, y) in enumerate(loader):
            loss = F.cross_entropy(model(x), y) * 20
            if i == 7:
                loss = loss * float("nan")  # from here every gradient is NaN
            optimizer.zero_grad()
            loss.backward()
            if i == 9:  # unclipped: its window reads (norm, count) pairs, the clipped ones' counts still derived
                returned.append(total_norm(model))
            else:
                returned.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)))
            optimizer.step()
    records = step_records(tmp_path)
    norms = [v for r in records for v in r["step_grad_norms"]]
    assert norms[:7] == returned[:7]  # the very values clip_grad_norm_ returned: the norms rode alone
    assert all(math.isnan(v) for v in norms[7:] + returned[7:])
    assert [r["grad_nonfinite"] for r in records] == [0, 4, 4 * 4]  # 4 NaN gradients a step from step 7


def test_a_clip_over_part_of_the_parameters_leaves_the_count_to_the_optimizers_step(tmp_path):
    returned, calls, _ = clipped_run(tmp_path, True, clip_first_only=True, nan_grad_at=3)
    records = step_records(tmp_path)
    assert [r["grad_norm"] for r in records[:4]] == returned[:4]  # the clip's norm, over the first layer
    assert [r["grad_nonfinite"] for r in records[:4]] == [0, 0, 0, 1]  # the last layer's NaN, unseen by the clip
    assert calls > 2 * 8  # the optimizer's gradients were normed at its step


def test_a_clipped_nan_steps_count_is_the_gradients_the_clip_normed(tmp_path):
    # the optimizer also holds a layer the forward never uses: no gradient, so neither normed nor made NaN
    model, _, _ = setup()
    unused = torch.nn.Linear(8, 8)
    params = list(model.parameters()) + list(unused.parameters())
    optimizer = torch.optim.SGD(params, lr=0.1)
    gen = torch.Generator().manual_seed(0)
    with TrainingMonitor(model, optimizer, log_dir=tmp_path, quiet=True, health=True):
        for i in range(3):
            loss = model(torch.randn(4, 8, generator=gen)).sum() * (math.nan if i == 2 else 1.0)
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            optimizer.step()
    records = step_records(tmp_path)
    assert [r["grad_nonfinite"] for r in records] == [0, 0, 4]  # the model's 4 gradients, not the 6 parameters
    assert math.isnan(records[2]["grad_norm"])


# --- the Hugging Face Trainer --------------------------------------------------------------------------------------

class TokenBlocks(torch.utils.data.Dataset):
    def __init__(self, n: int, length: int = 16, vocab: int = 64):
        self.ids = torch.randint(0, vocab, (n, length), generator=torch.Generator().manual_seed(0))

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def test_hf_trainer_grad_norm_equals_trainer_state_at_every_step(tmp_path, monkeypatch):
    if transformers_missing():
        pytest.skip(transformers_missing())
    transformers = pytest.importorskip("transformers")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, n_positions=16, vocab_size=64)
    model = transformers.GPT2LMHeadModel(config)
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "hf"), per_device_train_batch_size=2, max_steps=6, logging_steps=1,
        learning_rate=1e-3, max_grad_norm=1.0, report_to=[], save_strategy="no", use_cpu=True, disable_tqdm=True,
        dataloader_num_workers=0, seed=0,
    )
    trainer = transformers.Trainer(model=model, args=args, train_dataset=TokenBlocks(12))
    with TrainingMonitor(model, log_dir=tmp_path / "mon", quiet=True, health=True):
        trainer.train()
    trainer.state.save_to_json(str(tmp_path / "trainer_state.json"))
    state = json.loads((tmp_path / "trainer_state.json").read_text())
    theirs = [h["grad_norm"] for h in state["log_history"] if "grad_norm" in h]
    ours = [r["grad_norm"] for r in step_records(tmp_path / "mon")]
    assert len(theirs) == 6
    assert ours == pytest.approx(theirs, rel=1e-5)


# --- anomalies -----------------------------------------------------------------------------------------------------

def noisy_run(folder, steps: int, corrupt: int = -1, nan_at: int = -1, **health):
    """A tiny regression on noisy mini-batches; the batch at step ``corrupt`` gets targets 50x off."""
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(steps * 16, 4, generator=gen)
    y = x @ torch.tensor([1.0, -2.0, 0.5, 3.0]) + 0.5 * torch.randn(steps * 16, generator=gen)
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(1)).tolist()
    if corrupt >= 0:
        y = y.clone()
        y[order[corrupt * 16:(corrupt + 1) * 16]] *= 50
    loader = DataLoader(TensorDataset(x, y), batch_size=16, sampler=order)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    losses = []
    with TrainingMonitor(model, optimizer, loader, log_dir=folder, quiet=True, health=health or True):
        for i, (xb, yb) in enumerate(loader):
            loss = F.mse_loss(model(xb).squeeze(1), yb)
            if i == nan_at:
                loss = loss * float("nan")
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)  # a bad batch costs one step, not the model
            optimizer.step()
            losses.append(loss.detach().clone())
    return order, losses, [p.detach().clone() for p in model.parameters()]


def anomalies(folder) -> list:
    return read_jsonl(folder / "anomalies.jsonl")


def test_a_clean_2000_step_noisy_run_raises_no_anomaly(tmp_path):
    noisy_run(tmp_path, 2000)
    assert anomalies(tmp_path) == []
    assert json.loads((tmp_path / "summary.json").read_text())["health"]["anomalies"] == 0


def test_a_corrupted_batch_is_an_anomaly_at_its_step_with_its_sample_indices(tmp_path, caplog):
    k = 120
    order, _, _ = noisy_run(tmp_path, 200, corrupt=k)
    found = anomalies(tmp_path)
    assert {a["metric"] for a in found} == {"loss", "grad_norm"}
    assert all(a["step"] == k for a in found)  # the loss and the gradient of that very batch
    assert found[0]["indices"] == [order[k * 16:(k + 1) * 16]]
    assert found[0]["value"] > found[0]["baseline"] * 10 and found[0]["rule"].startswith("spike")
    events = [r for r in read_jsonl(tmp_path / "metrics.jsonl") if r.get("event") == "anomaly"]
    assert [(e["step"], e["metric"]) for e in events] == [(a["step"], a["metric"]) for a in found]
    warned = [r.message for r in caplog.records if "anomaly at step" in r.message]
    assert len(warned) == len(found) and f"samples [{order[k * 16]}," in warned[0]


def test_a_nan_loss_is_flagged_at_its_step(tmp_path):
    noisy_run(tmp_path, 40, nan_at=7)
    found = [(a["step"], a["metric"], a["rule"]) for a in anomalies(tmp_path)]
    assert (7, "loss", "nonfinite: NaN or infinite") in found
    assert (7, "grad_norm", "nonfinite: NaN or infinite") in found


def test_on_anomaly_dump_dumps_the_next_step_and_changes_no_number(tmp_path):
    k = 60
    _, ref_losses, ref_params = noisy_run(tmp_path / "ref", 80, corrupt=k)
    _, losses, params = noisy_run(tmp_path / "run", 80, corrupt=k, on_anomaly="dump")
    assert all(torch.equal(a, b) for a, b in zip(losses, ref_losses))
    assert all(torch.equal(a, b) for a, b in zip(params, ref_params))
    dumped = sorted(p.name for p in (tmp_path / "run" / "dump").iterdir())
    assert dumped == [f"step{k + 1}"]
    data = json.loads((tmp_path / "run" / "dump" / f"step{k + 1}" / "rank0" / "dump.json").read_text())["data"]
    assert any(name.startswith("Functional.linear") for name in data)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())["health"]
    assert summary["dumps_armed"] == [k + 1] and summary["dump"]["steps_dumped"] == [k + 1]


def test_on_anomaly_modules_records_the_next_step(tmp_path):
    k = 60
    noisy_run(tmp_path, 80, corrupt=k, on_anomaly="modules", anomaly_steps=2)
    rows = read_jsonl(tmp_path / "health" / "modules.jsonl")
    assert sorted({r["step"] for r in rows}) == [k + 1, k + 2]


# --- module statistics ---------------------------------------------------------------------------------------------

def test_module_statistics_at_chosen_steps_match_the_loop(tmp_path):
    model, optimizer, loader = setup()
    seen = {}
    hook = model[0].register_forward_hook(lambda m, a, out: [seen.setdefault("act", out.detach().clone()), None][1])
    with TrainingMonitor(model, optimizer, loader, log_dir=tmp_path, quiet=True,
                         health=dict(modules=True, steps=[2], targets=["0", "2"])):
        for step, (x, y) in enumerate(loader):
            seen.pop("act", None)
            loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            if step == 2:
                grad = float(torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in model[0].parameters()])))
                before = [p.detach().clone() for p in model[0].parameters()]
                act = seen["act"]
            optimizer.step()
            if step == 2:
                pnorm = torch.linalg.vector_norm(torch.stack([b.norm() for b in before]))
                upd = torch.linalg.vector_norm(torch.stack([(p.detach() - b).norm()
                                                            for p, b in zip(model[0].parameters(), before)]))
    hook.remove()
    rows = read_jsonl(tmp_path / "health" / "modules.jsonl")
    assert [(r["step"], r["module"], r["type"]) for r in rows] == [(2, "0", "Linear"), (2, "2", "Linear")]
    row = rows[0]
    assert row["grad_norm"] == pytest.approx(grad, rel=1e-5)
    assert row["param_norm"] == pytest.approx(float(pnorm), rel=1e-5)
    assert row["update_ratio"] == pytest.approx(float(upd / pnorm), rel=1e-4)
    assert row["act_mean"] == pytest.approx(float(act.mean()), rel=1e-5, abs=1e-7)
    assert row["act_absmax"] == pytest.approx(float(act.abs().max()), rel=1e-6)
    assert row["act_nonfinite"] == 0 and 0 <= row["act_zero_frac"] <= 1


# --- the option ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("value, words", [
    (dict(windw=10), ["windw", "window"]),
    (dict(on_anomaly="stop"), ["on_anomaly", "warn, dump, modules"]),
    (dict(every=-1), ["every", ">= 0"]),
    ("threshold=abc", ["threshold", "number"]),
])
def test_bad_health_values_are_one_config_error_naming_the_valid_choice(tmp_path, value, words):
    model, optimizer, loader = setup()
    with pytest.raises(ConfigError) as info:
        with TrainingMonitor(model, optimizer, loader, log_dir=tmp_path, quiet=True, health=value):
            pass
    assert "\n" not in str(info.value) and all(w in str(info.value) for w in words)


def test_the_environment_switch_turns_health_on(tmp_path, monkeypatch):
    monkeypatch.setenv("ASCEND_TUNE_HEALTH", "modules=1,every=4")
    assert HealthConfig.from_env() == HealthConfig(modules=True, every=4)
    model, optimizer, loader = setup()
    with TrainingMonitor(model, optimizer, loader, log_dir=tmp_path, quiet=True):
        for x, y in loader:
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            optimizer.step()
    assert all(r["grad_norm"] > 0 for r in step_records(tmp_path))
    assert sorted({r["step"] for r in read_jsonl(tmp_path / "health" / "modules.jsonl")}) == [0, 4]


def test_the_spike_rule_waits_for_its_warmup_and_ignores_a_flat_series():
    rule = SpikeRule(window=20, warmup=5, threshold=8, min_rise=0.5)
    assert [rule.judge(v) for v in (1.0, 100.0, 1.0, 1.0, 1.0)] == [None] * 5  # warm-up
    assert all(rule.judge(1.0 + 1e-9 * i) is None for i in range(30))  # spread ~ 0: min_rise guards
    assert rule.judge(1.2) is None
    verdict = rule.judge(5.0)
    assert verdict is not None and verdict.rule == "spike" and verdict.baseline == pytest.approx(1.0)
    assert rule.judge(math.inf).rule == "nonfinite"


# --- the CLI and the comparison --------------------------------------------------------------------------------------

def test_health_command_prints_the_anomaly_and_the_module_that_jumped_first(tmp_path, capsys):
    from ascend_tune.cli import main

    k = 60
    noisy_run(tmp_path / "bad", 80, corrupt=k, modules=True, every=10, on_anomaly="modules")
    noisy_run(tmp_path / "clean", 40)
    capsys.readouterr()
    assert main(["health", str(tmp_path / "bad")]) == 1
    out = capsys.readouterr().out
    assert f"the first at step {k} (loss, rank 0)" in out and f"anomaly at step {k}: loss" in out
    assert f"modules at step {k} (of recorded steps 0, 10," in out and "samples [" in out
    assert main(["health", str(tmp_path / "clean")]) == 0
    assert "no anomaly" in capsys.readouterr().out
    assert main(["health", str(tmp_path / "bad"), "--step", "50", "--json"]) == 1
    table = json.loads(capsys.readouterr().out)
    assert table["step"] == 50 and 0.1 < table["modules"][0]["jump"] < 10
    main(["health", str(tmp_path / "bad"), "--json"])
    table = json.loads(capsys.readouterr().out)
    assert table["step"] == k and table["modules"][0]["jump"] > 20  # the gradient before it was clipped
    assert main(["health", str(tmp_path / "bad"), "--step", "7"]) == 2
    assert main(["health", str(tmp_path / "nowhere")]) == 2
    assert "nowhere" in capsys.readouterr().err


def perturbed_run(folder, nudge_at: int = -1, steps: int = 40):
    """The noisy regression; at step ``nudge_at`` the weights get a small nudge (the gradient norm moves at once,
    the loss, at a minimum, only to second order)."""
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(steps * 64, 4, generator=gen)
    y = x @ torch.tensor([1.0, -2.0, 0.5, 3.0]) + 0.5 * torch.randn(steps * 64, generator=gen)
    loader = DataLoader(TensorDataset(x, y), batch_size=64)
    model = torch.nn.Linear(4, 1)
    with torch.no_grad():
        model.weight.copy_(torch.tensor([[1.0, -2.0, 0.5, 3.0]]))
        model.bias.zero_()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    with TrainingMonitor(model, optimizer, loader, log_dir=folder, quiet=True, health=True):
        for i, (xb, yb) in enumerate(loader):
            if i == nudge_at:
                with torch.no_grad():
                    model.weight.add_(0.01)
            loss = F.mse_loss(model(xb).squeeze(1), yb)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()


def test_compare_loss_reports_the_grad_norm_parting_before_the_loss(tmp_path, capsys):
    from ascend_tune.cli import main

    perturbed_run(tmp_path / "gpu")
    perturbed_run(tmp_path / "npu", nudge_at=10)
    capsys.readouterr()
    code = main(["compare-loss", str(tmp_path / "gpu"), str(tmp_path / "npu"), "--json"])
    result = json.loads(capsys.readouterr().out)
    grad = result["grad_norm"]
    assert grad["compared"] == 40 and 10 <= grad["first_parting_step"] <= 12  # the nudge's step or right after
    assert result["grad_parts_first"] and result["first_parting_step"] is None
    assert grad["mean_rel_gap"] > result["mean_rel_gap"]
    assert code == (0 if result["aligned"] else 1)
    main(["compare-loss", str(tmp_path / "gpu"), str(tmp_path / "npu")])
    out = capsys.readouterr().out
    step = grad["first_parting_step"]
    assert f"grad norm at step {step}, loss at no step" in out and f"grad norm parts first: look at step {step}" in out


def test_compare_loss_reads_the_hf_trainer_grad_norm(tmp_path):
    from ascend_tune.analysis.logs import compare, read

    state = {"log_history": [{"step": s + 1, "loss": 2.0 - 0.1 * s, "grad_norm": 1.0 + 0.01 * s} for s in range(5)]}
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "trainer_state.json").write_text(json.dumps(state))
    ours = tmp_path / "ours.jsonl"
    grads = [(1.0 + 0.01 * s) * (1.5 if s >= 3 else 1) for s in range(5)]  # parts at step 3 (their step 4)
    ours.write_text("".join(json.dumps({"step": s, "loss": 2.0 - 0.1 * s, "first_step": s, "step_losses":
                                        [2.0 - 0.1 * s], "step_grad_norms": [grads[s]]}) + "\n" for s in range(5)))
    result = compare.compare_loss(read.read_log(str(tmp_path / "hf")), read.read_log(str(ours)))
    assert result.grad.compared == 5 and result.grad.first_parting_step == 3 and result.first_parting_step is None
    assert result.grad_parts_first


# --- FSDP2 ---------------------------------------------------------------------------------------------------------

def test_fsdp2_two_ranks_log_the_global_grad_norm(tmp_path):
    from test_distributed import torchrun

    from ascend_tune.testing.torch_features import fsdp2_missing

    if fsdp2_missing():
        pytest.skip(fsdp2_missing())
    script = str(__import__("pathlib").Path(__file__).parent / "scripts" / "fsdp2_health.py")
    proc, out = torchrun(script, tmp_path, "health_rank{rank}.json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = [json.loads((out / f"health_rank{rank}.json").read_text()) for rank in (0, 1)]
    for clip in ("clip0", "clip1"):
        losses, norms = results[0][clip]
        assert norms == pytest.approx(results[1][clip][1], rel=1e-6)  # one global norm, seen alike by both ranks
        for rank in (0, 1):
            logged = [r["grad_norm"] for r in read_jsonl(out / clip / f"rank{rank}" / "metrics.jsonl")
                      if "event" not in r]
            assert logged == pytest.approx(norms, rel=1e-5)
    assert results[0]["clip1"][0] == results[0]["reference"]  # health changed no loss


def test_report_against_a_baseline_plots_both_runs_grad_norms(tmp_path):
    pytest.importorskip("matplotlib")
    from ascend_tune.cli import main

    perturbed_run(tmp_path / "gpu")
    perturbed_run(tmp_path / "npu", nudge_at=10)
    out = tmp_path / "page.html"
    main(["report", str(tmp_path / "npu"), "--baseline", str(tmp_path / "gpu"), "-o", str(out), "--no-advise"])
    page = out.read_text()
    assert "gradient norm: mean relative gap" in page and "the gradient norm parts first" in page
    assert "Both runs&#x27; gradient norm at each step" in page or "Both runs' gradient norm at each step" in page


@pytest.mark.parametrize("draw", [
    lambda rng: rng.lognormvariate(0, 1),
    lambda rng: rng.choice([1.0, 2.0, 2.0, 3.0, 5.0]),  # ties: equal middles, equal distances
    lambda rng: rng.choice([0.0, -0.0, 0.0, 1.0, -1.0]),  # a median of 0.0 beside values of -0.0
], ids=["random", "tied", "signed-zeros"])
def test_the_spike_rules_sorted_window_gives_statistics_median_and_mad_to_the_bit(draw):
    rng = random.Random(0)
    for size in (5, 6, 50):
        window, kept = SortedWindow(size), deque(maxlen=size)
        for _ in range(300):
            value = draw(rng)
            window.append(value)
            kept.append(value)
            middle = statistics.median(kept)
            mad = statistics.median([abs(v - middle) for v in kept])
            assert list(window) == list(kept)
            assert repr(window.median()) == repr(middle)  # repr: -0.0 and 0.0 differ
            assert repr(window.spread()) == repr(MAD_TO_SIGMA * mad)


def _rule_from_its_definition(values: list, window: int, warmup: int, threshold: float, min_rise: float) -> list:
    """The spike rule of health/spikes.py's docstring, computed from scratch at every value: (rule, baseline,
    spread) or None per value."""
    out, kept, seen, log = [], deque(maxlen=window), 0, True
    for value in values:
        if not math.isfinite(value):
            middle = statistics.median(kept) if kept else None
            out.append(("nonfinite", None if middle is None else math.exp(middle) if log else middle, None))
            continue
        if log and value <= 0:
            kept, log = deque((math.exp(v) for v in kept), maxlen=window), False
        scaled = (math.log(value) if value > 0 else -math.inf) if log else value
        verdict = None
        if seen >= warmup:
            center = statistics.median(kept)
            spread = MAD_TO_SIGMA * statistics.median([abs(v - center) for v in kept])
            baseline = math.exp(center) if log else center
            if scaled > center + threshold * spread and value > baseline * (1 + min_rise):
                verdict = ("spike", baseline, spread)
        out.append(verdict)
        kept.append(scaled)
        seen += 1
    return out


@pytest.mark.parametrize("threshold,min_rise", [(8.0, 0.5), (2.0, 0.0), (0.5, 0.05)])
def test_the_spike_rules_verdicts_are_its_definitions_to_the_bit(threshold, min_rise):
    rng = random.Random(threshold)
    values = []
    for i in range(600):  # a noisy series with spikes, plateaus, non-finite values and a turn to negatives
        value = rng.lognormvariate(0, 0.3) * (20.0 if rng.random() < 0.05 else 1.0)
        value = 3.0 if 200 <= i < 240 else math.nan if i % 97 == 0 else value
        if i in (230, 235):  # a rise just under and just over min_rise on a flat stretch: min_rise decides
            value = 3.0 * (1 + min_rise * (0.95 if i == 230 else 1.05))
        values.append(value - 2.5 if i >= 500 else value)
    rule = SpikeRule(window=30, warmup=10, threshold=threshold, min_rise=min_rise)
    got = [rule.judge(v) for v in values]
    expected = _rule_from_its_definition(values, 30, 10, threshold, min_rise)
    assert [None if v is None else (v.rule, v.baseline, v.spread) for v in got] == expected
    assert sum(v is not None and v[0] == "spike" for v in expected) >= 10  # the series does test the rule


def test_a_series_that_goes_negative_is_judged_on_its_values():
    rule = SpikeRule(window=20, warmup=5, threshold=8, min_rise=0.5)
    values = [1.0, 0.5, -0.2, 0.3, -0.1, 0.2, 0.4, -0.3, 0.1, 0.0] * 3
    assert [rule.judge(v) for v in values] == [None] * len(values)  # no value <= 0 is an anomaly
    verdict = rule.judge(40.0)
    assert verdict.rule == "spike" and not verdict.log and "value > median" in verdict.describe(8, 0.5, 20)
