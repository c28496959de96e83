"""Run by tests/test_health.py under `torchrun --nproc_per_node=2`: FSDP2 (fully_shard, DTensor gradients) on gloo
with health=True, with and without clip_grad_norm_. Writes ``health_rank{R}.json``: each step's global gradient norm
as the loop computed it (the shards' squares all-reduced; clip's returned norm made whole) and the losses of an
unmonitored run of the same loop.
"""

import datetime
import os
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F
from fsdp2_train import STEPS, build, finish  # the same sharded model and optimizer (this folder is on sys.path)

from ascend_tune import TrainingMonitor


def global_norm(model) -> float:
    squares = sum(p.grad.to_local().float().pow(2).sum() for p in model.parameters())
    total = torch.as_tensor(squares).clone()
    dist.all_reduce(total)
    return float(total.sqrt())


def train(model, optimizer, clip: bool):
    gen = torch.Generator().manual_seed(1 + dist.get_rank())
    losses, norms = [], []
    for _ in range(STEPS):
        x, y = torch.randn(8, 16, generator=gen), torch.randint(0, 4, (8,), generator=gen)
        loss = F.cross_entropy(model(x), y) * 10
        loss.backward()
        norms.append(global_norm(model))
        if clip:
            total = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            norms[-1] = float(total.full_tensor() if hasattr(total, "full_tensor") else total)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return losses, norms


def main(out):
    dist.init_process_group("gloo", timeout=datetime.timedelta(minutes=10))
    rank = dist.get_rank()
    result = {"reference": train(*build(), clip=True)[0]}
    for clip in (False, True):
        model, optimizer = build()
        with TrainingMonitor(model, optimizer, log_dir=os.path.join(out, f"clip{int(clip)}"), quiet=True,
                             health=True):
            result[f"clip{int(clip)}"] = train(model, optimizer, clip)
    finish(os.path.join(out, f"health_rank{rank}.json"), result)


if __name__ == "__main__":
    main(sys.argv[1])
