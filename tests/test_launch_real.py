"""``ascend-tune run`` around training scripts it was never written into: nanoGPT, dcgan, torchrun, an HF Trainer.

Each runs tiny (a few iterations of a tiny config, data made here) and is compared with the same script run bare and
with the two lines written into a copy.

The public scripts run exactly as their authors published them, read at test time (launch_helpers.copy_thirdparty)
from a git checkout of their repository under ``$ASCEND_TUNE_MIRRORS`` (default /work/.mirror, one
``owner+name/repo`` git directory each); none is kept in this project. A test whose checkout is absent skips, saying
which repository to fetch; when the pinned commit is not in the checkout, its HEAD is used.

- nanoGPT: https://github.com/karpathy/nanoGPT (MIT) at 3adf61e154c3fe3fca428ad6bc3818b27a3b8291, its train.py,
  model.py and configurator.py;
- dcgan: https://github.com/pytorch/examples (BSD-3-Clause) at 77f55b912142e11fcfdf5b530231fb9c52f181e8, its
  dcgan/main.py.

dcgan/main.py imports torchvision, which cannot be installed beside this project's torch: the test puts a stand-in
on the path that provides only what ``--dataset fake`` touches (``datasets.FakeData``, ``transforms.ToTensor``,
``utils.save_image``), made in the test itself.

The Hugging Face test runs tests/scripts/hf_trainer_clm.py, ours, in the shape of transformers'
``examples/pytorch/language-modeling/run_clm.py`` (that repository is too large to fetch here): offline, a GPT-2
config, a tokenizer trained in the test with ``tokenizers`` and a local text file (``HF_HUB_OFFLINE=1``).
"""

from __future__ import annotations

import json
import os
import pickle
import re
import sys

import numpy as np
import pytest
from conftest import SEED_LINE, read_jsonl, read_log
from launch_helpers import bare, copy_thirdparty, launch, our_lines

from ascend_tune.testing.torch_features import transformers_missing

NANOGPT_ARGS = [
    "--device=cpu", "--compile=False", "--dtype=float32", "--dataset=tiny", "--n_layer=2", "--n_head=2",
    "--n_embd=32", "--block_size=16", "--batch_size=4", "--gradient_accumulation_steps=2", "--max_iters=4",
    "--eval_interval=1000", "--eval_iters=2", "--log_interval=1", "--always_save_checkpoint=False",
]
TWO_LINES = "with TrainingMonitor(model, optimizer, log_dir={log_dir!r}, quiet=True):\n"


def nanogpt(tmp_path) -> str:
    """A copy of nanoGPT with a tiny token dataset in data/tiny (64 symbols, as its shakespeare_char prepare.py)."""
    root = copy_thirdparty("nanogpt", tmp_path)
    data = os.path.join(root, "data", "tiny")
    os.makedirs(data)
    rng = np.random.default_rng(0)
    for split, n in (("train", 4000), ("val", 800)):
        rng.integers(0, 64, n).astype(np.uint16).tofile(os.path.join(data, f"{split}.bin"))
    with open(os.path.join(data, "meta.pkl"), "wb") as fh:
        pickle.dump({"vocab_size": 64}, fh)
    return root


def with_two_lines(root: str, log_dir: str) -> str:
    """nanoGPT's train.py with the two lines written in (the loop indented under the block), as train_2l.py."""
    lines = open(os.path.join(root, "train.py"), encoding="utf-8").read().splitlines(keepends=True)
    start = lines.index("while True:\n")
    end = lines.index("if ddp:\n", start)
    body = ["from ascend_tune import TrainingMonitor\n", *lines[:start], TWO_LINES.format(log_dir=log_dir)]
    body += ["    " + line if line.strip() else line for line in lines[start:end]] + lines[end:]
    path = os.path.join(root, "train_2l.py")
    with open(path, "w", encoding="utf-8") as fh:
        fh.writelines(body)
    return path


def timeless(stdout: str) -> list:
    """nanoGPT's stdout without its wall times (``time 12.3ms, mfu -100.00%``)."""
    return [re.sub(r"time [\d.]+ms, mfu [-\d.]+%", "time _", line) for line in stdout.splitlines()]


def losses(log_dir) -> list:
    """``(step, loss)`` of each log.txt line."""
    return [(int(m.group(1)), float(m.group(2))) for m in map(SEED_LINE.search, read_log(log_dir))]


