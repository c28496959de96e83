"""The tests' tiny GPT dumped by every recording task, normalised: the byte-for-byte reference of what the builtin
engine, the replay and the shape detector write (tests/test_reference_dumps.py compares a fresh run with it).

Usage: python tests/scripts/reference_dumps.py OUT      writes OUT/<scenario>.json.gz, one per scenario
       python tests/scripts/reference_dumps.py --update  rewrites tests/data/reference_dumps/ (say why in the commit)

The files are gzipped JSON (sorted keys, one entry a line once unzipped: ``zcat FILE | less``) to keep the
fixture small; compare two versions with ``python tests/scripts/reference_dumps.py --diff OLD NEW``.

Each scenario trains the tiny GPT two steps (AdamW, one thread, seeded) under ``TrainingMonitor(precision=...)``
and dumps step 0; the second step's sequences are shorter, so the shape detector has a dynamic op to report. The
normalised form of a run folder: every file below ``dump/`` and ``shapes.csv`` as text (JSON re-serialised with
sorted keys), absolute paths replaced by ``<RUN>`` / ``<REPO>``, ``.pt`` tensors by their dtype, shape and the
SHA-256 of their bytes (a ``.pt`` zip's own bytes carry its file name).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import sys
import tempfile

import torch
from torch.utils.data import DataLoader

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)

from ascend_tune import TrainingMonitor  # noqa: E402
from ascend_tune.testing.models import TinyGPT, synthetic_tokens  # noqa: E402

FIXTURE = os.path.join(REPO, "tests", "data", "reference_dumps")
GPT = dict(dim=32, softmax_blocks=1, dropout=0.1)  # tests/conftest.GPT
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
                tensor = torch.load(path)
                data = tensor.detach().contiguous().view(-1).view(torch.uint8).numpy().tobytes()
                out[rel] = f"{tensor.dtype} {list(tensor.shape)} sha256={hashlib.sha256(data).hexdigest()}"
            elif name.endswith(".json"):
                with open(path, encoding="utf-8") as fh:
                    out[rel] = json.loads(_text(fh.read(), run))
            else:
                with open(path, encoding="utf-8") as fh:
                    out[rel] = _text(fh.read(), run)
    return dict(sorted(out.items()))


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


def differences(old: dict, new: dict, limit: int = 10) -> list:
    """Lines naming what differs between two normalised runs: files, then entries of a JSON file."""
    lines = [f"only in one: {k}" for k in sorted(set(old) ^ set(new))]
    for key in sorted(set(old) & set(new)):
        a, b = old[key], new[key]
        if a == b:
            continue
        if isinstance(a, dict) and isinstance(b, dict):
            data_a, data_b = a.get("data", a), b.get("data", b)
            names = [n for n in dict.fromkeys([*data_a, *data_b]) if data_a.get(n) != data_b.get(n)]
            lines.append(f"{key}: {len(names)} entries differ, first {names[:3]}")
        else:
            lines.append(f"{key}: differs")
    return lines[:limit]


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
            found = differences(*(load(os.path.join(d, f"{name}.json.gz")) for d in sys.argv[2:4]))
            print(name, "identical" if not found else "\n  " + "\n  ".join(found))
    else:
        write_all(FIXTURE if sys.argv[1:] == ["--update"] else sys.argv[1])
