"""The fake torch_npu behaves like the real package where ascend_tune depends on it, and leaves torch untouched."""

from __future__ import annotations

import importlib
import json
import re
import sys
from types import ModuleType
from typing import Callable

import pytest
import torch

from ascend_tune.testing.fakes import fakes_dir

_SWITCHES = (
    "ASCEND_TUNE_FAKE_NPU_FAIL",
    "ASCEND_TUNE_FAKE_NPU_COUNT",
    "ASCEND_TUNE_FAKE_NPU_NAME",
    "ASCEND_RT_VISIBLE_DEVICES",
    "ASCEND_WORK_PATH",
    "RANK",
)


def _drop_torch_npu() -> None:
    for name in [n for n in sys.modules if n == "torch_npu" or n.startswith("torch_npu.")]:
        del sys.modules[name]


@pytest.fixture
def load_fake(monkeypatch: pytest.MonkeyPatch) -> Callable[..., ModuleType]:
    """A loader of a fresh fake ``torch_npu`` under given switches; every ``torch_npu*`` module goes afterwards."""
    monkeypatch.syspath_prepend(fakes_dir())
    for name in _SWITCHES:
        monkeypatch.delenv(name, raising=False)

    def load(**env: str) -> ModuleType:
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        _drop_torch_npu()
        return importlib.import_module("torch_npu")

    yield load
    _drop_torch_npu()


def _train(make_optimizer: Callable, steps: int = 5) -> torch.Tensor:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    optimizer = make_optimizer(model.parameters())
    x, y = torch.randn(16, 6), torch.randn(16, 3)
    for _ in range(steps):
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
    return torch.cat([p.detach().flatten() for p in model.parameters()])


# --- import and devices -----------------------------------------------------------------------------------------------


def test_default_import_has_one_910b_and_changes_nothing_in_torch(load_fake):
    torch_npu = load_fake()
    # the release paired with this torch (tests/test_fake_torch_npu_api.py pins which)
    assert torch_npu.__version__ == torch_npu.version.__version__ == torch_npu._fake_release.RELEASE
    assert torch_npu.npu.is_available() and torch_npu.npu.device_count() == 1
    assert torch_npu.npu.get_device_name(0) == "Ascend910B2"
    assert torch_npu.npu.current_device() == 0
    if torch_npu._fake_release.API_2_1:  # torch-npu 2.1.0 has no get_cann_version
        assert not hasattr(torch_npu.utils, "get_cann_version") and not hasattr(torch_npu.npu.utils, "get_cann_version")
    else:
        assert torch_npu.utils.get_cann_version() == torch_npu.npu.utils.get_cann_version(module="CANN")
    assert not hasattr(torch, "npu")
    assert torch._C._get_privateuse1_backend_name() == "privateuseone"


@pytest.mark.parametrize(
    ("count", "visible", "expected"),
    [("4", None, 4), ("0", None, 0), ("4", "1,3", 2), ("4", "2,9", 1), ("4", "3,1", 0), ("4", "", 0), ("4", "0,1x", 2)],
)
def test_device_count_follows_host_count_and_visible_devices(load_fake, count, visible, expected):
    env = {"ASCEND_TUNE_FAKE_NPU_COUNT": count}
    if visible is not None:
        env["ASCEND_RT_VISIBLE_DEVICES"] = visible
    torch_npu = load_fake(**env)
    assert torch_npu.npu.device_count() == expected
    assert torch_npu.npu.is_available() is (expected > 0)


def test_no_visible_device_fails_at_runtime_initialisation(load_fake):
    torch_npu = load_fake(ASCEND_TUNE_FAKE_NPU_COUNT="0")
    with pytest.raises(RuntimeError, match="no visible NPU"):
        torch_npu.npu.current_device()


def test_set_device_checks_the_index(load_fake):
    torch_npu = load_fake(ASCEND_TUNE_FAKE_NPU_COUNT="2")
    torch_npu.npu.set_device("npu:1")
    assert torch_npu.npu.current_device() == 1
    with pytest.raises(RuntimeError, match="invalid device id"):
        torch_npu.npu.set_device(2)


def test_import_failure_switch_raises_the_no_cann_error_every_time(load_fake):
    for _ in range(2):  # the real package fails the same way on a second attempt
        with pytest.raises(ImportError, match=r"^libhccl\.so: cannot open shared object file"):
            load_fake(ASCEND_TUNE_FAKE_NPU_FAIL="import")


def test_runtime_failure_switch_raises_runtime_error(load_fake):
    with pytest.raises(RuntimeError, match="Two accelerators cannot be used at the same time"):
        load_fake(ASCEND_TUNE_FAKE_NPU_FAIL="runtime")


def test_unknown_failure_switch_is_refused(load_fake):
    with pytest.raises(ValueError, match="ASCEND_TUNE_FAKE_NPU_FAIL"):
        load_fake(ASCEND_TUNE_FAKE_NPU_FAIL="imprt")


