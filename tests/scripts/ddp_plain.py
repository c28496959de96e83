"""Run by tests/test_launch_real.py under ``ascend-tune run -- torchrun --nproc_per_node=2``: ddp_train.py's
tiny DDP model on gloo without the two lines (nothing of ascend_tune in it). ``argv[2] == "fail"``: rank 1 exits 3."""

import datetime
import os
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler

from ascend_tune.testing.models import TinyMLP, synthetic_classification


def main(out, how):
    dist.init_process_group("gloo", timeout=datetime.timedelta(minutes=10))
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DistributedDataParallel(TinyMLP())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    data = synthetic_classification(n=128)
    loader = DataLoader(data, batch_size=8, sampler=DistributedSampler(data))
    for epoch in range(2):
        loader.sampler.set_epoch(epoch)
        for x, y in loader:
            loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    if how == "fail" and rank == 1:
        sys.exit(3)
    with open(os.path.join(out, f"done_rank{rank}"), "w") as fh:
        fh.write("done")
    dist.destroy_process_group()


if __name__ == "__main__":
    os.makedirs(sys.argv[1], exist_ok=True)
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "")
