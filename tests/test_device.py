"""Device detection: the fake torch_npu drives the NPU path; broken installs fall back with their reason."""

from __future__ import annotations

import importlib
import json

import pytest
import torch
import torch.nn.functional as F
from conftest import read_jsonl

from ascend_tune import TrainingMonitor, detect_device
from ascend_tune.errors import ConfigError, DeviceError
from ascend_tune.testing.models import TinyMLP, synthetic_classification


def test_plain_cpu_machine_detects_cpu_with_reasons():
    info = detect_device(refresh=True)
    assert info.kind == "cpu" and info.count == 1
    assert info.torch_version == torch.__version__
    assert "torch_npu is not installed" in info.fallback_reasons


def test_fake_torch_npu_is_detected_as_npu(fake_npu):
    info = detect_device(refresh=True)
    assert info.kind == "npu" and info.count == 1
    assert info.backend_version and info.name
    # torch-npu 2.1.0 has no get_cann_version, and the CANN version is informative only
    assert info.cann_version or not hasattr(importlib.import_module("torch_npu").utils, "get_cann_version")


def test_device_count_follows_the_fake(fake_npu, monkeypatch):
    monkeypatch.setenv("ASCEND_TUNE_FAKE_NPU_COUNT", "8")
    assert detect_device(refresh=True).count == 8


@pytest.mark.parametrize("failure, exc_name", [("import", "ImportError"), ("runtime", "RuntimeError")])
def test_a_torch_npu_whose_import_raises_falls_back_to_cpu(fake_npu, monkeypatch, failure, exc_name):
    monkeypatch.setenv("ASCEND_TUNE_FAKE_NPU_FAIL", failure)
    info = detect_device(refresh=True)
    assert info.kind == "cpu"
    assert any("import failed" in r and exc_name in r for r in info.fallback_reasons)


def test_no_visible_npu_falls_back(fake_npu, monkeypatch):
    monkeypatch.setenv("ASCEND_TUNE_FAKE_NPU_COUNT", "0")
    info = detect_device(refresh=True)
    assert info.kind == "cpu"
    assert any("is_available() is False" in r for r in info.fallback_reasons)


def test_the_override_wins(fake_npu, monkeypatch):
    monkeypatch.setenv("ASCEND_TUNE_DEVICE", "cpu")
    info = detect_device(refresh=True)
    assert info.kind == "cpu" and info.source == "ASCEND_TUNE_DEVICE"
    monkeypatch.setenv("ASCEND_TUNE_DEVICE", "npu")
    assert detect_device(refresh=True).kind == "npu"


def test_override_to_an_absent_device_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("ASCEND_TUNE_DEVICE", "npu")
    with pytest.raises(DeviceError, match="torch_npu is not installed"):
        detect_device(refresh=True)
    monkeypatch.setenv("ASCEND_TUNE_DEVICE", "cuda")
    with pytest.raises(DeviceError, match="CUDA is not available"):
        detect_device(refresh=True)
    monkeypatch.setenv("ASCEND_TUNE_DEVICE", "tpu")
    with pytest.raises(ConfigError, match="not a device kind"):
        detect_device(refresh=True)


def test_monitor_on_the_fake_npu_records_the_device(fake_npu, tmp_path):
    torch.manual_seed(0)
    model = TinyMLP()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = synthetic_classification(n=16).tensors
    with TrainingMonitor(model, optimizer, log_dir=tmp_path, quiet=True):
        for _ in range(3):
            F.cross_entropy(model(x), y).backward()
            optimizer.step()
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["device"]["kind"] == "npu"
    assert [r["step"] for r in read_jsonl(tmp_path / "metrics.jsonl")] == [0, 1, 2]
    # peak memory comes from torch_npu.npu.max_memory_allocated, a host-side counter
    assert all(r["memory_mib"] is not None for r in read_jsonl(tmp_path / "metrics.jsonl"))
