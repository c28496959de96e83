"""Same experiment? Each monitored run writes config.json with no code from the user, and `ascend-tune
compare-config` names the settings two runs differ in: one thing changed, one to three `error` differences."""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import subprocess
import sys
import zipfile

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from ascend_tune import TrainingMonitor
from ascend_tune.cli import main


def warm_up(step, steps=2):
    return min(1.0, (step + 1) / steps)


def train(log_dir, lr=1e-3, wd=0.01, beta1=0.9, seed=0, shuffle=7, bf16=False, clip=1.0, matmul=None, accum=1,
          warmup=None, **monitor):
    """Six batches of a small MLP with AdamW, shuffled by its own generator, clipped, under the two lines;
    ``accum`` batches a step, an LR warm-up of ``warmup`` steps (a LambdaLR of a partial, as the HF Trainer's)."""
    before = torch.get_float32_matmul_precision()
    try:
        if matmul:
            torch.set_float32_matmul_precision(matmul)
        torch.manual_seed(seed)
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Dropout(0.1),
                                    torch.nn.Linear(16, 2))
        optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=wd, betas=(beta1, 0.999))
        data = TensorDataset(torch.randn(48, 8, generator=torch.Generator().manual_seed(3)),
                             torch.randint(0, 2, (48,), generator=torch.Generator().manual_seed(4)))
        loader = DataLoader(data, batch_size=8, shuffle=True, generator=torch.Generator().manual_seed(shuffle))
        if warmup:
            schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, functools.partial(warm_up, steps=warmup))
        with TrainingMonitor(model, optimizer, loader, log_dir=log_dir, quiet=True, tune=False, **monitor):
            for i, (x, y) in enumerate(loader):
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                    loss = torch.nn.functional.cross_entropy(model(x), y)
                (loss / accum).backward()
                if (i + 1) % accum:
                    continue
                torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
                optimizer.step()
                optimizer.zero_grad()
                if warmup:
                    schedule.step()
    finally:
        torch.set_float32_matmul_precision(before)
    return log_dir


def compare(capsys, base, target):
    code = main(["compare-config", str(base), str(target), "--json"])
    return code, json.loads(capsys.readouterr().out)["differences"]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    return train(tmp_path_factory.mktemp("reference") / "run")


def test_the_run_records_what_changes_its_numbers(reference):
    config = json.loads((reference / "config.json").read_text())
    group = config["optimizer"]["param_groups"][0]
    assert config["optimizer"]["class"] == "AdamW" and group["lr"] == 1e-3 and group["betas"] == [0.9, 0.999]
    assert group["weight_decay"] == 0.01 and group["parameters"] == 4 and group["numel"] == 8 * 16 + 16 + 16 * 2 + 2
    assert config["clipping"] == {"clip_grad_norm_": {"max_norm": 1.0}}
    assert config["precision"]["autocast"]["cpu"] == {"enabled": False}
    assert config["precision"]["float32_matmul_precision"] == "highest"
    assert config["model"]["dropout"] == {"2": 0.1} and config["model"]["training"] == [True]
    assert set(config["weights"]["per_parameter"]) == {"0.weight", "0.bias", "3.weight", "3.bias"}
    assert config["data"]["batch_size"] == 8 and config["data"]["shuffle"] and config["data"]["generator_seed"] == 7
    assert config["data"]["first_forwards"][0]["0"]["shape"] == [8, 8]
    assert config["randomness"]["torch_initial_seed"] == 0 and config["accumulation"]["backwards_per_step"] == [1] * 3
    assert config["schedulers"] == []
    assert config["environment"]["versions"]["torch"] == torch.__version__
    summary = json.loads((reference / "summary.json").read_text())
    assert summary["experiment"]["config_json"] == str(reference / "config.json")


def test_a_rerun_of_the_same_script_is_the_same_experiment(reference, tmp_path, capsys):
    code, differences = compare(capsys, reference, train(tmp_path / "rerun"))
    assert code == 0 and [d for d in differences if d["severity"] != "info"] == []


