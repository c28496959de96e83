"""Run by tests/test_compile.py in a fresh process: a torch.compile'd model, with or without the monitor.

argv: OUT MODE, MODE one of ``none`` (no monitor), ``dump`` (a statistics dump at step 3), ``shapes`` (the
dynamic-shape detector on its first two steps). Prints one JSON line: the losses (exact floats), how many times
dynamo compiled the model and how many times the compiled graph ran.
"""

import json
import sys

import torch
import torch.nn.functional as F
from torch import nn

out, mode = sys.argv[1], sys.argv[2]
STEPS = 6
graph_runs, compiles = [], []


def counting_backend(gm, example_inputs):
    """torch.compile's backend: run dynamo's graph as it is, counting compilations and runs of compiled code."""
    compiles.append(1)

    def run(*args):
        graph_runs.append(1)
        return gm.forward(*args)

    return run


torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 4))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
compiled = torch.compile(model, backend=counting_backend)
x, y = torch.randn(STEPS * 8, 16), torch.randint(0, 4, (STEPS * 8,))


def train():
    losses = []
    for i in range(STEPS):
        loss = F.cross_entropy(compiled(x[i * 8:(i + 1) * 8]), y[i * 8:(i + 1) * 8])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


if mode == "none":
    losses = train()
else:
    from ascend_tune import TrainingMonitor

    options = {"dump": dict(precision=dict(task="statistics", level="mix", steps=[3])),
               "shapes": dict(shapes=dict(steps=2))}[mode]
    with TrainingMonitor(compiled, optimizer, log_dir=out, quiet=True, **options):
        losses = train()
print(json.dumps({"losses": losses, "graph_runs": len(graph_runs), "compiles": len(compiles)}))
