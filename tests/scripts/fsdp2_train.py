"""Run by tests/test_distributed.py under `torchrun --nproc_per_node=2`: FSDP2 (fully_shard, DTensor parameters)
on gloo, the same training three times: without the monitor, with a statistics dump of step 1, and with tune=True
(the optimizer swap on DTensor parameters). Writes ``result_rank{R}.json`` with the losses of each run.
"""

import datetime
import json
import os
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from ascend_tune import TrainingMonitor
from ascend_tune.testing.torch_features import find_fully_shard

fully_shard = find_fully_shard()  # torch.distributed.fsdp (torch 2.6) or torch.distributed._composable.fsdp (2.3)

STEPS = 4


def build():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 4))
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer)
    fully_shard(model)
    return model, torch.optim.AdamW(model.parameters(), lr=1e-2)


def train(model, optimizer):
    gen = torch.Generator().manual_seed(1 + dist.get_rank())  # each rank its own data, as a sampler gives it
    losses = []
    for _ in range(STEPS):
        x, y = torch.randn(8, 16, generator=gen), torch.randint(0, 4, (8,), generator=gen)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)  # partial-placement DTensors in the dump
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return losses


def main(out):
    dist.init_process_group("gloo", timeout=datetime.timedelta(minutes=10))  # a loaded machine is slow, not hung
    rank = dist.get_rank()
    result = {"reference": train(*build())}
    model, optimizer = build()
    with TrainingMonitor(model, optimizer, log_dir=os.path.join(out, "dumped"), quiet=True,
                         precision=dict(task="statistics", level="mix", steps=[1])):
        result["dumped"] = train(model, optimizer)
    model, optimizer = build()
    result["param_type"] = type(next(model.parameters())).__name__
    with TrainingMonitor(model, optimizer, log_dir=os.path.join(out, "tuned"), quiet=True, tune=True):
        result["tuned_flags"] = {k: optimizer.param_groups[0][k] for k in ("foreach", "fused")}
        result["tuned"] = train(model, optimizer)
    finish(os.path.join(out, f"result_rank{rank}.json"), result)


def finish(path: str, result: dict) -> None:
    """Write this rank's result, leave the group with the others, and exit without the interpreter's teardown
    (gloo's teardown at interpreter exit sometimes aborts, with or without ascend_tune)."""
    with open(path, "w") as fh:
        json.dump(result, fh)
    dist.barrier()
    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1])
