"""What differs between the torches ascend_tune supports (2.1 to 2.14) works on this one, or skips naming why."""

from __future__ import annotations

import importlib.util
import inspect
import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F
from conftest import read_jsonl, read_log

from ascend_tune import TrainingMonitor
from ascend_tune.recording.modules import global_forward_hook
from ascend_tune.testing.models import TinyMLP, synthetic_classification
from ascend_tune.testing.torch_features import find_set_stance, set_stance_missing

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_the_six_line_loop_with_the_two_lines_logs_its_steps(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent("""
        import sys, torch
        from torch.utils.data import DataLoader, TensorDataset
        from ascend_tune import TrainingMonitor
        model = torch.nn.Linear(8, 2)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        train_loader = DataLoader(TensorDataset(torch.randn(40, 8), torch.randint(0, 2, (40,))), batch_size=8)
        with TrainingMonitor(model, optimizer, train_loader, log_dir=sys.argv[1]):
            for x, y in train_loader:
                loss = torch.nn.functional.cross_entropy(model(x), y)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
    """))
    proc = subprocess.run([sys.executable, str(script), str(tmp_path / "run")], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert len(read_log(tmp_path / "run")) == 5
    assert [r["step"] for r in read_jsonl(tmp_path / "run" / "metrics.jsonl")] == list(range(5))


@pytest.mark.parametrize("kwargs_in_hooks", [True, False], ids=["with_kwargs", "before_torch_2.6"])
def test_global_forward_hooks_see_kwargs_where_torch_passes_them(monkeypatch, kwargs_in_hooks):
    register = torch.nn.modules.module.register_module_forward_hook
    has_kwargs = "with_kwargs" in inspect.signature(register).parameters
    if kwargs_in_hooks and not has_kwargs:
        pytest.skip(f"torch {torch.__version__}'s global forward hooks take no with_kwargs (first in torch 2.6)")
    if not kwargs_in_hooks:  # an older torch's signature, on any torch
        monkeypatch.setattr(torch.nn.modules.module, "register_module_forward_hook",
                            lambda hook, *, always_call=False: register(hook, always_call=always_call))

    class Scaled(torch.nn.Module):
        def forward(self, x, scale=1.0):
            return x * scale

    seen = []
    handle = global_forward_hook(lambda m, args, kwargs, out: seen.append((type(m), kwargs, out)))
    try:
        Scaled()(torch.ones(2), scale=3.0)
    finally:
        handle.remove()
    # nothing left behind (torch.compile warns about global hooks while torch's with_kwargs table holds an id)
    assert not getattr(torch.nn.modules.module, "_global_forward_hooks_with_kwargs", {})
    assert not torch.nn.modules.module._global_forward_hooks
    ((cls, kwargs, out),) = seen
    assert cls is Scaled and torch.equal(out, torch.full((2,), 3.0))
    assert kwargs == ({"scale": 3.0} if kwargs_in_hooks else {})


def test_a_compiled_model_forced_eager_logs_the_eager_losses(tmp_path):
    if set_stance_missing():
        pytest.skip(set_stance_missing())
    torch.manual_seed(0)
    model = TinyMLP()
    reference = TinyMLP()
    reference.load_state_dict(model.state_dict())
    compiled = torch.compile(model)
    x, y = synthetic_classification(n=32).tensors
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with find_set_stance()("force_eager"):
        with TrainingMonitor(compiled, optimizer, log_dir=tmp_path, quiet=True, warmup_steps=0, tune=False):
            for _ in range(3):
                optimizer.zero_grad()
                F.cross_entropy(compiled(x), y).backward()
                optimizer.step()
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    expected = []
    for _ in range(3):
        ref_opt.zero_grad()
        loss = F.cross_entropy(reference(x), y)
        expected.append(float(loss.detach()))
        loss.backward()
        ref_opt.step()
    assert [r["loss"] for r in read_jsonl(tmp_path / "metrics.jsonl")] == expected


def _install_tool():
    spec = importlib.util.spec_from_file_location("install_extras", os.path.join(ROOT, "tools", "install_extras.py"))
    install = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(install)
    return install


def test_the_install_pins_the_torch_it_found_and_numpy_below_2_before_torch_2_3():
    install = _install_tool()
    assert install.constraints("2.1.2") == ["torch==2.1.2", "numpy<2"]
    assert install.constraints("2.2.2+cpu") == ["torch==2.2.2+cpu", "numpy<2"]
    assert install.constraints("2.13.0+cpu") == ["torch==2.13.0+cpu"]
    assert install.torch_version().split("+")[0] == torch.__version__.split("+")[0]


def test_an_extra_that_cannot_install_next_to_this_torch_is_skipped_with_a_message(monkeypatch, capsys):
    install = _install_tool()
    calls = []

    def pip_install(spec, constraints_file, editable=True):
        assert editable  # the checkout, as make install installs it
        calls.append(spec)
        with open(constraints_file, encoding="utf-8") as fh:
            assert fh.readline().startswith("torch==")  # every call pins the torch it found
        ok = spec in (".", ".[plot]")
        err = "" if ok else "ERROR: Cannot install ascend-tune[new] because it needs torch>=9\n"
        return subprocess.CompletedProcess([], 0 if ok else 1, "", err)

    monkeypatch.setattr(install, "pip_install", pip_install)
    assert install.main(["plot,new"]) == 0
    assert calls == [".[plot,new]", ".", ".[plot]", ".[new]"]
    err = capsys.readouterr().err
    assert "skipping the 'new' extra: it cannot be installed next to torch" in err and "torch>=9" in err
    assert "'plot'" not in err.split("trying each")[-1]
