"""The built-in dump engine through TrainingMonitor(precision=...): selected steps, msprobe's names and layout."""

from __future__ import annotations

import dataclasses
import io
import json
import logging
import os

import pytest
import torch
import torch.nn.functional as F
from conftest import read_jsonl
from torch import nn, relu
from torch.utils.data import DataLoader

from ascend_tune import AscendTuneError, PrecisionConfig, TrainingMonitor
from ascend_tune.precision import find_dumps, read_dump
from ascend_tune.testing.models import MobileNetV1, synthetic_classification, synthetic_images

pytestmark = pytest.mark.usefixtures("one_thread")


class ImportedRelu(nn.Module):
    """Calls ``relu`` imported with ``from torch import relu``: msprobe's attribute patching misses that call."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.fc2 = nn.Linear(32, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(relu(self.fc1(x)))


def make(model_cls=ImportedRelu, n=32):
    torch.manual_seed(0)
    model = model_cls()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(synthetic_classification(n=n), batch_size=8)
    return model, optimizer, loader


def train(model, optimizer, loader, log_dir, during=None, **options):
    # tuning may swap in a fused optimizer, whose single kernel is no listed API: keep the optimizer's ops stable
    options.setdefault("tune", False)
    with TrainingMonitor(model, optimizer, loader, log_dir=log_dir, quiet=True, **options) as mon:
        for step, (x, y) in enumerate(loader):
            loss = F.cross_entropy(model(x), y)
            if during is not None:
                during(step, mon)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return mon


def summary(log_dir):
    with open(os.path.join(log_dir, "summary.json"), encoding="utf-8") as fh:
        return json.load(fh)


def test_only_the_selected_steps_are_dumped_with_msprobe_names(tmp_path):
    model, optimizer, loader = make()
    train(model, optimizer, loader, tmp_path, precision=dict(steps=[0, 2], level="mix"))
    dump_dir = tmp_path / "dump"
    assert sorted(os.listdir(dump_dir)) == ["step0", "step2"]
    for step in (0, 2):
        assert sorted(os.listdir(dump_dir / f"step{step}")) == ["rank0"]
        assert sorted(os.listdir(dump_dir / f"step{step}" / "rank0")) == ["construct.json", "dump.json", "stack.json"]
    dump = read_dump(dump_dir / "step0")
    assert (dump.task, dump.level, dump.framework, dump.complete) == ("statistics", "mix", "pytorch", True)
    assert dump.names == [
        "Functional.linear.0.forward", "Module.fc1.Linear.forward.0", "Torch.relu.0.forward",
        "Functional.linear.1.forward", "Module.fc2.Linear.forward.0", "Functional.cross_entropy.0.forward",
        "Functional.cross_entropy.0.backward", "Functional.linear.1.backward", "Module.fc2.Linear.parameters_grad.0",
        "Module.fc2.Linear.backward.0", "Torch.relu.0.backward", "Module.fc1.Linear.backward.0",
        "Functional.linear.0.backward", "Module.fc1.Linear.parameters_grad.0",
        "Tensor.add_.0.forward", "Tensor.add_.1.forward", "Tensor.add_.2.forward", "Tensor.add_.3.forward",
    ]
    assert dump.construct["Functional.linear.0.forward"] == "Module.fc1.Linear.forward.0"
    assert dump.construct["Functional.linear.1.backward"] == "Module.fc2.Linear.backward.0"
    assert dump.construct["Tensor.add_.0.forward"] == "optimizer"
    assert set(dump.data["Module.fc1.Linear.parameters_grad.0"]) == {"weight", "bias"}
    assert set(dump.data["Module.fc1.Linear.forward.0"]["parameters"]) == {"weight", "bias"}


def test_records_hold_the_statistics_of_the_tensors_the_ops_saw(tmp_path):
    model, optimizer, loader = make()
    x, _ = next(iter(loader))
    with torch.no_grad():
        hidden = model.fc1(x)
    train(model, optimizer, loader, tmp_path, precision=dict(steps=[0]))
    data = read_dump(tmp_path / "dump" / "step0").data
    linear = data["Functional.linear.0.forward"]
    record = linear["input_args"][0]
    assert record["type"] == "torch.Tensor" and record["dtype"] == "torch.float32" and record["shape"] == [8, 16]
    assert record["requires_grad"] is False
    for key, value in (("Max", x.max()), ("Min", x.min()), ("Mean", x.mean()), ("Norm", x.norm())):
        assert record[key] == pytest.approx(float(value), rel=1e-6)
    assert linear["output"][0]["Max"] == pytest.approx(float(hidden.max()), rel=1e-6)
    assert linear["input_args"][1]["requires_grad"] is True  # the weight
    relu_out = data["Torch.relu.0.forward"]["output"][0]
    assert relu_out["Min"] == 0.0
    loss = data["Functional.cross_entropy.0.forward"]
    assert loss["input_args"][1]["dtype"] == "torch.int64"
    assert loss["input_args"][1]["Mean"] is None and isinstance(loss["input_args"][1]["Max"], int)
    assert loss["input_kwargs"] == {}  # defaults the call did not pass are not recorded, as in msprobe
    backward = data["Functional.cross_entropy.0.backward"]
    assert backward["input"][0]["shape"] == [] and backward["input"][0]["Max"] == 1.0  # d loss / d loss
    add = data["Tensor.add_.0.forward"]
    assert add["input_kwargs"] == {"alpha": {"type": "float", "value": -0.1}}


def test_stacks_hold_the_users_frames(tmp_path):
    model, optimizer, loader = make()
    train(model, optimizer, loader, tmp_path, precision=dict(steps=[0]))
    dump = read_dump(tmp_path / "dump" / "step0")
    frames = dump.stack_of("Torch.relu.0.forward")
    assert frames[0].file == __file__ and frames[0].function == "forward"
    assert frames[0].code == "return self.fc2(relu(self.fc1(x)))"
    assert frames[1].function == "train" and "model(x)" in frames[1].code
    assert all("ascend_tune" not in f.file and "/torch/" not in f.file for f in frames)
    assert dump.stack_of("Torch.relu.0.backward") == frames  # backward entries share their forward's stack
    with open(tmp_path / "dump" / "step0" / "rank0" / "stack.json", encoding="utf-8") as fh:
        raw = json.load(fh)
    assert any("Torch.relu.0.forward" in names for names, _ in raw.values())


def test_nothing_is_hooked_outside_the_selected_steps(tmp_path):
    model, optimizer, loader = make()
    seen = {}

    def during(step, mon):
        seen[step] = (
            torch._C._len_torch_function_stack(),
            len(torch.nn.modules.module._global_forward_hooks) + len(torch.nn.modules.module._global_forward_pre_hooks),
            sum(len(getattr(p, "_post_accumulate_grad_hooks", None) or {}) for p in model.parameters()),
            sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules()),
        )

    # experiment= (config.json) watches the first step's forward with a global hook of its own: off here
    train(model, optimizer, loader, tmp_path, during=during, precision=dict(steps=[1], level="mix"), experiment=False)
    assert seen[1][:3] != (0, 0, 0)  # the check sees the hooks when they are there
    for step in (0, 2, 3):
        assert seen[step] == (0, 0, 0, 0), f"step {step}"
    assert seen[1][3] == 0  # hooks are global, nothing is attached to the model
    assert len(torch.nn.modules.module._global_forward_hooks) == 0


def test_the_model_pickles_inside_a_dumped_step(tmp_path):
    model, optimizer, loader = make()
    saved = []

    def during(step, mon):
        if step == 0:
            buffer = io.BytesIO()
            torch.save(model, buffer)
            saved.append(buffer.getvalue())

    train(model, optimizer, loader, tmp_path, during=during, precision=dict(steps=[0], level="mix"))
    restored = torch.load(io.BytesIO(saved[0]), weights_only=False)
    assert isinstance(restored, ImportedRelu) and not restored.fc1._forward_hooks
    assert (tmp_path / "dump" / "step0" / "rank0" / "dump.json").exists()


def test_under_compile_module_hooks_go_on_the_submodules_and_pickle_as_nothing(tmp_path, monkeypatch):
    """The path taken when torch.compile is in use (tests/test_compile.py runs it for real, in a subprocess): the
    same dump as with global hooks, and a model saved inside the dumped step loads and runs with no ascend_tune."""
    from ascend_tune.recording import compile as compiling

    model, optimizer, loader = make()
    train(model, optimizer, loader, tmp_path / "global", precision=dict(steps=[1], level="mix"))
    monkeypatch.setattr(compiling, "compile_in_use", lambda models=(): True)
    monkeypatch.setattr(compiling, "run_eager", lambda stack, models=(): False)  # nothing is compiled here
    model, optimizer, loader = make()
    saved = []

    def during(step, mon):
        if step == 1:
            assert len(model.fc1._forward_hooks) == 1 and not torch.nn.modules.module._global_forward_hooks
            buffer = io.BytesIO()
            torch.save(model, buffer)
            saved.append(buffer.getvalue())

    train(model, optimizer, loader, tmp_path / "per-module", during=during, precision=dict(steps=[1], level="mix"))
    assert not model.fc1._forward_hooks and not model.fc1._forward_pre_hooks  # gone after the step
    global_dump = read_dump(tmp_path / "global" / "dump" / "step1")
    per_module = read_dump(tmp_path / "per-module" / "dump" / "step1")
    assert per_module.names == global_dump.names and per_module.data == global_dump.data
    restored = torch.load(io.BytesIO(saved[0]), weights_only=False)
    hooks = list(restored.fc1._forward_hooks.values()) + list(restored.fc1._forward_pre_hooks.values())
    assert hooks and all(getattr(h, "__self__", None) is logging.getLogger("ascend_tune.detached_hook") for h in hooks)
    x = torch.randn(2, 16)
    assert torch.equal(restored(x), restored.fc2(relu(restored.fc1(x))))


def test_modules_with_inplace_relu_dump_their_backward(tmp_path):
    torch.manual_seed(0)
    model = MobileNetV1(width=0.25)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(synthetic_images(n=8, size=16), batch_size=4)
    train(model, optimizer, loader, tmp_path, precision=dict(steps=[0], level="L0"))
    data = read_dump(tmp_path / "dump" / "step0").data
    relu_bw = data["Module.features.0.2.ReLU.backward.0"]
    assert relu_bw["input"][0]["shape"] == [4, 8, 8, 8] and relu_bw["output"][0]["shape"] == [4, 8, 8, 8]
    assert data["Module.features.0.2.ReLU.forward.0"]["output"][0]["Min"] == 0.0
    assert "Module.fc.Linear.parameters_grad.0" in data
    assert not any(name.startswith(("Functional.", "Tensor.", "Torch.")) for name in data)  # L0: modules only


def test_the_env_variable_turns_dumps_on_with_no_code_change(tmp_path, monkeypatch):
    monkeypatch.setenv("ASCEND_TUNE_DUMP", "task=statistics,level=L0,steps=1-2")
    model, optimizer, loader = make()
    train(model, optimizer, loader, tmp_path)
    assert sorted(os.listdir(tmp_path / "dump")) == ["step1", "step2"]
    assert read_dump(tmp_path / "dump" / "step1").level == "L0"
    assert summary(tmp_path)["precision"]["steps_dumped"] == [1, 2]


def test_precision_false_wins_over_the_env_variable(tmp_path, monkeypatch):
    monkeypatch.setenv("ASCEND_TUNE_DUMP", "1")
    model, optimizer, loader = make()
    train(model, optimizer, loader, tmp_path, precision=False)
    assert not (tmp_path / "dump").exists()
    assert "precision" not in summary(tmp_path)


def test_default_steps_is_the_first_step_of_the_block(tmp_path):
    model, optimizer, loader = make()
    train(model, optimizer, loader, tmp_path, start_step=5, precision=True)
    assert os.listdir(tmp_path / "dump") == ["step5"]
    assert summary(tmp_path)["precision"]["steps_dumped"] == [5]


@pytest.mark.parametrize(
    "options, fix",
    [
        (dict(task="dump"), "task must be one of statistics, tensor, overflow_check"),
        (dict(level="L2"), "level must be one of L0, L1, mix"),
        (dict(steps=["first"]), "steps must hold integers >= 0 or 'a-b' ranges"),
        (dict(steps=[1.5]), "steps must hold integers >= 0 or 'a-b' ranges"),
        (dict(steps=["4-2"]), "steps must hold integers >= 0 or 'a-b' ranges"),
        (dict(ranks="all"), "ranks must hold integers >= 0 or 'a-b' ranges"),
        (dict(scope=["Functional.linear.0.forward"]), "scope must be empty or [first, last]"),
        (dict(data_mode=["inputs"]), "data_mode must be one of all, forward, backward, input, output"),
        (dict(overflow_nums=0), "overflow_nums must be a positive integer or -1"),
        (dict(stpes=[0]), "precision has no option 'stpes'"),
    ],
)
def test_a_bad_config_raises_at_enter_naming_the_fix(tmp_path, options, fix):
    model, optimizer, loader = make()
    mon = TrainingMonitor(model, optimizer, loader, log_dir=tmp_path, quiet=True, precision=options)
    with pytest.raises(AscendTuneError) as info:
        with mon:
            pass
    assert fix in str(info.value)


def test_module_levels_need_the_model(tmp_path):
    with pytest.raises(AscendTuneError, match="pass it as TrainingMonitor\\(model"):
        with TrainingMonitor(log_dir=tmp_path, quiet=True, precision=dict(level="mix")):
            pass


def test_msprobe_backend_that_is_not_installed_names_the_pip_command(tmp_path, monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "msprobe", None)  # as if mindstudio-probe were absent
    model, optimizer, loader = make()
    with pytest.raises(AscendTuneError, match='pip install "mindstudio-probe>=26.0,<27"'):
        with TrainingMonitor(model, optimizer, loader, log_dir=tmp_path, quiet=True, precision=dict(backend="msprobe")):
            pass


def test_an_earlier_dump_in_the_default_folder_is_moved_aside(tmp_path):
    model, optimizer, loader = make()
    train(model, optimizer, loader, tmp_path, precision=dict(steps=[0]))
    first = (tmp_path / "dump" / "step0" / "rank0" / "dump.json").read_text()
    model, optimizer, loader = make()
    with torch.no_grad():
        model.fc1.weight.mul_(2)  # a different run, a different dump
    train(model, optimizer, loader, tmp_path, precision=dict(steps=[0]))
    moved = list(tmp_path.glob("previous-*/dump/step0/rank0/dump.json"))
    assert len(moved) == 1 and moved[0].read_text() == first
    assert (tmp_path / "dump" / "step0" / "rank0" / "dump.json").read_text() != first


def test_an_explicit_dump_path_that_holds_a_dump_is_refused(tmp_path):
    model, optimizer, loader = make()
    target = tmp_path / "mine"
    train(model, optimizer, loader, tmp_path / "a", precision=dict(steps=[0, 1], dump_path=str(target)))
    before = (target / "step1" / "rank0" / "dump.json").read_text()
    with pytest.raises(AscendTuneError, match="already holds a dump .*step1.*pass a new dump_path"):
        train(model, optimizer, loader, tmp_path / "b", precision=dict(steps=[1], dump_path=str(target)))
    assert (target / "step1" / "rank0" / "dump.json").read_text() == before
    # steps that were not dumped before do not collide (a resumed run dumps on into the same folder)
    train(model, optimizer, loader, tmp_path / "c", precision=dict(steps=[3], dump_path=str(target)))
    assert sorted(os.listdir(target)) == ["step0", "step1", "step3"]


def test_tensor_task_saves_each_tensor_as_a_pt_file(tmp_path):
    model, optimizer, loader = make()
    x, _ = next(iter(loader))
    train(model, optimizer, loader, tmp_path, precision=dict(task="tensor", steps=[0]))
    dump = read_dump(tmp_path / "dump" / "step0")
    assert dump.task == "tensor" and dump.dump_data_dir.endswith("dump_tensor_data")
    record = dump.data["Functional.linear.0.forward"]["input_args"][0]
    assert record["data_name"] == "Functional.linear.0.forward.input.0.pt"
    saved = torch.load(os.path.join(dump.path, "dump_tensor_data", record["data_name"]))
    assert torch.equal(saved, x)
    grad = dump.data["Functional.linear.0.backward"]["input"][0]
    assert grad["data_name"] == "Functional.linear.0.backward.input.0.pt"
    assert os.path.exists(os.path.join(dump.path, "dump_tensor_data", grad["data_name"]))


def test_md5_summary_adds_a_crc_of_each_tensor(tmp_path):
    model, optimizer, loader = make()
    train(model, optimizer, loader, tmp_path, precision=dict(summary_mode="md5", steps=[0]))
    data = read_dump(tmp_path / "dump" / "step0").data
    fc1_out = data["Functional.linear.0.forward"]["output"][0]
    relu_in = data["Torch.relu.0.forward"]["input_args"][0]
    fc2_in = data["Functional.linear.1.forward"]["input_args"][0]
    assert len(fc1_out["md5"]) == 8 and fc1_out["md5"] == relu_in["md5"]  # the same tensor
    assert fc1_out["md5"] != fc2_in["md5"]
    assert fc1_out["Max"] is not None  # statistics stay


def test_list_scope_and_data_mode_select_what_is_dumped(tmp_path):
    model, optimizer, loader = make()
    train(model, optimizer, loader, tmp_path / "list", precision=dict(steps=[0], list=["linear"]))
    assert read_dump(tmp_path / "list" / "dump" / "step0").names == [
        "Functional.linear.0.forward", "Functional.linear.1.forward",
        "Functional.linear.1.backward", "Functional.linear.0.backward",
    ]
    train(model, optimizer, loader, tmp_path / "mix", precision=dict(steps=[0], list=["fc2"], level="mix"))
    names = read_dump(tmp_path / "mix" / "dump" / "step0").names
    assert "Functional.linear.1.forward" in names and "Functional.linear.0.forward" not in names  # inside fc2
    scope = ["Torch.relu.0.forward", "Functional.cross_entropy.0.forward"]
    train(model, optimizer, loader, tmp_path / "scope", precision=dict(steps=[0], scope=scope))
    assert read_dump(tmp_path / "scope" / "dump" / "step0").names == [
        "Torch.relu.0.forward", "Functional.linear.1.forward", "Functional.cross_entropy.0.forward",
        "Functional.cross_entropy.0.backward", "Functional.linear.1.backward", "Torch.relu.0.backward",
    ]
    train(model, optimizer, loader, tmp_path / "fwd", precision=dict(steps=[0], data_mode=["forward", "output"]))
    data = read_dump(tmp_path / "fwd" / "dump" / "step0").data
    assert not any(name.endswith("backward") for name in data)
    assert set(data["Functional.linear.0.forward"]) == {"output"}


def test_ranks_not_selected_dump_nothing(tmp_path):
    model, optimizer, loader = make()
    train(model, optimizer, loader, tmp_path, rank=1, precision=dict(ranks=[0]))
    assert not (tmp_path / "dump").exists()


def test_the_monitors_own_tensor_work_is_not_dumped(tmp_path):
    model, optimizer, loader = make()
    train(model, optimizer, loader, tmp_path, log_every=1, accumulate="mean", precision=dict(steps=[0, 1]))
    for step in (0, 1):
        names = read_dump(tmp_path / "dump" / f"step{step}").names
        assert not any(n.startswith(("Torch.stack", "Tensor.__add__", "Tensor.__truediv__")) for n in names)
    records = [r for r in read_jsonl(tmp_path / "metrics.jsonl") if r.get("event") == "precision_dump"]
    assert [r["step"] for r in records] == [0, 1]


def test_an_exception_inside_a_dumped_step_keeps_what_was_recorded(tmp_path):
    model, optimizer, loader = make()

    def during(step, mon):
        if step == 1:
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        train(model, optimizer, loader, tmp_path, during=during, precision=dict(steps=[1]))
    dump = read_dump(tmp_path / "dump" / "step1")
    assert dump.complete and dump.names[-1] == "Functional.cross_entropy.0.forward"
    assert torch._C._len_torch_function_stack() == 0


def test_reader_lists_steps_and_refuses_ambiguous_folders(tmp_path):
    model, optimizer, loader = make()
    train(model, optimizer, loader, tmp_path, precision=dict(steps=[0, 1]))
    locations = find_dumps(tmp_path / "dump")
    assert [(loc.step, loc.rank) for loc in locations] == [(0, 0), (1, 0)]
    assert read_dump(os.path.join(locations[1].path, "dump.json")).step == 1
    os.makedirs(tmp_path / "dump" / "step0" / "rank1")
    (tmp_path / "dump" / "step0" / "rank1" / "dump.json").write_text('{"data": {}}')
    with pytest.raises(AscendTuneError, match="holds 2 rank folders"):
        read_dump(tmp_path / "dump" / "step0")
    with pytest.raises(AscendTuneError, match="does not exist"):
        read_dump(tmp_path / "nowhere")


def test_precision_config_is_frozen_and_public():
    config = PrecisionConfig.from_any({"steps": [0, "2-4"], "level": "mix"})
    assert config.selects_step(3) and not config.selects_step(1) and config.last_step() == 4
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.level = "L1"


def test_without_an_optimizer_each_steps_dump_holds_its_backward(tmp_path):
    model, optimizer, loader = make()
    with TrainingMonitor(model, None, loader, log_dir=tmp_path, quiet=True, tune=False,
                         precision=dict(steps=[1], level="L1")):
        for x, y in loader:
            F.cross_entropy(model(x), y).backward()
            with torch.no_grad():
                for p in model.parameters():
                    p -= 0.1 * p.grad
                    p.grad = None
    # that step ended inside loss.backward(), with torch holding the dump's mode aside: it is still taken off
    assert torch._C._len_torch_function_stack() == 0
    dump = read_dump(tmp_path / "dump" / "step1")
    # the step's own forward comes first, then its backward (not the previous step's backward, then a forward)
    assert dump.names[0].endswith(".forward")
    names = dump.names
    assert names.index("Functional.cross_entropy.0.forward") < names.index("Functional.cross_entropy.0.backward")
    assert "Functional.linear.0.backward" in dump.names