def test_nanogpt_unmodified_under_the_launcher_logs_each_iteration_as_the_two_lines_do(tmp_path):
    root = nanogpt(tmp_path)
    run = tmp_path / "run"
    proc = launch(["--log-dir", str(run), "--dump=steps=0,level=mix"], [sys.executable, "train.py", *NANOGPT_ARGS],
                  cwd=root)
    assert proc.returncode == 0, proc.stderr[-3000:]
    plain = bare([sys.executable, "train.py", *NANOGPT_ARGS], cwd=root)
    assert plain.returncode == 0, plain.stderr[-3000:]
    assert timeless(proc.stdout) == timeless(plain.stdout)  # the script's own output unchanged
    two = tmp_path / "two"
    twin = bare([sys.executable, with_two_lines(root, str(two)), *NANOGPT_ARGS], cwd=root)
    assert twin.returncode == 0, twin.stderr[-3000:]

    # one line per iteration (iterations 0..max_iters), the same losses as with the two lines
    assert len(read_log(run)) == 5
    assert losses(run) == losses(two)
    assert [r["loss"] for r in read_jsonl(run / "metrics.jsonl") if "step" in r and "loss" in r] == \
        [r["loss"] for r in read_jsonl(two / "metrics.jsonl") if "step" in r and "loss" in r]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == 5 and summary["interrupted_by"] is None
    assert summary["steps_from"] == {"kind": "optimizer", "optimizer": "AdamW", "passed": False}
    assert any("monitoring train.py (model GPT" in line for line in our_lines(proc.stderr))

    # config.json as nanoGPT configured it: its AdamW's two groups, 2 micro-batches a step, clipping at 1.0
    config = json.loads((run / "config.json").read_text())
    groups = config["optimizer"]["param_groups"]
    assert config["optimizer"]["class"] == "AdamW" and [g["weight_decay"] for g in groups] == [0.1, 0.0]
    assert {tuple(g["betas"]) for g in groups} == {(0.9, 0.95)} and config["schedulers"] == []  # its lr by hand
    assert config["accumulation"]["backwards_per_step"] == [2, 2, 2]
    assert config["clipping"] == {"clip_grad_norm_": {"max_norm": 1.0}}
    assert config["randomness"]["torch_initial_seed"] == 1337
    compared = bare([sys.executable, "-m", "ascend_tune", "compare-config", str(two), str(run), "--json"], cwd=root)
    # the same experiment under the launcher as with the two lines (it opens its block inside the first forward,
    # whose arguments the recording still sees)
    differences = json.loads(compared.stdout)["differences"]
    assert compared.returncode == 0 and not [d for d in differences if d["severity"] == "error"], compared.stdout

    # the step-0 dump names the model's own modules (GPT is the root, left out as msprobe does)
    dump = json.loads((run / "dump" / "step0" / "rank0" / "dump.json").read_text())
    modules = [name for name in dump["data"] if name.startswith("Module.")]
    assert modules and all(name.startswith(("Module.transformer.", "Module.lm_head.")) for name in modules)
    assert "Module.transformer.wte.Embedding.forward.0" in modules
    assert not (run / "dump" / "step1").exists()


DDP_PLAIN = os.path.join(os.path.dirname(__file__), "scripts", "ddp_plain.py")
ATTEMPTS = 3


def torchrun_command(*args: str) -> list:
    exe = os.path.join(os.path.dirname(sys.executable), "torchrun")
    prefix = [exe] if os.path.exists(exe) else [sys.executable, "-m", "torch.distributed.run"]
    return [*prefix, "--standalone", "--nproc_per_node=2", "--max-restarts=0", "--monitor-interval=0.5", *args]


def launched_torchrun(tmp_path, how: str = "") -> tuple:
    """``(process, run folder, out folder)`` of ``ascend-tune run -- torchrun ... ddp_plain.py``; a run that torch's
    gloo teardown aborted after both ranks finished is run again (tests/test_distributed.py says why)."""
    for attempt in range(ATTEMPTS):
        run, out = tmp_path / f"run{attempt}", tmp_path / f"out{attempt}"
        proc = launch(["--log-dir", str(run), "--warmup-steps", "2", "--quiet"],
                      torchrun_command(DDP_PLAIN, str(out), how), cwd=tmp_path, timeout=900, GLOO_SOCKET_IFNAME="lo")
        done = all((out / f"done_rank{rank}").exists() for rank in (0, 1))
        aborted = "terminate called without an active exception" in proc.stderr or "SIGABRT" in proc.stderr
        if proc.returncode == 0 or not (done and aborted):
            break
    return proc, run, out


