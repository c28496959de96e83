"""Synthetic multi-rank statistics dumps (msprobe's layout, ``dump_path/step{N}/rank{R}/dump.json``) for tests and
``benchmarks/multirank_compare.py``: a chain of ``ops`` calls per rank, an ``all_reduce`` every ``every`` ops.

Each call's input is the previous call's output; an all-reduce's output is the same on every rank (the mean of the
ranks' inputs). A perturbation ``(step, rank, index, factor)`` scales that call's output on that rank; it flows down
the chain, and from the next all-reduce on into every rank, as a real fault does. No torch: plain JSON.
"""

from __future__ import annotations

import json
import os
from typing import Optional

APIS = ("Functional.linear", "Torch.relu", "Tensor.__add__", "Functional.layer_norm", "Torch.matmul")
COLLECTIVE = "Distributed.all_reduce"


def _tensor(value: float, shape: tuple = (64, 128)) -> dict:
    return {"type": "torch.Tensor", "dtype": "torch.float32", "shape": list(shape), "Max": value * 2.5,
            "Min": -value * 1.5, "Mean": value * 0.01, "Norm": value * 90.0, "requires_grad": True}


def chain_values(ranks: int, ops: int, every: int, faults: dict) -> list:
    """Per rank, the output value of each call (``faults``: ``{(rank, index): factor}``)."""
    values = [[0.0] * ops for _ in range(ranks)]
    current = [1.0 + 0.001 * r for r in range(ranks)]
    for index in range(ops):
        if every and index % every == every - 1:  # an all-reduce: every rank gets the mean
            mean = sum(current) / ranks
            current = [mean] * ranks
        else:
            current = [v * 1.0001 + 0.01 for v in current]
        for rank in range(ranks):
            current[rank] *= faults.get((rank, index), 1.0)
            values[rank][index] = current[rank]
    return values


def write_dumps(root: str, ranks: int, steps: int = 1, ops: int = 1000, every: int = 50,
                faults: Optional[dict] = None) -> list:
    """Write a statistics dump of every step and rank under ``root``; returns the dump.json paths.

    ``faults``: ``{(step, rank, index): factor}``; a fault at step N also changes every later step's start (the
    parameters it updated), on every rank.
    """
    faults = dict(faults or {})
    paths = []
    for step in range(steps):
        carried = any(s < step for s, _, _ in faults)
        here = {(r, i): f for (s, r, i), f in faults.items() if s == step}
        values = chain_values(ranks, ops, every, here)
        for rank in range(ranks):
            data, counts, previous = {}, {}, 1.0 + 0.001 * rank + (0.5 if carried else 0.0)
            for index in range(ops):
                api = COLLECTIVE if every and index % every == every - 1 else APIS[index % len(APIS)]
                n = counts.get(api, 0)
                counts[api] = n + 1
                out = values[rank][index] + (0.5 if carried else 0.0)
                data[f"{api}.{n}.forward"] = {"input_args": [_tensor(previous)], "input_kwargs": {},
                                              "output": [_tensor(out)]}
                previous = out
            folder = os.path.join(root, f"step{step}", f"rank{rank}")
            os.makedirs(folder, exist_ok=True)
            path = os.path.join(folder, "dump.json")
            with open(path, "w", encoding="utf-8") as fh:
                json.dump({"task": "statistics", "level": "L1", "framework": "pytorch", "dump_data_dir": None,
                           "data": data}, fh)
            paths.append(path)
    return paths
