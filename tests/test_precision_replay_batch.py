"""Replayed calls checked in batches (ascend_tune/precision/replay_batch.py): each row of replay.csv and replay.json is
the one the call has when it is replayed alone, op by op, for inf and nan, for a broken kernel's suspects."""

from __future__ import annotations

import gc
import math
import os
import warnings

import pytest
import torch
from conftest import train_gpt as train

from ascend_tune import TrainingMonitor
from ascend_tune.precision import golden, replay_batch
from ascend_tune.testing.torch_features import drop_library

pytestmark = pytest.mark.usefixtures("one_thread")


def replay_files(log_dir, steps: int = 1) -> list:
    """replay.csv and replay.json of each replayed step, as bytes."""
    out = []
    for step in range(steps):
        rank_dir = os.path.join(log_dir, "dump", f"step{step}", "rank0")
        for name in ("replay.csv", "replay.json"):
            with open(os.path.join(rank_dir, name), "rb") as fh:
                out.append(fh.read())
    return out


def alone_and_batched(tmp_path, monkeypatch, run) -> tuple:
    """``run(log_dir)`` with every call replayed alone, then with batches; the replayed files of each, and how many
    float64 calls each ran."""
    counts = []
    run_on_cpu = golden.run_on_cpu

    def counted(*args):
        counts[-1] += 1
        return run_on_cpu(*args)

    monkeypatch.setattr(golden, "run_on_cpu", counted)
    files = []
    for name, elementwise in (("alone", frozenset()), ("batched", replay_batch.ELEMENTWISE)):
        monkeypatch.setattr(replay_batch, "ELEMENTWISE", elementwise)
        counts.append(0)
        steps = run(tmp_path / name)
        files.append(replay_files(tmp_path / name, steps))
    return files, counts


def elementwise_calls(ts: list, scale: torch.Tensor) -> None:
    """Each batched op on several small tensors, in place and not, with tensors, numbers and a tensor passed twice."""
    for t in ts:
        u = t * 0.5 + 0.25
        t.add_(u, alpha=-0.1).sub_(u).mul_(1.001).div_(0.999).lerp_(u, 0.1).lerp_(u, 0.9)
        t.addcmul_(u, u, value=0.01).addcdiv_(u, u.abs() + 1, value=-0.01).neg_().mul_(-0.0).add_(t)
        v = torch.sqrt(t.abs() + 1).sqrt_() + 1
        v = (2 - v) * 3 / v - 1 + (1 / v)
        v += t
        v -= 1
        v *= 2
        v /= 3
        v = torch.add(v, t, alpha=2).sub(t).mul(t).div(v.abs() + 1).neg()
        v = torch.lerp(v, t, 0.3).lerp(u, 0.7).addcmul(t, u).addcdiv(t, u.abs() + 1) - (-v)
        v = torch.addcmul(v, u, t, value=True).add(1).add(1.0).add_(True)
        torch.neg(torch.sub(torch.mul(torch.div(torch.addcdiv(v, t, u.abs() + 2), 3), 2), 1)).mul_(scale)


def run_elementwise(log_dir, values=None) -> int:
    torch.manual_seed(0)
    w = torch.randn(5, requires_grad=True)
    optimizer = torch.optim.SGD([w], lr=0.1)
    shapes = [(), (1,), (5,), (3, 7), (128,), (4096,), (4097,)]  # the last one too large: replayed alone
    with TrainingMonitor(optimizer=optimizer, log_dir=log_dir, quiet=True, tune=False,
                         precision=dict(task="replay", steps=[0])):
        ts = [torch.randn(s) for s in shapes] + [torch.randn(64, dtype=torch.bfloat16), torch.randn(9).double()]
        if values is not None:
            ts.append(values.clone())
        with torch.no_grad():
            elementwise_calls(ts, torch.tensor(2.0))
        loss = (w * 2).sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return 1


def test_each_batched_op_gives_the_rows_of_the_calls_replayed_alone(tmp_path, monkeypatch):
    (alone, batched), (calls_alone, calls_batched) = alone_and_batched(tmp_path, monkeypatch, run_elementwise)
    assert batched == alone
    assert calls_batched < calls_alone / 2  # one float64 call for the calls of a batch
    assert alone[0].count(b"\n") > 250


def test_an_optimizer_s_rows_batched_are_its_rows_alone(tmp_path, monkeypatch):
    def adamw(log_dir) -> int:
        train(log_dir, dict(task="replay", steps=[]), steps=2)
        return 2

    (alone, batched), (calls_alone, calls_batched) = alone_and_batched(tmp_path, monkeypatch, adamw)
    assert batched == alone
    assert calls_batched < calls_alone / 2


def test_inf_and_nan_in_a_batch_are_measured_as_alone(tmp_path, monkeypatch):
    values = torch.tensor([1.0, math.inf, -math.inf, math.nan, 0.0, 3e38, -3e38, 2.0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # overflow in the float32 device ops themselves
        (alone, batched), _ = alone_and_batched(tmp_path, monkeypatch, lambda d: run_elementwise(d, values))
    assert batched == alone
    assert b"inf/nan" in alone[0]


def test_a_broken_kernel_s_suspects_and_their_frames_are_those_of_the_calls_alone(tmp_path, monkeypatch):
    def mul_1e3_off(a: torch.Tensor, b) -> torch.Tensor:
        result = torch.ops.aten.mul.Tensor(a.double(), b.double() if isinstance(b, torch.Tensor) else b)
        return (result * (1 + 1e-3) if a.dtype == torch.float32 else result).to(a.dtype)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Overriding a previously registered kernel"
        lib = torch.library.Library("aten", "IMPL")
        lib.impl("mul_.Tensor", lambda a, b: a.copy_(mul_1e3_off(a, b)), "CPU")
    try:
        (alone, batched), _ = alone_and_batched(tmp_path, monkeypatch, run_elementwise)
    finally:
        drop_library(lib)
    assert batched == alone
    assert b'"first_suspect": "Tensor.mul_.0.forward"' in alone[1] and b"test_precision_replay_batch.py" in alone[1]


def test_a_batch_full_before_the_step_ends_gives_the_same_rows(tmp_path, monkeypatch):
    monkeypatch.setattr(replay_batch, "LIMIT", 100)
    (alone, batched), _ = alone_and_batched(tmp_path, monkeypatch, run_elementwise)
    assert batched == alone


def test_no_copy_outlives_the_step(tmp_path):
    def float64_tensors() -> int:
        gc.collect()
        return sum(1 for o in gc.get_objects() if type(o) is torch.Tensor and o.dtype == torch.float64)

    before = float64_tensors()
    run_elementwise(tmp_path)
    assert float64_tensors() == before  # the batches' copies went with the step
