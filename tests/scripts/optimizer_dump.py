"""A whole training step (forward, backward, the optimizer's step) of a Linear(4, 2) dumped by the builtin engine.

Usage: python optimizer_dump.py OUT [OPTIMIZER] [FOREACH]. Writes OUT/dump/step{0,1}/rank0 (statistics, L1): two
identical steps from the same seed and data. tests/data/dump_v0_1_adamw was made with it at commit f03ba44, before
the engine recorded mutated arguments as the op received them (ascend_tune 0.1.0, call model 2).
"""

import sys

import torch
from torch.utils.data import DataLoader, TensorDataset

from ascend_tune import TrainingMonitor

OPTIMIZERS = {
    "adamw": lambda p, foreach: torch.optim.AdamW(p, lr=1e-2, foreach=foreach),
    "adam": lambda p, foreach: torch.optim.Adam(p, lr=1e-2, foreach=foreach),
    "sgd": lambda p, foreach: torch.optim.SGD(p, lr=1e-2, momentum=0.9, foreach=foreach),
}


def run(out: str, optimizer: str = "adamw", foreach: bool = False) -> None:
    torch.manual_seed(0)
    x, y = torch.randn(2, 8, 4), torch.randn(2, 8, 2)
    loader = DataLoader(TensorDataset(x, y), batch_size=None)
    for step, _ in enumerate(range(2)):
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 2)
        opt = OPTIMIZERS[optimizer](model.parameters(), foreach)
        with TrainingMonitor(model, opt, loader, log_dir=out, quiet=True, tune=False, start_step=step,
                             precision=dict(backend="builtin", task="statistics", level="L1", steps=[step])):
            for xb, yb in loader:
                torch.nn.functional.mse_loss(model(xb), yb).backward()
                opt.step()
                opt.zero_grad()
                break


if __name__ == "__main__":
    run(sys.argv[1], *(sys.argv[2:3] or ["adamw"]), foreach=sys.argv[3:4] == ["foreach"])
