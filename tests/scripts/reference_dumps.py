"""The tests' tiny GPT dumped by every recording task, normalised: the reference of what the builtin
engine, the replay and the shape detector write (tests/test_reference_dumps.py compares a fresh run with it).

Usage: python tests/scripts/reference_dumps.py OUT      writes OUT/<scenario>.json.gz, one per scenario
       python tests/scripts/reference_dumps.py --update  rewrites tests/data/reference_dumps/ (say why in the commit)

The files are gzipped JSON (sorted keys, one entry a line once unzipped: ``zcat FILE | less``) to keep the
fixture small; compare two versions with ``python tests/scripts/reference_dumps.py --diff OLD NEW``.

Each scenario trains the tiny GPT two steps (AdamW, one thread, seeded) under ``TrainingMonitor(precision=...)``
and dumps step 0; the second step's sequences are shorter, so the shape detector has a dynamic op to report. The
normalised form of a run folder: every file below ``dump/`` and ``shapes.csv`` as text (JSON re-serialised with
sorted keys), absolute paths replaced by ``<RUN>`` / ``<REPO>``, ``.pt`` tensors by their dtype, shape and
statistics (max, min, mean, norm in float64; the SHA-256 of their bytes for integer and bool tensors).

Two runs are compared (:func:`differences`) exactly in everything but floats: the files, every entry's name, slot,
dtype, shape, stack and file name, every string and integer. Floats are what the CPU's kernels computed (another
vector width or GEMM blocking rounds differently; a dropout mask does not change), so each is compared within a
rounding tolerance of its scenario's precision (:data:`RTOL`), relative to the scale of the tensor it describes:
``|old - new| <= rtol * max(|Max|, |Min|)`` for Max, Min and Mean, ``rtol * Norm`` for Norm. A statistic computed
differently (another slot, a missing square root, the tensor before an in-place update) differs far beyond that.
Measured here with torch's other kernels (``ATEN_CPU_CAPABILITY=avx2|default``, ``DNNL_MAX_CPU_ISA``): at most
1.5e-3 in float32 (AdamW's first update amplifies a gradient's last bits), 1.3e-2 under bfloat16 autocast.
replay.csv's error columns are rounding noise themselves: they compare within the row's own standard.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
import json
import math
import os
import re
import sys
import tempfile
from typing import Optional

import torch
from torch.utils.data import DataLoader

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)

from ascend_tune import TrainingMonitor  # noqa: E402
from ascend_tune.testing.models import TinyGPT, synthetic_tokens  # noqa: E402

FIXTURE = os.path.join(REPO, "tests", "data", "reference_dumps")
GPT = dict(dim=32, softmax_blocks=1, dropout=0.1)  # tests/conftest.GPT
# the rounding tolerance of a float, by whether the scenario trains under bfloat16 autocast (see the docstring)
RTOL = {False: 1e-2, True: 5e-2}
SCENARIOS = {
    "statistics": dict(precision=dict(task="statistics", level="mix", steps=[0]), autocast=True),
    "tensor": dict(precision=dict(task="tensor", level="L1", steps=[0])),
    "overflow": dict(precision=dict(task="overflow_check", level="L1", steps=[0]), scale=1e38),
    "replay": dict(precision=dict(task="replay", steps=[0]), autocast=True),
    "dump_replay_shapes": dict(precision=[dict(task="statistics", level="L1", steps=[0]),
                                          dict(task="replay", steps=[0])], shapes=True),
}


def train(log_dir: str, precision, autocast: bool = False, scale: float = 1.0, shapes: bool = False) -> None:
    """Two steps of the tiny GPT as tests/conftest.train_gpt runs them; the second on 6 of the 8 tokens."""
    torch.manual_seed(0)
    model = TinyGPT(**GPT)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    loader = DataLoader(synthetic_tokens(n=8), batch_size=4)
    with TrainingMonitor(model, optimizer, loader, log_dir=log_dir, quiet=True, tune=False, precision=precision,
                         shapes=shapes):
        for step, (x, y) in enumerate(loader):
            length = 8 - 2 * step
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                loss = model(x[:, :length].contiguous(), y[:, :length].contiguous()) * scale
            if scale != 1.0:
                loss = loss * 10.0  # overflows to inf
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()


def _tensor(tensor: torch.Tensor) -> dict:
    """A dumped tensor as its dtype, shape and statistics (the bytes' SHA-256 where they are exact: integers)."""
    tensor = tensor.detach()
    out = {"dtype": str(tensor.dtype), "shape": list(tensor.shape)}
    if tensor.is_floating_point() and tensor.numel():
        t = tensor.double()
        out.update(Max=t.max().item(), Min=t.min().item(), Mean=t.mean().item(), Norm=t.norm().item())
    else:
        out["sha256"] = hashlib.sha256(tensor.contiguous().view(-1).view(torch.uint8).numpy().tobytes()).hexdigest()
    return out


def _text(text: str, run: str) -> str:
    return text.replace(run, "<RUN>").replace(REPO, "<REPO>")


def normalised(run: str) -> dict:
    """{relative path: normalised content} of what the recording tasks wrote under ``run``."""
    out = {}
    for folder, _, files in os.walk(run):
        for name in sorted(files):
            path = os.path.join(folder, name)
            rel = os.path.relpath(path, run).replace(os.sep, "/")
            if not (rel.startswith("dump/") or rel == "shapes.csv"):
                continue
            if name.endswith(".pt"):
                out[rel] = _tensor(torch.load(path))
            elif name.endswith(".json"):
                with open(path, encoding="utf-8") as fh:
                    out[rel] = json.loads(_text(fh.read(), run))
            else:
                with open(path, encoding="utf-8") as fh:
                    out[rel] = _text(fh.read(), run)
    return dict(sorted(out.items()))


def rtol(scenario: str) -> float:
    """The rounding tolerance of a scenario's floats."""
    return RTOL[SCENARIOS[scenario].get("autocast", False)]


def run_scenario(name: str, tmp: str) -> dict:
    run = os.path.join(tmp, name)
    train(run, **SCENARIOS[name])
    return normalised(run)


def encode(content: dict) -> bytes:
    """The fixture's bytes: JSON with sorted keys, one indent level a line; gzip without a timestamp."""
    text = json.dumps(content, indent=1, sort_keys=True) + "\n"
    return gzip.compress(text.encode("utf-8"), mtime=0)


def load(path: str) -> dict:
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return json.load(fh)


def differences(old: dict, new: dict, rtol: float, limit: int = 10) -> list:
    """Lines naming what differs between two normalised runs beyond ``rtol`` (see the module docstring): files, then
    entries of a JSON file, then rows of a CSV file."""
    lines = [f"only in one: {k}" for k in sorted(set(old) ^ set(new))]
    for key in sorted(set(old) & set(new)):
        a, b = old[key], new[key]
        if isinstance(a, dict) and isinstance(b, dict) and "data" in a and "data" in b:  # a dump.json
            names = [n for n in dict.fromkeys([*a["data"], *b["data"]])
                     if _beyond(a["data"].get(n), b["data"].get(n), rtol)]
            rest_a, rest_b = ({k: v for k, v in d.items() if k != "data"} for d in (a, b))
            if names or _beyond(rest_a, rest_b, rtol):
                lines.append(f"{key}: {len(names)} entries differ, first {names[:3]}")
        elif isinstance(a, str) and isinstance(b, str) and key.endswith(".csv"):
            rows = _csv_rows_beyond(a, b)
            if rows:
                lines.append(f"{key}: {len(rows)} rows differ, first {rows[:3]}")
        elif _beyond(a, b, rtol):
            lines.append(f"{key}: differs")
    return lines[:limit]


def _beyond(a, b, rtol: float, scale: Optional[float] = None, key: str = "") -> bool:
    """Whether two normalised values differ: exactly, but for floats (within ``rtol`` of their tensor's scale)."""
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            return True
        if isinstance(a.get("Max"), (int, float)) and isinstance(a.get("Min"), (int, float)):
            scale = max(abs(a["Max"]), abs(a["Min"]))  # the statistics of one tensor: their scale
        return any(_beyond(a[k], b[k], rtol, scale, k) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) != len(b) or any(_beyond(x, y, rtol, scale, key) for x, y in zip(a, b))
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (a, b))
    if not numbers or not (isinstance(a, float) or isinstance(b, float)):
        return a != b
    if not (math.isfinite(a) and math.isfinite(b)):
        return not (a == b or (math.isnan(a) and math.isnan(b)))
    size = abs(a) if key == "Norm" or scale is None else scale
    return abs(a - b) > rtol * size