@pytest.mark.parametrize("change, keys", [
    (dict(lr=6.6e-4), {"optimizer.param_groups.0.lr"}),
    (dict(wd=0.1), {"optimizer.param_groups.0.weight_decay"}),
    (dict(beta1=0.8), {"optimizer.param_groups.0.betas"}),
    (dict(seed=1), {"randomness.torch_initial_seed", "weights"}),
    (dict(shuffle=8), {"data.generator_seed", "data.first_forwards"}),
    (dict(bf16=True), {"precision.autocast.cpu.enabled", "precision.autocast.cpu.dtype"}),
    (dict(clip=0.5), {"clipping.clip_grad_norm_.max_norm"}),
    (dict(matmul="high"), {"precision.float32_matmul_precision", "precision.cuda_matmul_allow_tf32"}),
], ids=["lr", "weight_decay", "betas", "init_seed", "shuffle_seed", "autocast", "clip", "matmul_precision"])
def test_one_change_is_named_by_one_to_three_errors(reference, tmp_path, capsys, change, keys):
    code, differences = compare(capsys, reference, train(tmp_path / "run", **change))
    errors = {d["key"] for d in differences if d["severity"] == "error"}
    assert code == 1 and errors == keys and 1 <= len(errors) <= 3, differences


def test_accumulation_and_the_lr_schedule_are_settings(reference, tmp_path, capsys):
    code, differences = compare(capsys, reference, train(tmp_path / "accum", accum=2))
    errors = {d["key"]: d for d in differences if d["severity"] == "error"}
    # the first step now holds two batches, so its first forwards are two, not one
    assert code == 1 and set(errors) == {"accumulation.backwards_per_step", "data.first_forwards"}, differences
    assert errors["accumulation.backwards_per_step"]["target"] == [2, 2, 2]
    warm2 = train(tmp_path / "warm2", warmup=2)
    config = json.loads((warm2 / "config.json").read_text())
    assert config["schedulers"] == [{"class": "LambdaLR", "base_lrs": [1e-3], "lr_lambdas": [
        {"function": {"function": "warm_up", "code": config["schedulers"][0]["lr_lambdas"][0]["function"]["code"]},
         "args": [], "keywords": {"steps": 2}}]}]
    code, differences = compare(capsys, warm2, train(tmp_path / "warm3", warmup=3))
    # the group's lr at the block's start is the schedule's first (1/2 or 1/3 of 1e-3); its initial_lr is the same
    assert code == 1 and [d["key"] for d in differences if d["severity"] == "error"] == [
        "optimizer.param_groups.0.lr", "schedulers.0.lr_lambdas.0.keywords.steps"]
    code, differences = compare(capsys, reference, warm2)  # a schedule on one side only: itself and its first lr
    assert code == 1 and [(d["key"], d["target"]) for d in differences if d["severity"] == "error"] == [
        ("optimizer.param_groups.0.lr", 5e-4), ("schedulers", ["LambdaLR"])]


def test_numpy_and_python_seeds_show_as_their_states(reference, tmp_path, capsys):
    import random

    import numpy

    numpy_state, python_state = numpy.random.get_state(), random.getstate()
    try:
        numpy.random.seed(1)
        random.seed(1)
        one = train(tmp_path / "one")
        numpy.random.seed(1)
        random.seed(1)
        again = train(tmp_path / "again")
        numpy.random.seed(2)
        random.seed(2)
        two = train(tmp_path / "two")
    finally:
        numpy.random.set_state(numpy_state)
        random.setstate(python_state)
    code, differences = compare(capsys, one, again)
    assert code == 0 and not [d for d in differences if d["key"].startswith("randomness")]
    # shown, never counted: an unseeded process draws its own state, and only a run that draws from them changes
    code, differences = compare(capsys, one, two)
    assert code == 0 and {d["key"]: d["severity"] for d in differences if d["key"].startswith("randomness")} == {
        "randomness.numpy_random_state": "info", "randomness.python_random_state": "info"}