# --- runtime options, events, amp -------------------------------------------------------------------------------------


def test_compile_mode_round_trip_synchronizes_once_initialised(load_fake):
    torch_npu = load_fake()
    assert torch_npu.npu.is_jit_compile_false()  # CANN's default on 910B; this also initialises the runtime
    before = torch_npu.npu._synchronize_calls
    torch_npu.npu.set_compile_mode(jit_compile=True)
    assert not torch_npu.npu.is_jit_compile_false()
    torch_npu.npu.set_compile_mode(jit_compile=False)
    assert torch_npu.npu.is_jit_compile_false()
    assert torch_npu.npu._synchronize_calls == before + 2


def test_compile_mode_default_depends_on_the_chip(load_fake):
    torch_npu = load_fake(ASCEND_TUNE_FAKE_NPU_NAME="Ascend910A")
    assert not torch_npu.npu.is_jit_compile_false()


def test_allow_internal_format_sets_an_option_and_is_write_only(load_fake):
    torch_npu = load_fake()
    torch_npu.npu.config.allow_internal_format = False
    assert torch_npu._C._options["ALLOW_INTERNAL_FORMAT"] == "disable"
    with pytest.raises(AttributeError):
        torch_npu.npu.config.allow_internal_format  # noqa: B018  (reading it back fails in the real package too)


def test_event_times_with_the_host_clock(load_fake):
    torch_npu = load_fake()
    start, end = torch_npu.npu.Event(enable_timing=True), torch_npu.npu.Event(enable_timing=True)
    start.record()
    torch.randn(64, 64).matmul(torch.randn(64, 64))
    end.record()
    end.synchronize()
    assert start.query() and start.elapsed_time(end) >= 0.0
    with pytest.raises(RuntimeError, match="enable_timing"):
        torch_npu.npu.Event().elapsed_time(end)
    assert torch_npu.npu.max_memory_allocated() == 0


def test_static_grad_scaler_keeps_its_scale(load_fake):
    torch_npu = load_fake()
    scaler = torch_npu.npu.amp.GradScaler(init_scale=8.0, dynamic=False)
    param = torch.nn.Parameter(torch.ones(2))
    optimizer = torch.optim.SGD([param], lr=0.1)
    scaler.scale((param * float("inf")).sum()).backward()
    scaler.step(optimizer)
    scaler.update()
    assert scaler.get_scale() == 8.0
    assert torch.equal(param.detach(), torch.ones(2))  # the inf step was skipped


# --- fused optimizers -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fused", "reference", "kwargs"),
    [
        ("NpuFusedSGD", torch.optim.SGD, dict(lr=0.1, momentum=0.9, weight_decay=0.01)),
        ("NpuFusedSGD", torch.optim.SGD, dict(lr=0.1, momentum=0.9, nesterov=True)),
        ("NpuFusedAdamW", torch.optim.AdamW, dict(lr=0.01, weight_decay=0.01)),
        ("NpuFusedAdam", torch.optim.Adam, dict(lr=0.01, weight_decay=0.01, amsgrad=True)),
        ("NpuFusedRMSprop", torch.optim.RMSprop, dict(lr=0.01, momentum=0.5, centered=True)),
        ("NpuFusedAdadelta", torch.optim.Adadelta, dict(weight_decay=0.01)),
    ],
)
def test_fused_optimizer_matches_torch_optim(load_fake, fused, reference, kwargs):
    fused_class = getattr(load_fake().optim, fused)
    got = _train(lambda params: fused_class(params, **kwargs))
    expected = _train(lambda params: reference(params, foreach=False, **kwargs))
    torch.testing.assert_close(got, expected, rtol=1e-6, atol=0.0)


def test_fused_optimizers_have_real_defaults_and_profiler_names(load_fake):
    optim = load_fake().optim
    param = torch.nn.Parameter(torch.ones(3))
    assert optim.NpuFusedAdamW([param]).defaults["weight_decay"] == 1e-2
    assert optim.NpuFusedLamb([param]).defaults["eps"] == 1e-6
    assert optim.NpuFusedRMSpropTF([param]).defaults["alpha"] == 0.9
    with pytest.raises(TypeError):
        optim.NpuFusedAdamW([param], foreach=False)
    sgd = optim.NpuFusedSGD([param], lr=0.1)
    param.grad = torch.ones(3)
    with torch.profiler.profile() as prof:
        sgd.step()
    assert "Optimizer.step#NpuFusedSGD.step" in {e.name for e in prof.events()}


@pytest.mark.parametrize("name", ["NpuFusedLamb", "NpuFusedAdamP", "NpuFusedBertAdam", "NpuFusedRMSpropTF"])
def test_other_fused_optimizers_reduce_the_loss(load_fake, name):
    optimizer_class = getattr(load_fake().optim, name)
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    x = torch.randn(32, 4)
    y = x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]])
    optimizer = optimizer_class(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(20):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]


