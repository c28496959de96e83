"""Run by tests/test_compare_config.py in a process of its own (msprobe patches torch for good): msprobe's
config_check packs a small MLP's run (``ConfigChecker(model, output_zip_path=OUT/pack.zip)``), and with ``both``
the two lines record the same run in OUT/run. ``argv``: OUT, the seed of the initial weights, ``both`` or ``pack``."""

import os
import sys

import torch
from msprobe.core.config_check.config_checker import ConfigChecker

from ascend_tune import TrainingMonitor


def main(out, seed, how):
    ConfigChecker.apply_patches("pytorch")
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    ConfigChecker(model=model, output_zip_path=os.path.join(out, "pack.zip"), fmk="pytorch")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(1))
    y = torch.tensor([0, 1, 0, 1])
    block = TrainingMonitor(model, optimizer, log_dir=os.path.join(out, "run"), quiet=True, tune=False) \
        if how == "both" else None
    if block is not None:
        block.__enter__()
    for _ in range(4):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    if block is not None:
        block.__exit__(None, None, None)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3])