def test_a_closure_optimizer_steps_on_one_loss(tmp_path):
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.LBFGS(model.parameters(), max_iter=4)
    x = torch.randn(8, 4, generator=torch.Generator().manual_seed(0))

    def closure():
        optimizer.zero_grad()
        loss = model(x).pow(2).mean()
        loss.backward()
        return loss

    with TrainingMonitor(model, optimizer, log_dir=tmp_path, quiet=True, tune=False):
        for _ in range(4):
            optimizer.step(closure)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["accumulation"] == {"backwards_per_step": [1, 1, 1]}  # not its 4 evaluations a step


def test_a_variable_under_each_devices_name_is_one_setting(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("NCCL_DETERMINISTIC", "1")
    nccl = train(tmp_path / "nccl")
    monkeypatch.delenv("NCCL_DETERMINISTIC")
    monkeypatch.setenv("HCCL_DETERMINISTIC", "1")
    hccl = train(tmp_path / "hccl")
    code, differences = compare(capsys, nccl, hccl)
    assert code == 0 and [d["severity"] for d in differences if "DETERMINISTIC" in d["key"]] == ["info"]
    monkeypatch.delenv("HCCL_DETERMINISTIC")
    neither = train(tmp_path / "neither")
    code, differences = compare(capsys, nccl, neither)
    named = [d for d in differences if "NCCL_DETERMINISTIC" in d["key"]]
    assert named and named[0]["severity"] == "warning" and named[0]["base"] == {"NCCL_DETERMINISTIC": "1"}


def test_the_page_and_compare_loss_point_at_the_setting_first(reference, tmp_path, capsys):
    run = train(tmp_path / "lr", lr=6.6e-4)
    main(["compare-loss", str(reference), str(run)])
    assert "next: NOT the same experiment: optimizer.param_groups.0.lr differs" in capsys.readouterr().out
    main(["report", str(run), "--baseline", str(reference), "-o", str(tmp_path / "page.html")])
    md = (tmp_path / "page.md").read_text()
    assert md.index("## Same experiment?") < md.index("## Verdict")
    assert "error: optimizer.param_groups.0.lr: 0.001 in the reference, 0.00066 in this run" in md
    assert "**Next:** the runs are not the same experiment (optimizer.param_groups.0.lr differs)" in md


def test_an_autocast_port_is_its_precision_on_the_page_not_another_experiment(reference, tmp_path, capsys):
    run = train(tmp_path / "bf16", bf16=True)
    main(["report", str(run), "--baseline", str(reference), "-o", str(tmp_path / "page.html")])
    md = (tmp_path / "page.md").read_text()
    assert "the same settings but the precision this run computes in (autocast)" in md
    assert "not the same experiment" not in md


def test_recording_can_be_turned_off_and_an_older_run_says_how_to_get_one(tmp_path, capsys):
    off = train(tmp_path / "off", experiment=False)
    assert not (off / "config.json").exists()
    code = subprocess.run([sys.executable, "-m", "ascend_tune", "compare-config", str(off), str(off)],
                          capture_output=True, text=True)
    assert code.returncode == 2 and code.stderr.count("\n") == 1 and "has no config.json" in code.stderr
    assert "rerun to get one" in code.stderr
    broken = tmp_path / "broken"
    os.makedirs(broken)
    (broken / "config.json").write_text("{not json")
    done = subprocess.run([sys.executable, "-m", "ascend_tune", "compare-config", str(broken), str(broken)],
                          capture_output=True, text=True)
    assert done.returncode == 2 and "cannot be read as JSON" in done.stderr and done.stderr.count("\n") == 1
    assert (broken / "config.json").read_text() == "{not json"  # nothing the user had is touched
    os.makedirs(off / "rank1")  # a rank's own file that does not read is bad input too
    (off / "config.json").write_text('{"format": 1}')
    (off / "rank1" / "config.json").write_text("[1, 2")
    done = subprocess.run([sys.executable, "-m", "ascend_tune", "compare-config", str(off), str(off)],
                          capture_output=True, text=True)
    assert done.returncode == 2 and "rank1" in done.stderr and done.stderr.count("\n") == 1


def test_the_recording_leaves_nothing_behind_after_its_first_steps(tmp_path):
    import io

    original = torch.nn.utils.clip_grad_norm_
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    hooks = []
    with TrainingMonitor(model, optimizer, log_dir=tmp_path, quiet=True, tune=False):
        for _ in range(5):
            model(torch.ones(2, 4)).sum().backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            torch.save(model, io.BytesIO())  # nothing of ours is attached to the model
            optimizer.step()
            optimizer.zero_grad()
            hooks.append(len(model._forward_pre_hooks) + len(torch.nn.modules.module._global_forward_pre_hooks))
    assert hooks == [0] * 5  # the first forward's hook is gone by the first step's end
    assert torch.nn.utils.clip_grad_norm_ is original and (tmp_path / "config.json").exists()


PACK_SCRIPT = os.path.join(os.path.dirname(__file__), "scripts", "config_check_pack.py")


def test_msprobe_config_check_packs_compare_with_each_other_and_with_a_run_both_ways(tmp_path):
    if importlib.util.find_spec("msprobe") is None:  # never imported here: msprobe patches torch for good
        pytest.skip("mindstudio-probe is not installed (the msprobe extra)")

    def make(name, seed, how):
        out = tmp_path / name
        out.mkdir()
        env = dict(os.environ, NCCL_DETERMINISTIC="1", ASCEND_TUNE_TEST_SECRET="s3cret-token")
        done = subprocess.run([sys.executable, PACK_SCRIPT, str(out), str(seed), how], capture_output=True,
                              text=True, timeout=600, env=env)
        assert done.returncode == 0, done.stderr[-3000:]
        return out

    def compare_cli(base, target):
        done = subprocess.run([sys.executable, "-m", "ascend_tune", "compare-config", str(base), str(target),
                               "--json"], capture_output=True, text=True, timeout=300)
        assert done.returncode in (0, 1), done.stderr
        return done.returncode, json.loads(done.stdout)["differences"], done.stdout

    same, other = make("same", 0, "both"), make("other", 1, "pack")
    # the same run as msprobe packed it and as the two lines recorded it: the same settings, both ways
    for base, target in ((same / "run", same / "pack.zip"), (same / "pack.zip", same / "run")):
        code, differences, text = compare_cli(base, target)
        assert code == 0 and not [d for d in differences if d["severity"] != "info"], differences
        assert "s3cret-token" not in text  # a pack holds the whole environment: only the allow-list is read
        assert all(d["key"] not in ("weights", "data.first_forwards") for d in differences)  # compared, and equal
        sections = [d for d in differences if d["key"] == "sections"]
        assert sections and "optimizer" in sections[0]["note"]  # what the pack does not record is said, once
    # another seed: the initial weights, named once, pack against pack and against the run, both ways
    for base, target in ((same / "pack.zip", other / "pack.zip"), (other / "pack.zip", same / "run"),
                         (same / "run", other / "pack.zip")):
        code, differences, _ = compare_cli(base, target)
        assert code == 1 and [d["key"] for d in differences if d["severity"] == "error"] == ["weights"], differences
    broken = tmp_path / "broken.zip"
    with zipfile.ZipFile(broken, "w") as pack:
        pack.writestr("env", "{not json")
    done = subprocess.run([sys.executable, "-m", "ascend_tune", "compare-config", str(broken), str(same / "run")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "config_check pack" in done.stderr


def test_a_library_built_for_each_device_is_one_release():
    from ascend_tune.analysis.experiment.compare import compare_configs

    def config(torch_version):
        return {"format": 1, "environment": {"versions": {"torch": torch_version}}}

    same = compare_configs(config("2.1.0+cu121"), config("2.1.0"))  # the GPU's CUDA build, the NPU side's CPU one
    assert same.same_experiment and [(d.key, d.severity) for d in same.differences] == [
        ("environment.versions.torch", "info")]
    other = compare_configs(config("2.1.0+cu121"), config("2.2.0+cu121"))
    assert [(d.key, d.severity) for d in other.differences] == [("environment.versions.torch", "warning")]
