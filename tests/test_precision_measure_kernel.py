"""A replay measures a large tensor in compiled C (ascend_tune.precision.measure_kernel) where the machine has a C
compiler, with the figures of the torch passes it replaces, and in those torch passes wherever the C cannot be
built or loaded."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
from conftest import built_at_once, train_gpt
from test_precision_replay import broken_kernel, gelu_1e3_off, replayed

from ascend_tune.contract import native
from ascend_tune.precision import golden, measure_kernel

pytestmark = pytest.mark.usefixtures("one_thread")

compiled = pytest.mark.skipif(not measure_kernel.available(), reason="no C compiler here: the torch passes measure")


def torch_passes(device: torch.Tensor, gold: torch.Tensor, rtol: float, monkeypatch) -> object:
    with monkeypatch.context() as m:
        m.setattr(measure_kernel, "measure", lambda *args: None)
        return golden.measure(device, gold, rtol)


def assert_same(a, b) -> None:
    assert a.max_abs_err == b.max_abs_err and a.err_ratio == b.err_ratio and a.nonfinite == b.nonfinite
    assert a.max_rel_err == pytest.approx(b.max_rel_err, rel=1e-12)
    assert a.norm_err == pytest.approx(b.norm_err, rel=1e-12)


@compiled
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_the_compiled_measure_gives_the_torch_passes_figures(dtype, layout, monkeypatch):
    gen = torch.Generator().manual_seed(0)
    gold = torch.randn(96, 130, generator=gen, dtype=torch.float64) * 3
    gold[0, :40] = 1e-9  # near zero: judged on the tensor's scale (the rms), not their own
    device = (gold * (1 + 1e-7 * torch.randn(gold.shape, generator=gen, dtype=torch.float64))).to(dtype)
    device.view(-1)[500:700] *= 1.01  # some elements over any rtol
    if layout == "transposed":
        device, gold = device.t(), gold.t()
    for rtol in (1e-4, 0.5):  # elements over it, and none over it (the count is 0 then)
        assert measure_kernel.measure(device, gold, rtol) is not None  # the compiled path measures this one
        fused = golden.measure(device, gold, rtol)
        assert_same(fused, torch_passes(device, gold, rtol, monkeypatch))
        assert (fused.err_ratio > 0) == (rtol < 0.5)


@compiled
@pytest.mark.parametrize("n", range(4097, 4097 + 9))  # each remainder past the vectors of 2 x 4 lanes
@pytest.mark.parametrize("where", ["first", "last"])
def test_the_elements_past_the_last_vectors_are_measured(n, where, monkeypatch):
    gen = torch.Generator().manual_seed(n)
    gold = torch.randn(n, generator=gen, dtype=torch.float64)
    device = gold.to(torch.float32)
    at = 0 if where == "first" else n - 1
    device[at] = gold[at] * 1.5 + 0.25  # the largest error, and the only one over rtol
    fused = golden.measure(device, gold, 1e-3)
    assert fused.err_ratio == 1 / n and fused.max_abs_err == pytest.approx(abs(gold[at].item() * 0.5 + 0.25), rel=1e-6)
    assert_same(fused, torch_passes(device, gold, 1e-3, monkeypatch))
    device[at] = gold[at] - 1e3  # the lowest difference there
    assert_same(golden.measure(device, gold, 1e-3), torch_passes(device, gold, 1e-3, monkeypatch))


@compiled
def test_values_the_c_leaves_to_the_torch_passes(monkeypatch):
    gold = torch.linspace(-2, 2, 8192, dtype=torch.float64)
    assert measure_kernel.measure(gold.clone(), gold, 1e-6) is not None
    assert golden.measure(gold.clone(), gold, 1e-6) == golden.EXACT
    same = gold.float()
    for device, expected_nonfinite in ((same.clone().index_fill_(0, torch.tensor([3]), float("inf")), 1),
                                       (same.clone().index_fill_(0, torch.tensor([9]), float("nan")), 1)):
        assert measure_kernel.measure(device, gold, 1e-6) is None
        assert golden.measure(device, gold, 1e-6).nonfinite == expected_nonfinite
    both_inf = gold.clone()
    both_inf[7] = float("-inf")
    assert measure_kernel.measure(both_inf.float(), both_inf, 1e-6) is None
    assert golden.measure(both_inf.float(), both_inf, 1e-6).nonfinite == 0  # the same infinity agrees
    zeros = torch.zeros(8192, dtype=torch.float64)
    assert measure_kernel.measure(torch.ones(8192), zeros, 1e-6) is None
    assert golden.measure(torch.ones(8192), zeros, 1e-6).norm_err == float("inf")
    assert measure_kernel.measure(torch.arange(8192), gold, 1e-6) is None  # integers: the torch passes
    assert_same(golden.measure(torch.arange(8192), gold, 1e-6),
                torch_passes(torch.arange(8192), gold, 1e-6, monkeypatch))


@compiled
def test_a_replayed_step_has_the_rows_of_the_torch_passes(tmp_path, monkeypatch):
    """Width 128: the MLP's activations (16k elements), the weights' gradients (16k-64k) measured in C, the broken
    gelu's output among them: replay.csv is the same, its suspect too."""
    gpt = dict(dim=128)
    with broken_kernel("gelu", gelu_1e3_off):
        train_gpt(tmp_path / "compiled", dict(task="replay", steps=[0]), **gpt)
        with monkeypatch.context() as m:
            m.setattr(measure_kernel, "measure", lambda *args: None)
            train_gpt(tmp_path / "torch", dict(task="replay", steps=[0]), **gpt)
    compiled_summary, compiled_rows = replayed(tmp_path / "compiled")
    torch_summary, torch_rows = replayed(tmp_path / "torch")
    assert compiled_rows == torch_rows
    assert compiled_summary["first_suspect"] == torch_summary["first_suspect"] == "Functional.gelu.0.forward"
    suspect = next(r for r in compiled_rows if r["name"] == "Functional.gelu.0.forward")
    assert suspect["shape"] == "[4, 8, 512]" and suspect["verdict"] == "suspect"  # 16,384 elements: the C's


