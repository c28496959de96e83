"""Run by tests/test_step_dumps.py in a subprocess (msprobe patches torch for good): whole training steps (forward,
backward, the optimizer's step) dumped at statistics / L1 through TrainingMonitor, one scenario per step.

Usage: python step_dumps.py OUT ENGINE KIND [TASK]. Writes OUT/ENGINE/KIND/dump/step{K}/<rank folder> (TASK
"tensor": OUT/ENGINE/KIND_tensor/...), K = the index of SCENARIOS[KIND]. Before each step the model and the
optimizer's state are put back to where they started (outside any dump), so steps with the same setting are
identical runs:

- ``adamw``, ``adam``, ``sgd`` (SGD with momentum): a two-layer MLP; "loop" and "foreach" are the optimizer's two
  implementations, twice each; ``adamw`` adds a value-only fault in an in-place kernel of the step (``aten::addcdiv_``
  or ``aten::lerp_`` overridden on the CPU with torch.library for that step: the result is 5% off the update);
- ``gpt``: a small GPT with AdamW, SDPA's default CPU kernel against its math backend, in float32 and under bfloat16
  autocast; then every ``aten::mm`` / ``aten::addmm`` on the CPU computed in blocks of K summed in reverse order,
  and ``torch.use_deterministic_algorithms(True)``: right-but-different kernels, all correct; last, the math
  backend with the faulty ``addcdiv_``: a fault in an op whose inputs already differ.

tests/data/dump_v0_1_adamw holds step 0 of ``adamw`` dumped by the builtin engine at commit f03ba44 (ascend_tune
0.1.0, call model 2: before the engine recorded a 0-d argument as the op received it).
"""

import contextlib
import os
import sys
import warnings

import torch
from torch.utils.data import DataLoader, TensorDataset

from ascend_tune import TrainingMonitor
from ascend_tune.testing.models import TinyGPT, TinyMLP, synthetic_classification, synthetic_tokens
from ascend_tune.testing.torch_features import drop_library

SCENARIOS = {
    "adamw": ("loop", "loop", "foreach", "foreach", "addcdiv_fault", "lerp_fault"),
    "adam": ("loop", "loop", "foreach", "foreach"),
    "sgd": ("loop", "loop", "foreach", "foreach"),
    "gpt": ("default", "math", "bf16_default", "bf16_math", "blocked_mm", "deterministic", "math_addcdiv_fault"),
}
FAULT = 1.05  # the faulty kernel's update is 5% too large


def _addcdiv_(self, tensor1, tensor2, *, value=1):
    aten = torch.ops.aten  # aten's own ops: seen by neither engine's API hooks
    return aten.add_.Tensor(self, aten.mul.Scalar(aten.div.Tensor(tensor1, tensor2), value * FAULT))


def _lerp_(self, end, weight):
    aten = torch.ops.aten
    return aten.add_.Tensor(self, aten.mul.Scalar(aten.sub.Tensor(end, self), weight * FAULT))


@contextlib.contextmanager
def fault(op):
    """The value-only fault of ``op`` ("addcdiv_" or "lerp_") on the CPU, while the context is open."""
    lib = torch.library.Library("aten", "IMPL")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "overriding a previously registered kernel": that is the point
        lib.impl(op if op == "addcdiv_" else f"{op}.Scalar", _addcdiv_ if op == "addcdiv_" else _lerp_, "CPU")
    try:
        yield
    finally:
        drop_library(lib)


def _blocks(a, b):
    """a @ b summed over K in blocks of 8, last block first: another correct order of the same sums."""
    aten, k = torch.ops.aten, a.shape[-1]
    parts = [aten.bmm.default(a[:, i:i + 8].unsqueeze(0), b[i:i + 8].unsqueeze(0))[0] for i in range(0, k, 8)]
    out = parts[-1]
    for part in reversed(parts[:-1]):
        out = aten.add.Tensor(out, part)
    return out


def _mm(a, b):
    return _blocks(a, b)


def _addmm(bias, a, b, *, beta=1, alpha=1):
    aten = torch.ops.aten
    return aten.add.Tensor(aten.mul.Scalar(bias, beta), aten.mul.Scalar(_blocks(a, b), alpha))


@contextlib.contextmanager
def blocked_matmul():
    """Every CPU mm / addmm summed in another order (aten's own ops inside: neither engine's hooks see them)."""
    lib = torch.library.Library("aten", "IMPL")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lib.impl("mm", _mm, "CPU")
        lib.impl("addmm", _addmm, "CPU")
    try:
        yield
    finally:
        drop_library(lib)


@contextlib.contextmanager
def deterministic():
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(False)


def optimizer_for(kind, params):
    if kind == "sgd":
        return torch.optim.SGD(params, lr=1e-2, momentum=0.9, foreach=False)
    return (torch.optim.AdamW if kind == "adamw" else torch.optim.Adam)(params, lr=1e-2, foreach=False)


def setting(scenario):
    """The context a step of ``scenario`` runs its forward, backward and optimizer step in."""
    stack = contextlib.ExitStack()
    for op in ("addcdiv_", "lerp_"):
        if scenario.endswith(f"{op}fault"):
            stack.enter_context(fault(op))
    if scenario == "blocked_mm":
        stack.enter_context(blocked_matmul())
    if scenario == "deterministic":
        stack.enter_context(deterministic())
    if scenario.startswith("bf16"):
        stack.enter_context(torch.autocast("cpu", dtype=torch.bfloat16))
    if "math" in scenario:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        stack.enter_context(sdpa_kernel(SDPBackend.MATH))
    return stack


def run(out, engine, kind, task="statistics"):
    scenarios = SCENARIOS[kind]
    torch.manual_seed(0)
    if kind == "gpt":
        model = TinyGPT(block=16, dim=32, heads=2, layers=2)
        x, y = synthetic_tokens(n=4, block=16)[:]
    else:
        model = TinyMLP(features=4, hidden=8, classes=2)
        x, y = synthetic_classification(n=8, features=4, classes=2)[:]
    init = {k: v.clone() for k, v in model.state_dict().items()}
    optimizer = optimizer_for(kind, model.parameters())
    loader = DataLoader(TensorDataset(x.repeat(len(scenarios), 1), y.repeat(len(scenarios), *[1] * (y.dim() - 1))),
                        batch_size=len(x))
    folder = kind if task == "statistics" else f"{kind}_{task}"
    with TrainingMonitor(model, optimizer, loader, log_dir=os.path.join(out, engine, folder), quiet=True, tune=False,
                         precision=dict(backend=engine, task=task, level="L1", steps=[])):
        for step, (xb, yb) in enumerate(loader):
            scenario = scenarios[step]
            for group in optimizer.param_groups:
                group["foreach"] = scenario == "foreach"
            with setting(scenario):
                loss = model(xb, yb) if kind == "gpt" else torch.nn.functional.cross_entropy(model(xb), yb)
                loss.backward()
                optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            model.load_state_dict(init)  # the next scenario starts where this one did
            optimizer.state.clear()


if __name__ == "__main__":
    torch.set_num_threads(1)
    run(*sys.argv[1:5])
