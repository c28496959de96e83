"""Run by tests/test_ranks.py under `torchrun --nproc_per_node=4`: every every-rank scenario in one launch.

Under DDP on gloo, one monitored run after another in OUT/<name>:
- slow: rank 2 sleeps in its data loading each step, profiled on every rank;  even: the same without the sleep;
- ref / same / target: steps 0 and 1 dumped on every rank; in target, one op of rank 1 is scaled by 1.01;
- nan: rank 3's input holds a NaN at step 1; steps 0-2 dumped.
"""

import datetime
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler
from torch.utils.data.dataloader import default_collate

from ascend_tune import TrainingMonitor
from ascend_tune.testing.models import synthetic_classification

SLEEP = 0.08  # seconds rank 2 sleeps per batch in the slow run


class Net(nn.Module):
    def __init__(self, scale=1.0):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(16, 32), nn.Linear(32, 4)
        self.scale = scale

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)) * self.scale)


def train(out, rank, steps, scale=1.0, sleep=0.0, nan_at=None, **monitor):
    torch.manual_seed(0)
    model = DistributedDataParallel(Net(scale))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    data = synthetic_classification(n=8 * 4 * steps)

    def collate(batch):
        if sleep:
            time.sleep(sleep)
        return default_collate(batch)

    loader = DataLoader(data, batch_size=8, sampler=DistributedSampler(data, shuffle=False), collate_fn=collate)
    with TrainingMonitor(model, optimizer, loader, log_dir=out, quiet=True, **monitor):
        for step, (x, y) in enumerate(loader):
            if step == nan_at:
                x = x.clone()
                x[0, 0] = float("nan")
            loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()


def main(out):
    dist.init_process_group("gloo", timeout=datetime.timedelta(minutes=10))  # a loaded machine is slow, not hung
    rank = dist.get_rank()
    profile = dict(skip_first=4, wait=0, warmup=1, active=8, gzip=False)
    train(os.path.join(out, "slow"), rank, 16, sleep=SLEEP if rank == 2 else 0.0, log_every=1, warmup_steps=3,
          profile=profile)
    train(os.path.join(out, "even"), rank, 16, log_every=1, warmup_steps=3)
    dump = dict(steps=[0, 1], backend="builtin")
    train(os.path.join(out, "ref"), rank, 2, precision=dump)
    train(os.path.join(out, "same"), rank, 2, precision=dump)
    train(os.path.join(out, "target"), rank, 2, scale=1.01 if rank == 1 else 1.0, precision=dump)
    train(os.path.join(out, "nan"), rank, 3, nan_at=1 if rank == 3 else None,
          precision=dict(steps=[0, 1, 2], backend="builtin"))
    dist.barrier()
    with open(os.path.join(out, f"done_rank{rank}.json"), "w") as fh:
        json.dump({"rank": rank}, fh)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