def test_torchrun_under_the_launcher_monitors_every_worker_with_its_rank(tmp_path):
    proc, run, _ = launched_torchrun(tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert len(read_log(run)) == 16  # rank 0's text log alone: 2 epochs x 8 batches of its half
    assert sorted(p.name for p in run.iterdir() if p.name.startswith("rank")) == ["rank0", "rank1"]
    for rank in (0, 1):
        records = [r for r in read_jsonl(run / f"rank{rank}" / "metrics.jsonl") if "step" in r]
        assert [r["step"] for r in records] == list(range(16)) and {r["rank"] for r in records} == {rank}
    summary = json.loads((run / "summary.json").read_text())
    assert [r["rank"] for r in summary["ranks"]["per_rank"]] == [0, 1]  # gathered before the group was destroyed
    assert summary["interrupted_by"] is None


def test_torchrun_exit_status_is_kept(tmp_path):
    proc, run, _ = launched_torchrun(tmp_path, "fail")
    plain = bare(torchrun_command(DDP_PLAIN, str(tmp_path / "bare"), "fail"), cwd=tmp_path, timeout=900,
                 GLOO_SOCKET_IFNAME="lo")
    assert proc.returncode == plain.returncode == 1, proc.stderr[-3000:]
    assert json.loads((run / "summary.json").read_text())["steps"] == 16  # rank 0 trained to the end


TORCHVISION = {  # the stand-in for what dcgan/main.py touches with --dataset fake (the module's docstring)
    "__init__.py": "from . import datasets, transforms, utils  # noqa: F401\n",
    "datasets.py": (
        "import torch\n\n\n"
        "class FakeData(torch.utils.data.Dataset):\n"
        "    def __init__(self, size=1000, image_size=(3, 224, 224), num_classes=10, transform=None,\n"
        "                 target_transform=None, random_offset=0):\n"
        "        self.size, self.image_size, self.num_classes = size, image_size, num_classes\n"
        "        self.transform, self.random_offset = transform, random_offset\n\n"
        "    def __len__(self):\n"
        "        return self.size\n\n"
        "    def __getitem__(self, index):\n"
        "        generator = torch.Generator().manual_seed(index + self.random_offset)\n"
        "        image = torch.rand(*self.image_size, generator=generator)\n"
        "        target = int(torch.randint(0, self.num_classes, (1,), generator=generator))\n"
        "        return (self.transform(image) if self.transform else image), target\n"
    ),
    "transforms.py": "class ToTensor:\n    def __call__(self, image):\n        return image\n",
    "utils.py": "def save_image(tensor, fp, **kwargs):\n    open(fp, 'wb').close()\n",
}
DCGAN_ARGS = ["--dataset", "fake", "--workers", "0", "--batchSize", "200", "--niter", "1", "--ngf", "4", "--ndf", "4",
              "--nz", "8", "--manualSeed", "1"]
PRINTED = re.compile(r"Loss_D: ([\d.]+) Loss_G: ([\d.]+)")


def dcgan(tmp_path) -> tuple:
    """``(folder of an unmodified dcgan/main.py, PYTHONPATH with the torchvision stand-in)``."""
    root = copy_thirdparty("dcgan", tmp_path)
    package = tmp_path / "standin" / "torchvision"
    package.mkdir(parents=True)
    for name, text in TORCHVISION.items():
        (package / name).write_text(text)
    return root, os.pathsep.join([str(tmp_path / "standin"), os.path.dirname(os.path.dirname(__file__))])


def test_dcgan_two_optimizers_each_loss_apart(tmp_path):
    root, path = dcgan(tmp_path)
    run = tmp_path / "run"
    proc = launch(["--log-dir", str(run), "--quiet"], [sys.executable, "main.py", *DCGAN_ARGS, "--outf", "out"],
                  cwd=root, PYTHONPATH=path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    printed = [(float(d), float(g)) for d, g in PRINTED.findall(proc.stdout)]
    assert len(printed) == 5
    # none passed, two stepping: a step is one batch; each optimizer's loss by its model's class; log.txt the first's
    records = [r for r in read_jsonl(run / "metrics.jsonl") if "step" in r]
    assert [r["losses"] for r in records] == [{"Discriminator": pytest.approx(d, abs=6e-5),
                                               "Generator": pytest.approx(g, abs=6e-5)} for d, g in printed]
    assert [loss for _, loss in losses(run)] == [d for d, _ in printed]

    # the two lines with the optimizer passed, as a new user writes them: its loss is Loss_D, never a mixture
    source = open(os.path.join(root, "main.py"), encoding="utf-8").read().splitlines(keepends=True)
    start = source.index("for epoch in range(opt.niter):\n")
    two = tmp_path / "two"
    block = f"with TrainingMonitor(netD, optimizerD, dataloader, log_dir={str(two)!r}, quiet=True):\n"
    body = [source[0], "from ascend_tune import TrainingMonitor\n", *source[1:start], block]  # after __future__
    body += ["    " + line if line.strip() else line for line in source[start:]]
    (tmp_path / "dcgan" / "main_2l.py").write_text("".join(body))
    twin = bare([sys.executable, "main_2l.py", *DCGAN_ARGS, "--outf", "out2"], cwd=root, PYTHONPATH=path)
    assert twin.returncode == 0, twin.stderr[-3000:]
    printed = [(float(d), float(g)) for d, g in PRINTED.findall(twin.stdout)]
    assert [loss for _, loss in losses(two)] == [d for d, _ in printed]


def clm_inputs(tmp_path) -> list:
    """hf_trainer_clm.py's arguments for a tiny GPT-2 trained from scratch offline: a config, a tokenizer trained here
    (word level), a text file; 4 optimizer steps of 2 micro-batches each."""
    tokenizers = pytest.importorskip("tokenizers")
    transformers = pytest.importorskip("transformers")
    words = "the cat sat on a mat while one dog ran after it and then both slept in the warm sun".split()
    rng = np.random.default_rng(0)
    lines = [" ".join(rng.choice(words, 12)) for _ in range(200)]
    (tmp_path / "train.txt").write_text("\n".join(lines) + "\n")
    model = tokenizers.models.WordLevel({w: i for i, w in enumerate(["[UNK]", *sorted(set(words))])}, unk_token="[UNK]")
    tok = tokenizers.Tokenizer(model)
    tok.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", eos_token="[UNK]")
    fast.save_pretrained(str(tmp_path / "tok"))
    transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, n_positions=32, vocab_size=len(fast), resid_pdrop=0.0,
                            embd_pdrop=0.0, attn_pdrop=0.0).save_pretrained(str(tmp_path / "cfg"))
    return ["--config_name", str(tmp_path / "cfg"), "--tokenizer_name", str(tmp_path / "tok"), "--train_file",
            str(tmp_path / "train.txt"), "--do_train", "--block_size", "16", "--per_device_train_batch_size", "2",
            "--gradient_accumulation_steps", "2", "--max_steps", "4", "--logging_steps", "1", "--use_cpu",
            "--report_to", "none", "--save_strategy", "no", "--seed", "0", "--disable_tqdm", "true",
            "--dataloader_num_workers", "0"]


def test_hf_trainer_script_one_line_per_optimizer_step_with_the_trainers_losses(tmp_path):
    reason = transformers_missing()
    if reason:
        pytest.skip(reason)
    args = clm_inputs(tmp_path)
    script = os.path.join(os.path.dirname(__file__), "scripts", "hf_trainer_clm.py")
    run, out = tmp_path / "run", tmp_path / "out"
    offline = dict(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_HOME=str(tmp_path / "hf"))
    proc = launch(["--log-dir", str(run), "--quiet"], [sys.executable, script, *args, "--output_dir", str(out)],
                  cwd=tmp_path, **offline)
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    state = json.loads((out / "trainer_state.json").read_text())
    logged = [h["loss"] for h in state["log_history"] if "loss" in h]
    assert len(logged) == 4 and len(read_log(run)) == 4  # one line per optimizer step, not per micro-batch
    records = [r for r in read_jsonl(run / "metrics.jsonl") if "step" in r]
    assert [r["loss"] for r in records] == pytest.approx(logged, rel=1e-5)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == 4 and summary["steps_from"]["kind"] == "optimizer"
