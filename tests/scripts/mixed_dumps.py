"""Run by tests/test_mixed_precision.py in a subprocess (msprobe patches torch for good): one training step per
scenario of a small GPT and a small CNN, dumped at level mix through TrainingMonitor, the pairs AMP ports bring.

Usage: python mixed_dumps.py OUT ENGINE TASK. Writes OUT/ENGINE_TASK/MODEL/dump/step{K}/<rank folder>, K the index
of SCENARIOS. Before each step the model and the optimizer's state are put back to where they started (outside any
dump), so every step starts from the same weights and sees the same batch:

- ``fp32``: the reference; ``bf16`` / ``fp16``: the same step under ``torch.autocast("cpu", dtype)``, a correct
  port;
- ``bf16_fault`` / ``fp16_fault``: the same port with one kernel 2% off: ``aten::gelu`` (the GPT) or ``aten::relu``
  (the CNN) overridden on the CPU with torch.library, the same recorded call with the same arguments, its result
  times 1.02.
"""

import contextlib
import math
import os
import sys
import warnings

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from ascend_tune import TrainingMonitor
from ascend_tune.testing.models import TinyGPT, synthetic_tokens
from ascend_tune.testing.torch_features import drop_library

SCENARIOS = ("fp32", "bf16", "fp16", "bf16_fault", "fp16_fault")
FAULT = 1.02
FAULTY_OP = {"gpt": "gelu", "cnn": "relu"}
aten = torch.ops.aten


def _gelu(x, approximate="none"):
    """GELU computed in float32 from aten's own ops (seen by neither engine's API hooks), then 2% off."""
    x32 = aten._to_copy.default(x, dtype=torch.float32)
    erf = aten.erf.default(aten.mul.Scalar(x32, 1 / math.sqrt(2)))
    y = aten.mul.Tensor(aten.mul.Scalar(x32, 0.5), aten.add.Scalar(erf, 1.0))
    return aten._to_copy.default(aten.mul.Scalar(y, FAULT), dtype=x.dtype)


def _relu(x):
    return aten.mul.Scalar(aten.clamp_min.default(x, 0), FAULT)


@contextlib.contextmanager
def fault(op):
    """``aten::<op>`` 2% off on the CPU while the context is open."""
    lib = torch.library.Library("aten", "IMPL")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "overriding a previously registered kernel": that is the point
        lib.impl(op, {"gelu": _gelu, "relu": _relu}[op], "CPU")
    try:
        yield
    finally:
        drop_library(lib)


def half_autocast_works(dtype):
    """Whether CPU autocast runs in ``dtype`` (float16 on the CPU came after torch 2.1)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            with torch.autocast("cpu", dtype=dtype):
                return torch.mm(torch.ones(2, 2), torch.ones(2, 2)).dtype == dtype
        except RuntimeError:  # torch 2.1: "AutocastCPU only support Bfloat16"
            return False


class SmallCNN(nn.Sequential):
    """conv-BN-ReLU, max pool, conv-ReLU, global average pool, linear: a CNN's op families in four layers."""

    def __init__(self, classes: int = 10):
        super().__init__(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(16, classes))


def build(model_name):
    torch.manual_seed(0)
    if model_name == "gpt":
        model = TinyGPT(block=16, dim=32, heads=2, layers=2)
        x, y = synthetic_tokens(n=8, block=16)[:]
        return model, x, y, lambda m, xb, yb: m(xb, yb)
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(8, 3, 16, 16, generator=g), torch.randint(0, 10, (8,), generator=g)
    return SmallCNN(), x, y, lambda m, xb, yb: nn.functional.cross_entropy(m(xb), yb)


def setting(scenario, model_name):
    stack = contextlib.ExitStack()
    precision = scenario.split("_")[0]
    if precision != "fp32":
        dtype = torch.bfloat16 if precision == "bf16" else torch.float16
        stack.enter_context(torch.autocast("cpu", dtype=dtype))
    if scenario.endswith("fault"):
        stack.enter_context(fault(FAULTY_OP[model_name]))
    return stack


def run(out, engine, task):
    scenarios = [s for s in SCENARIOS if not s.startswith("fp16") or half_autocast_works(torch.float16)]
    for model_name in ("gpt", "cnn"):
        model, x, y, loss_of = build(model_name)
        init = {k: v.clone() for k, v in model.state_dict().items()}
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        loader = DataLoader(TensorDataset(x.repeat(len(scenarios), *[1] * (x.dim() - 1)),
                                          y.repeat(len(scenarios), *[1] * (y.dim() - 1))), batch_size=len(x))
        folder = os.path.join(out, f"{engine}_{task}", model_name)
        with TrainingMonitor(model, optimizer, loader, log_dir=folder, quiet=True, tune=False,
                             precision=dict(backend=engine, task=task, level="mix", steps=[])):
            for step, (xb, yb) in enumerate(loader):
                with setting(scenarios[step], model_name):
                    loss = loss_of(model, xb, yb)
                loss.backward()
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
                model.load_state_dict(init)  # the next scenario starts where this one did
                optimizer.state.clear()
    with open(os.path.join(out, f"{engine}_{task}", "scenarios.txt"), "w") as fh:
        fh.write("\n".join(scenarios) + "\n")


if __name__ == "__main__":
    torch.set_num_threads(1)
    run(*sys.argv[1:4])
