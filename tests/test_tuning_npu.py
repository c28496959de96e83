"""Tuning on the fake NPU: NpuFused* / torch fused swaps in place, refusals with reasons, the compile mode's order."""

from __future__ import annotations

import copy
import importlib
import json

import pytest
import torch
import torch.nn.functional as F

from ascend_tune import TrainingMonitor
from ascend_tune.testing.models import TinyMLP, synthetic_classification
from ascend_tune.testing.torch_features import fused_on_cpu_missing

X, Y = synthetic_classification(n=64).tensors


@pytest.fixture
def npu(fake_npu, monkeypatch):
    """The fake torch_npu on a 910A, whose CANN default is online compilation (jit_compile=True)."""
    monkeypatch.setenv("ASCEND_TUNE_FAKE_NPU_NAME", "Ascend910A")
    return importlib.import_module("torch_npu")


def pair(cls, kwargs, dtype=torch.float32):
    torch.manual_seed(0)
    model = TinyMLP().to(dtype)
    reference = copy.deepcopy(model)
    return model, cls(model.parameters(), **kwargs), reference, cls(reference.parameters(), **kwargs)


def tuning_json(log_dir):
    return json.loads((log_dir / "tuning.json").read_text())


def step(model, optimizer, zero):
    zero()
    F.cross_entropy(model(X.to(model.fc1.weight.dtype)), Y).backward()
    optimizer.step()


def test_fp32_sgd_runs_npu_fused_sgd_in_the_block_and_trains_alike(npu, tmp_path):
    model, optimizer, reference, ref_opt = pair(torch.optim.SGD, {"lr": 0.1, "momentum": 0.9})
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=4, gamma=0.5)
    ref_sched = torch.optim.lr_scheduler.StepLR(ref_opt, step_size=4, gamma=0.5)
    # every way a script clears gradients; NpuFusedSGD itself refuses set_to_none=True and misses model.zero_grad()
    zeroes = [lambda: optimizer.zero_grad(), lambda: optimizer.zero_grad(set_to_none=True), model.zero_grad]
    with TrainingMonitor(model, optimizer, log_dir=tmp_path, quiet=True):
        assert isinstance(optimizer, npu.optim.NpuFusedSGD)
        for i in range(12):
            step(model, optimizer, zeroes[i % 3])
            scheduler.step()
        optimizer.load_state_dict(optimizer.state_dict())
        for _ in range(3):
            step(model, optimizer, optimizer.zero_grad)
            scheduler.step()
    assert type(optimizer) is torch.optim.SGD
    for _ in range(5):  # after the block: torch's SGD again, same state, the scheduler still attached
        step(model, optimizer, model.zero_grad)
        scheduler.step()
    for _ in range(20):
        step(reference, ref_opt, ref_opt.zero_grad)
        ref_sched.step()
    assert optimizer.param_groups[0]["lr"] == ref_opt.param_groups[0]["lr"] == 0.1 * 0.5**5
    for got, want in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-7)
    record = tuning_json(tmp_path)["optimizer"]
    assert record["action"] == "swapped" and record["variant"] == "NpuFusedSGD"
    assert "float32/float16" in record["reason"] and "set_to_none" in record["zero_grad"]
    assert record["grads_copied_into_buffer"] == 4 * 4  # the four steps after model.zero_grad(), four params each
    assert record["restored_at_exit"] is True


def test_adam_state_carries_into_npu_fused_adam_and_back(npu, tmp_path):
    model, optimizer, reference, ref_opt = pair(torch.optim.Adam, {"lr": 1e-2, "amsgrad": True})
    for _ in range(3):  # a resumed run: the optimizer has state before the block
        step(model, optimizer, optimizer.zero_grad)
    with TrainingMonitor(model, optimizer, log_dir=tmp_path, quiet=True):
        assert type(optimizer) is npu.optim.NpuFusedAdam
        for _ in range(5):
            step(model, optimizer, optimizer.zero_grad)
        saved = optimizer.state_dict()
    step(model, optimizer, optimizer.zero_grad)
    for _ in range(9):
        step(reference, ref_opt, ref_opt.zero_grad)
    for got, want in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-7)
    assert all(isinstance(s["step"], torch.Tensor) and float(s["step"]) == 9 for s in optimizer.state.values())
    assert all(isinstance(s["step"], torch.Tensor) for s in saved["state"].values())  # a torch-shaped checkpoint


def test_adamw_uses_torchs_fused_kernel_on_npu(npu, tmp_path):
    why_not = fused_on_cpu_missing(torch.optim.AdamW)
    if why_not:
        pytest.skip(f"the fake NPU's tensors are CPU tensors: {why_not}")
    model, optimizer, *_ = pair(torch.optim.AdamW, {"lr": 1e-2})
    with TrainingMonitor(model, optimizer, log_dir=tmp_path, quiet=True):
        assert type(optimizer) is torch.optim.AdamW and optimizer.param_groups[0]["fused"] is True
    record = tuning_json(tmp_path)["optimizer"]
    assert record["variant"] == "fused" and "torch_npu runs torch's own fused AdamW" in record["reason"]