# replay.csv's columns that measure a call's rounding error against float64: rounding noise themselves, compared
# within the row's own standard (the "rtol" of its threshold column); every other cell exactly
ERROR_COLUMNS = ("max_abs_err", "max_rel_err", "err_ratio", "norm_err")


def _csv_rows_beyond(a: str, b: str) -> list:
    """The first cell of each row of two CSV texts that differ (error columns within the row's standard)."""
    rows_a, rows_b = list(csv.DictReader(io.StringIO(a))), list(csv.DictReader(io.StringIO(b)))
    if len(rows_a) != len(rows_b) or (rows_a and rows_a[0].keys() != rows_b[0].keys()):
        return ["(the rows or the columns)"]
    out = []
    for row_a, row_b in zip(rows_a, rows_b):
        found = re.search(r"rtol ([0-9.e+-]+)", row_a.get("threshold") or "")
        bound = float(found.group(1)) if found else 0.0
        if any(row_a[c] != row_b[c] and not (c in ERROR_COLUMNS and _within(row_a[c], row_b[c], bound))
               for c in row_a):
            out.append(next(iter(row_a.values())))
    return out


def _within(x: str, y: str, bound: float) -> bool:
    try:
        return abs(float(x) - float(y)) <= bound
    except ValueError:
        return False


def write_all(out: str) -> None:
    torch.set_num_threads(1)
    os.makedirs(out, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for name in SCENARIOS:
            with open(os.path.join(out, f"{name}.json.gz"), "wb") as fh:
                fh.write(encode(run_scenario(name, os.path.realpath(tmp))))


if __name__ == "__main__":
    if sys.argv[1] == "--diff":
        for name in SCENARIOS:
            found = differences(*(load(os.path.join(d, f"{name}.json.gz")) for d in sys.argv[2:4]),
                                rtol=rtol(name))
            print(name, "the same within rounding" if not found else "\n  " + "\n  ".join(found))
    else:
        write_all(FIXTURE if sys.argv[1:] == ["--update"] else sys.argv[1])
