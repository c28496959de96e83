"""Run by tests/test_dump_matrix.py in a subprocess (msprobe patches torch for good): a 2-layer GPT dumped at
statistics / L1 by both engines through TrainingMonitor, one scenario per step, then msprobe's own compare.

Usage: python gpt_dumps.py OUT. Writes OUT/builtin/dump/step{K}/rank0 (backend="builtin") and
OUT/msprobe/dump/step{K}/proc<PID> (backend="msprobe"), K = the index of SCENARIOS: step 0 is the reference, step 1
the same run again, the others one fault each. Steps are backward passes (no optimizer: the weights stay put); each
scenario is set up after one step's backward and before the next batch, outside any dump. Then msprobe's compare
(``pt_compare``) of step 1 against step 0, builtin/builtin and builtin (golden) / msprobe (target), into
OUT/msprobe_compare/{builtin_builtin,builtin_msprobe}.
"""

import glob
import os
import sys

import torch
from torch.utils.data import DataLoader, TensorDataset

from ascend_tune import TrainingMonitor
from ascend_tune.testing.models import TinyGPT, synthetic_tokens

SCENARIOS = ("reference", "identical", "eps", "gelu", "bf16_weight")
BATCH = 4


def prepare(model, init, scenario):
    """Put the model into ``scenario`` from its initial state."""
    for module in model.modules():
        if isinstance(module, torch.nn.LayerNorm):
            module.eps = 2e-5 if scenario == "eps" else 1e-5
        if isinstance(module, torch.nn.GELU):
            module.approximate = "tanh" if scenario == "gelu" else "none"
    weight = model.h[1].mlp[0].weight  # the second block's c_fc: Functional.linear.6
    with torch.no_grad():
        source = init["h.1.mlp.0.weight"]
        weight.copy_(source.to(torch.bfloat16).float() if scenario == "bf16_weight" else source)


def run(log_dir, backend):
    torch.manual_seed(0)
    model = TinyGPT()
    init = {k: v.clone() for k, v in model.state_dict().items()}
    idx, targets = synthetic_tokens(n=BATCH)[:]
    data = TensorDataset(idx.repeat(len(SCENARIOS), 1), targets.repeat(len(SCENARIOS), 1))  # one batch, again
    loader = DataLoader(data, batch_size=BATCH)
    prepare(model, init, SCENARIOS[0])
    with TrainingMonitor(model, train_loader=loader, log_dir=log_dir, quiet=True, tune=False,
                         precision=dict(backend=backend, task="statistics", level="L1", steps=[])):
        for step, (x, y) in enumerate(loader):
            model(x, y).backward()  # the step ends here (no optimizer: each backward is a step)
            model.zero_grad(set_to_none=True)
            if step + 1 < len(SCENARIOS):
                prepare(model, init, SCENARIOS[step + 1])


def main(out):
    torch.set_num_threads(1)
    run(os.path.join(out, "builtin"), "builtin")
    run(os.path.join(out, "msprobe"), "msprobe")
    from msprobe.pytorch.compare.pt_compare import pt_compare

    # msprobe's CLI wants the same rank-folder names on both sides (rank0 / proc<PID>): its Python entry point
    # takes the two dump.json files (and finds stack.json beside them)
    golden = glob.glob(os.path.join(out, "builtin", "dump", "step0", "*", "dump.json"))[0]
    for name, engine in (("builtin_builtin", "builtin"), ("builtin_msprobe", "msprobe")):
        target = glob.glob(os.path.join(out, engine, "dump", "step1", "*", "dump.json"))[0]
        result = os.path.join(out, "msprobe_compare", name)
        os.makedirs(result)
        pt_compare({"npu_path": target, "bench_path": golden, "is_print_compare_log": False}, result)


if __name__ == "__main__":
    main(sys.argv[1])