def test_fused_optimizer_rejects_bfloat16(load_fake):
    optim = load_fake().optim
    model = torch.nn.Linear(3, 2).to(torch.bfloat16)
    optimizer = optim.NpuFusedAdamW(model.parameters())
    model(torch.randn(4, 3, dtype=torch.bfloat16)).sum().backward()
    with pytest.raises(TypeError, match="must be either float32 or float16"):
        optimizer.step()


def test_zero_grad_zeroes_in_place_and_refuses_set_to_none(load_fake):
    optim = load_fake().optim
    model = torch.nn.Linear(3, 2)
    optimizer = optim.NpuFusedSGD(model.parameters(), lr=0.1)
    model(torch.randn(4, 3)).sum().backward()
    grad = model.weight.grad
    optimizer.zero_grad()
    assert model.weight.grad is grad and not grad.any()
    with pytest.raises(ValueError, match="set_to_none is not supported"):
        optimizer.zero_grad(set_to_none=True)


def test_grads_replaced_after_combining_are_not_seen(load_fake):
    # The real optimizer keeps updating from its combined buffer, so model.zero_grad() (set_to_none) breaks it.
    optim = load_fake().optim
    model = torch.nn.Linear(3, 1, bias=False)
    optimizer = optim.NpuFusedSGD(model.parameters(), lr=1.0)
    x = torch.ones(1, 3)
    model(x).sum().backward()
    optimizer.step()
    after_first = model.weight.detach().clone()
    model.zero_grad()  # sets .grad to None
    (0.0 * model(x)).sum().backward()  # a zero gradient, in a new tensor
    optimizer.step()
    torch.testing.assert_close(model.weight.detach(), after_first - 1.0)  # stepped with the stale ones


# --- profiler ---------------------------------------------------------------------------------------------------------


def test_schedule_takes_wait_then_active_positionally(load_fake):
    profiler = load_fake().profiler
    actions = [profiler.schedule(1, 2)(step) for step in range(4)]
    action = profiler.ProfilerAction
    assert actions == [action.NONE, action.RECORD, action.RECORD_AND_SAVE, action.NONE]
    assert action is not torch.profiler.ProfilerAction


def test_experimental_config_defaults_are_real(load_fake):
    profiler = load_fake().profiler
    config = profiler._ExperimentalConfig()
    assert config.export_type == [profiler.ExportType.Text] == ["text"]
    assert config._profiler_level == profiler.ProfilerLevel.Level0
    assert config._aic_metrics == profiler.AiCMetrics.AiCoreNone  # reset at Level0, as the real class does


def test_profiler_writes_the_ascend_pt_layout(load_fake, tmp_path):
    torch_npu = load_fake()
    profiler = torch_npu.profiler
    prof = profiler.profile(
        activities=[profiler.ProfilerActivity.CPU, profiler.ProfilerActivity.NPU],
        schedule=profiler.schedule(wait=1, active=2, warmup=1, repeat=1),
        on_trace_ready=profiler.tensorboard_trace_handler(str(tmp_path), worker_name="worker"),
    )
    with prof:
        for _ in range(5):
            torch.randn(16, 16).matmul(torch.randn(16, 16))
            prof.step()
    assert prof.step_num == 5
    (run_dir,) = tmp_path.iterdir()
    assert re.fullmatch(r"worker_\d+_\d{17}_ascend_pt", run_dir.name)
    info = json.loads((run_dir / "profiler_info.json").read_text())
    assert info["torch_npu_version"] == torch_npu.__version__
    events = json.loads((run_dir / "ASCEND_PROFILER_OUTPUT" / "trace_view.json").read_text())
    assert isinstance(events, list)
    spans = [e for e in events if e["ph"] == "X"]
    assert spans and all(isinstance(e["ts"], str) and float(e["ts"]) > 0 for e in spans)
    steps = sorted(e["name"] for e in spans if e["name"].startswith("ProfilerStep#"))
    assert steps == ["ProfilerStep#2", "ProfilerStep#3"]
    assert any(e["name"] == "aten::matmul" for e in spans)


def test_profiler_swallows_errors_from_on_trace_ready(load_fake, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # with no handler folder configured, the run folder goes to the working directory
    profiler = load_fake().profiler

    def broken_handler(prof: object) -> None:
        raise OSError("disk full")

    with profiler.profile(on_trace_ready=broken_handler):
        torch.ones(2).sum()
    assert "Call stop failed. Exception: disk full" in capsys.readouterr().out
    assert [p.name.endswith("_ascend_pt") for p in tmp_path.iterdir()] == [True]


def test_profiler_without_handler_writes_only_the_exported_trace(load_fake, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    profiler = load_fake().profiler
    with profiler.profile(activities=[profiler.ProfilerActivity.CPU]) as prof:
        torch.ones(4).sum()
    prof.export_chrome_trace(str(tmp_path / "trace.json"))
    assert [p.name for p in tmp_path.iterdir()] == ["trace.json"]
    events = json.loads((tmp_path / "trace.json").read_text())
    assert any(e["name"] == "aten::sum" for e in events)