def _load_in_a_new_process(env: dict) -> subprocess.CompletedProcess:
    code = ("from ascend_tune.precision import measure_kernel as k, golden; import torch\n"
            "g = torch.randn(9000, dtype=torch.float64)\n"
            "print(k.available(), golden.measure(g.float(), g, 1e-6).max_abs_err > 0)\n")
    return subprocess.run([sys.executable, "-c", code], env={**os.environ, **env}, capture_output=True, text=True,
                          timeout=300)


@pytest.mark.parametrize("switch", [{"CC": "false"}, {"ASCEND_TUNE_NO_COMPILE": "1"}],
                         ids=["compiler-fails", "switched-off"])
def test_without_the_c_the_torch_passes_measure(tmp_path, switch):
    done = _load_in_a_new_process({"ASCEND_TUNE_CACHE": str(tmp_path / "cache"), **switch})
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "True"]
    assert not (tmp_path / "cache").exists() or not any(p.suffix == ".so" for p in (tmp_path / "cache").iterdir())


@compiled
def test_ranks_compiling_at_once_and_a_broken_library_in_the_cache(tmp_path):
    cache = tmp_path / "cache"
    library = built_at_once("from ascend_tune.precision import measure_kernel as k; print(k.available())", cache)
    assert library.suffix == ".so"
    library.write_bytes(b"cut short")
    done = _load_in_a_new_process({"ASCEND_TUNE_CACHE": str(cache)})
    assert done.stdout.split() == ["True", "True"], done.stderr
    assert library.stat().st_size > 1000  # built again


@compiled
def test_a_compiler_named_with_a_wrapper(tmp_path):
    """``CC="ccache gcc"`` and the like: the command's words, not one program's name."""
    done = _load_in_a_new_process({"ASCEND_TUNE_CACHE": str(tmp_path), "CC": "env cc"})
    assert done.stdout.split() == ["True", "True"], done.stderr


def test_a_switch_word_it_does_not_know_keeps_the_torch_passes_and_says_so(tmp_path):
    done = _load_in_a_new_process({"ASCEND_TUNE_CACHE": str(tmp_path), "ASCEND_TUNE_NO_COMPILE": "maybe"})
    assert done.stdout.split() == ["False", "True"], done.stderr
    assert "ASCEND_TUNE_NO_COMPILE='maybe'" in done.stderr


@compiled
def test_where_the_cpu_is_not_named_the_library_is_built_for_the_machine(tmp_path, monkeypatch):
    """No /proc/cpuinfo (macOS, a sandbox): no -march=native, whose instructions a cache shared with other hosts
    could not vouch for."""
    commands = []
    run = subprocess.run
    monkeypatch.setattr(subprocess, "run", lambda command, **kw: commands.append(command) or run(
        command, **kw))
    monkeypatch.setattr(native, "cpu", lambda: "")
    monkeypatch.setattr(measure_kernel, "_tried", False)
    monkeypatch.setattr(measure_kernel, "_functions", {})
    monkeypatch.setenv("ASCEND_TUNE_CACHE", str(tmp_path))
    assert measure_kernel.available()
    assert len(commands) == 1 and "-O3" in commands[0] and "-march=native" not in commands[0]
    gold = torch.randn(5000, dtype=torch.float64)
    assert measure_kernel.measure(gold.float(), gold, 1e-6) is not None
