"""Run by tests/test_distributed.py under `torchrun --nproc_per_node=2`: a tiny DDP model on gloo under the two
lines, for config.json per rank. ``CONFIG_CASE``: "" (the reference), "lr" (half the learning rate on every rank),
"rank1_bf16" (rank 1 alone computes under bf16 autocast)."""

import datetime
import os
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler

from ascend_tune import TrainingMonitor
from ascend_tune.testing.models import TinyMLP, synthetic_classification


def main(out):
    case = os.environ.get("CONFIG_CASE", "")
    dist.init_process_group("gloo", timeout=datetime.timedelta(minutes=10))
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DistributedDataParallel(TinyMLP())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05 if case == "lr" else 0.1)
    data = synthetic_classification(n=64)
    loader = DataLoader(data, batch_size=8, sampler=DistributedSampler(data, seed=3))
    bf16 = case == "rank1_bf16" and rank == 1
    with TrainingMonitor(model, optimizer, loader, log_dir=out, warmup_steps=1, quiet=True):
        for x, y in loader:
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    with open(os.path.join(out, f"done_rank{rank}"), "w") as fh:
        fh.write("done")
    dist.destroy_process_group()


if __name__ == "__main__":
    os.makedirs(sys.argv[1], exist_ok=True)
    main(sys.argv[1])
