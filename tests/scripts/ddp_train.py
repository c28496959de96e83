"""Run by tests/test_distributed.py under `torchrun --nproc_per_node=2`: a tiny DDP model on gloo.

Records every torch.distributed collective that ascend_tune calls, and whether it came inside the step loop.
"""

import datetime
import json
import os
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler

from ascend_tune import TrainingMonitor
from ascend_tune.testing.models import TinyMLP, synthetic_classification

COLLECTIVES = (
    "all_reduce", "all_gather", "all_gather_object", "broadcast", "broadcast_object_list", "barrier", "reduce",
    "gather", "gather_object", "scatter", "reduce_scatter", "all_to_all",
)
state = {"in_loop": False}
calls = []


def spy(name, original):
    def wrapped(*args, **kwargs):
        if sys._getframe(1).f_globals.get("__name__", "").startswith("ascend_tune"):
            calls.append({"collective": name, "in_loop": state["in_loop"]})
        return original(*args, **kwargs)

    return wrapped


def main(out):
    dist.init_process_group("gloo", timeout=datetime.timedelta(minutes=10))  # a loaded machine is slow, not hung
    rank = dist.get_rank()
    for name in COLLECTIVES:
        setattr(dist, name, spy(name, getattr(dist, name)))
    torch.manual_seed(0)
    model = DistributedDataParallel(TinyMLP())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    data = synthetic_classification(n=128)
    loader = DataLoader(data, batch_size=8, sampler=DistributedSampler(data))
    with TrainingMonitor(model, optimizer, loader, log_dir=out, warmup_steps=2, quiet=True):
        state["in_loop"] = True
        for _epoch in range(2):
            for x, y in loader:
                loss = F.cross_entropy(model(x), y)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
        state["in_loop"] = False
    with open(os.path.join(out, f"calls_rank{rank}.json"), "w") as fh:
        json.dump({"calls": calls, "epoch": loader.sampler.epoch}, fh)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