def test_a_bfloat16_model_is_left_alone_with_the_reason(npu, tmp_path):
    model, optimizer, *_ = pair(torch.optim.SGD, {"lr": 0.1, "momentum": 0.9}, dtype=torch.bfloat16)
    with TrainingMonitor(model, optimizer, log_dir=tmp_path, quiet=True):
        assert type(optimizer) is torch.optim.SGD
        assert (optimizer.param_groups[0]["foreach"], optimizer.param_groups[0].get("fused")) == (None, None)
        step(model, optimizer, optimizer.zero_grad)
    record = tuning_json(tmp_path)["optimizer"]
    assert record["action"] == "kept"
    assert "'fc1.weight' is torch.bfloat16" in record["reason"] and "float32 / float16" in record["reason"]
    assert "AdamW" in record["refused"]["fused"]


@pytest.mark.parametrize(
    "kwargs, why",
    [({"lr": 0.1, "maximize": True}, "maximize=True has no equivalent"), ({"lr": torch.tensor(0.1)}, "lr is a Tensor")],
)
def test_hyper_parameters_npu_fused_lacks_keep_torchs_optimizer(npu, tmp_path, kwargs, why):
    model, optimizer, *_ = pair(torch.optim.SGD, kwargs)
    with TrainingMonitor(model, optimizer, log_dir=tmp_path, quiet=True):
        assert type(optimizer) is torch.optim.SGD
    assert why in tuning_json(tmp_path)["optimizer"]["reason"]


def test_a_scheduler_made_inside_the_block_still_steps_the_optimizer_after_it(npu, tmp_path):
    model, optimizer, *_ = pair(torch.optim.SGD, {"lr": 0.1, "momentum": 0.9})
    with TrainingMonitor(model, optimizer, log_dir=tmp_path, quiet=True):
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
        step(model, optimizer, optimizer.zero_grad)
    before = [p.detach().clone() for p in model.parameters()]
    step(model, optimizer, optimizer.zero_grad)  # the scheduler's wrapper now calls torch's SGD
    scheduler.step()
    assert all(not torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert optimizer.param_groups[0]["lr"] == 0.05


def test_compile_mode_is_set_before_the_first_npu_op_and_restored_after(npu, tmp_path):
    model, optimizer, *_ = pair(torch.optim.SGD, {"lr": 0.1})
    assert not npu.npu.is_jit_compile_false()  # a 910A compiles online by default
    seen = []
    model.register_forward_pre_hook(lambda m, a: seen.append((npu.npu.is_jit_compile_false(), list(npu._C._calls))))
    with TrainingMonitor(model, optimizer, log_dir=tmp_path, quiet=True):
        step(model, optimizer, optimizer.zero_grad)
    binary, calls_before_first_forward = seen[0]
    assert binary
    assert ("setOption", {"jitCompile": "disable"}) in calls_before_first_forward
    assert not npu.npu.is_jit_compile_false()  # the previous mode is back
    assert npu._C._calls[-1] == ("setOption", {"jitCompile": "enable"})
    record = tuning_json(tmp_path)["compile_mode"]
    assert record["action"] == "set" and record["jit_compile"] is False and record["previous_jit_compile"] is True


def test_jit_compile_none_and_tune_false_leave_the_runtime_and_optimizer_alone(npu, tmp_path):
    model, optimizer, *_ = pair(torch.optim.SGD, {"lr": 0.1, "momentum": 0.9})
    with TrainingMonitor(model, optimizer, log_dir=tmp_path / "none", quiet=True, tune={"jit_compile": None}):
        pass
    assert tuning_json(tmp_path / "none")["compile_mode"]["action"] == "left"
    with TrainingMonitor(model, optimizer, log_dir=tmp_path / "off", quiet=True, tune=False):
        assert type(optimizer) is torch.optim.SGD
        step(model, optimizer, optimizer.zero_grad)
    assert "jitCompile" not in npu._C._options
    assert not (tmp_path / "off" / "tuning.json").exists()


def test_report_mode_leaves_the_npu_optimizer_as_built_and_says_what_would_run(npu, tmp_path):
    """The NPU swaps by default; optimizer="report" is the reference-side mode there too."""
    model, optimizer, *_ = pair(torch.optim.SGD, {"lr": 0.1, "momentum": 0.9})
    with TrainingMonitor(model, optimizer, log_dir=tmp_path, quiet=True, tune={"optimizer": "report"}):
        assert type(optimizer) is torch.optim.SGD
    record = tuning_json(tmp_path)["optimizer"]
    assert record["action"] == "reported" and record["would_run"] == "NpuFusedSGD" and record["gain"] is None
