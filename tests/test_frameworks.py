"""The two lines inside the stacks people train with: Hugging Face Trainer and Lightning build their own optimizer
(inside the block) and accumulate gradients their own way. Tiny models from configs, synthetic data, no hub.

Each case asserts: one log line per optimizer step, the logged loss is that step's loss as the framework defines it
(the mean micro-batch loss), and the training numbers are bitwise those of the same run without the monitor.
"""

from __future__ import annotations

import json
import math

import pytest
import torch
from conftest import read_jsonl, read_log

from ascend_tune import TrainingMonitor
from ascend_tune.testing.torch_features import transformers_missing

STEPS = 4


# --- Hugging Face Trainer ----------------------------------------------------------------------------------------

class TokenBlocks(torch.utils.data.Dataset):
    """Full blocks of random token ids (no padding), as run_clm.py's grouped texts."""

    def __init__(self, n: int, length: int = 16, vocab: int = 64):
        gen = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, vocab, (n, length), generator=gen)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def hf_train(out, accumulation: int, log_dir=None):
    """A tiny GPT-2 from a config under transformers.Trainer; returns (trainer, train output, final parameters)."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, n_positions=16, vocab_size=64,
                                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = transformers.GPT2LMHeadModel(config)
    args = transformers.TrainingArguments(
        output_dir=str(out), per_device_train_batch_size=2, gradient_accumulation_steps=accumulation,
        max_steps=STEPS, logging_steps=1, learning_rate=1e-3, report_to=[], save_strategy="no", use_cpu=True,
        disable_tqdm=True, dataloader_num_workers=0, seed=0,
    )
    trainer = transformers.Trainer(model=model, args=args, train_dataset=TokenBlocks(2 * accumulation * STEPS))
    if log_dir is None:
        result = trainer.train()
    else:
        with TrainingMonitor(model, log_dir=str(log_dir), quiet=True):
            result = trainer.train()
    return trainer, result, [p.detach().clone() for p in model.parameters()]


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")


@pytest.mark.parametrize("accumulation", [1, 4])
def test_hf_trainer_one_line_per_optimizer_step_with_its_logged_loss(tmp_path, accumulation):
    if transformers_missing():
        pytest.skip(transformers_missing())
    _, ref_result, ref_params = hf_train(tmp_path / "ref", accumulation)
    trainer, result, params = hf_train(tmp_path / "out", accumulation, log_dir=tmp_path / "mon")
    assert trainer.state.global_step == STEPS
    assert len(read_log(tmp_path / "mon")) == STEPS  # not one per micro-batch
    records = read_jsonl(tmp_path / "mon" / "metrics.jsonl")
    logged = [h["loss"] for h in trainer.state.log_history if "loss" in h]  # the Trainer's own per-step loss
    assert [r["step"] for r in records] == list(range(STEPS))
    assert [r["loss"] for r in records] == pytest.approx(logged, rel=1e-6)  # not the micro-batch loss / N
    summary = json.loads((tmp_path / "mon" / "summary.json").read_text())
    assert summary["steps"] == STEPS and summary["steps_from"]["kind"] == "optimizer"
    assert result.training_loss == ref_result.training_loss  # the training numbers are the user's own
    assert all(torch.equal(a, b) for a, b in zip(params, ref_params))
    # config.json holds the optimizer the Trainer built (its scheduler leaves the base lr as initial_lr)
    config = json.loads((tmp_path / "mon" / "config.json").read_text())
    group = config["optimizer"]["param_groups"][0]
    assert config["optimizer"]["class"] == "AdamW" and group["initial_lr"] == trainer.args.learning_rate
    (schedule,) = config["schedulers"]  # and the schedule it built: linear decay over max_steps, no warm-up
    assert schedule["class"] == "LambdaLR" and set(schedule["base_lrs"]) == {trainer.args.learning_rate}
    assert [f["keywords"] for f in schedule["lr_lambdas"]] == [  # one per param group (decay and no decay)
        {"num_warmup_steps": 0, "num_training_steps": STEPS}] * len(config["optimizer"]["param_groups"])
    assert config["accumulation"]["backwards_per_step"] == [accumulation] * 3
    assert config["clipping"] == {"clip_grad_norm_": {"max_norm": trainer.args.max_grad_norm}}


# --- Lightning ---------------------------------------------------------------------------------------------------

def lightning_module():
    pl = pytest.importorskip("lightning.pytorch")

    class Regressor(pl.LightningModule):
        """A LightningModule of a few layers; automatic optimization (its optimizer steps with a closure)."""

        def __init__(self):
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
            self.micro_losses: list = []

        def training_step(self, batch, batch_idx):
            x, y = batch
            loss = torch.nn.functional.mse_loss(self.net(x), y)
            self.micro_losses.append(float(loss.detach()))
            return loss

        def configure_optimizers(self):  # a schedule stepped each epoch: none in the steps config.json watches
            optimizer = torch.optim.Adam(self.parameters(), lr=1e-2)
            return [optimizer], [torch.optim.lr_scheduler.StepLR(optimizer, step_size=10, gamma=0.5)]

    return pl, Regressor


def lightning_fit(accumulation: int, log_dir=None):
    pl, Regressor = lightning_module()
    torch.manual_seed(0)
    model = Regressor()
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(4 * accumulation * STEPS, 8, generator=gen)
    data = torch.utils.data.TensorDataset(x, x.sum(dim=1, keepdim=True))
    loader = torch.utils.data.DataLoader(data, batch_size=4)
    trainer = pl.Trainer(max_epochs=1, accelerator="cpu", devices=1, accumulate_grad_batches=accumulation,
                         logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, num_sanity_val_steps=0)
    if log_dir is None:
        trainer.fit(model, loader)
    else:
        with TrainingMonitor(model, log_dir=str(log_dir), quiet=True):
            trainer.fit(model, loader)
    return trainer, model


@pytest.mark.parametrize("accumulation", [1, 4])
def test_lightning_one_line_per_optimizer_step_with_the_mean_micro_batch_loss(tmp_path, accumulation):
    _, reference = lightning_fit(accumulation)
    trainer, model = lightning_fit(accumulation, log_dir=tmp_path)
    assert trainer.global_step == STEPS
    assert len(read_log(tmp_path)) == STEPS
    records = read_jsonl(tmp_path / "metrics.jsonl")
    micro = model.micro_losses
    for r in records:  # Lightning divides by N before backward; the last micro-batch runs inside the closure
        want = sum(micro[r["step"] * accumulation:(r["step"] + 1) * accumulation]) / accumulation
        assert math.isclose(r["loss"], want, rel_tol=1e-6)
    assert micro == reference.micro_losses
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), reference.parameters()))
    config = json.loads((tmp_path / "config.json").read_text())  # the optimizer configure_optimizers built
    assert config["optimizer"]["class"] == "Adam" and config["optimizer"]["param_groups"][0]["lr"] == 1e-2
    # the last micro-batch back-propagates inside the optimizer's closure: still one of the step's backwards
    assert config["accumulation"]["backwards_per_step"] == [accumulation] * 3
    assert [(s["class"], s["step_size"], s["gamma"]) for s in config["schedulers"]] == [("StepLR", 10, 0.5)]
