"""The dynamic-shape detector (shapes=True): shapes.csv, its warning, its lifetime, and `ascend-tune shapes`."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from conftest import read_jsonl
from torch import nn
from torch.utils.data import DataLoader

from ascend_tune import AscendTuneError, TrainingMonitor
from ascend_tune.cli import main
from ascend_tune.formats.shapes_csv import COLUMNS, shape_range
from ascend_tune.recording.frames import internal
from ascend_tune.shapes.config import ShapesConfig
from ascend_tune.testing.fakes import fakes_dir, legacy_dir

HERE = os.path.abspath(__file__)


@pytest.fixture(autouse=True)
def _quiet_environment(monkeypatch):
    monkeypatch.delenv("ASCEND_TUNE_SHAPES", raising=False)
    monkeypatch.delenv("ASCEND_TUNE_DUMP", raising=False)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny ops: a second thread only adds contention on a shared 2-core machine
    yield
    torch.set_num_threads(threads)


class Tagger(nn.Module):
    """Token tagger: embedding, an operator, a per-token linear layer, a pooled head."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(50, 16)
        self.proj = nn.Linear(16, 16)
        self.head = nn.Linear(16, 4)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.emb(tokens) * 2  # LINE_EMB
        h = self.proj(h)  # LINE_PROJ
        return self.head(h.mean(dim=1))  # LINE_HEAD


def line_of(tag: str) -> int:
    with open(HERE, encoding="utf-8") as fh:
        return next(i for i, text in enumerate(fh, 1) if text.rstrip().endswith(f"# {tag}"))


def batches(lengths, batch=8):
    g = torch.Generator().manual_seed(0)
    return [(torch.randint(0, 50, (batch, n), generator=g), torch.randint(0, 4, (batch,), generator=g))
            for n in lengths]


def train(log_dir, lengths, model=None, during=None, **options):
    torch.manual_seed(0)
    model = model or Tagger()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(batches(lengths), batch_size=None)  # each item is a ready batch of its own length
    options.setdefault("tune", False)
    with TrainingMonitor(model, optimizer, loader, log_dir=log_dir, quiet=True, **options) as mon:
        for step, (x, y) in enumerate(loader):
            if during is not None:
                during(step, mon)
            loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return model


def rows(path):
    with open(path, newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        assert tuple(reader.fieldnames) == COLUMNS
        return list(reader)


def by_name(path):
    return {row["Function Name"]: row for row in rows(path)}


def warnings(log_dir):
    return [r["message"] for r in read_jsonl(os.path.join(log_dir, "metrics.jsonl")) if r.get("event") == "warning"]


def mode_and_hooks():
    return torch._C._len_torch_function_stack(), len(torch.nn.modules.module._global_forward_hooks)


# --- what the report says ---------------------------------------------------------------------------------------------


def test_varying_sequence_lengths_flag_the_ops_with_their_shape_ranges(tmp_path):
    train(tmp_path, [12, 40, 12, 25, 33, 40], shapes=True)
    found = by_name(tmp_path / "shapes.csv")
    assert set(found) == {
        "Functional.embedding", "Module.emb.Embedding.forward", "Tensor.__mul__", "Functional.linear",
        "Module.proj.Linear.forward", "Tensor.mean",
    }
    emb = found["Functional.embedding"]
    assert (emb["File"], emb["Line"]) == (HERE, str(line_of("LINE_EMB")))
    assert emb["Call Stack"].startswith(f"{HERE}:{line_of('LINE_EMB')} in forward <- {HERE}:")
    assert (emb["Input Shape Range"], emb["Output Shape Range"]) == ("[8,12..40]; [50,16]", "[8,12..40,16]")
    assert (emb["Distinct Shapes"], emb["New Shape Steps"]) == ("4", "1 3 4")
    proj = found["Functional.linear"]
    assert proj["Line"] == str(line_of("LINE_PROJ"))
    assert proj["Input Shape Range"] == "[8,12..40,16]; [16,16]; [16]"
    assert found["Module.proj.Linear.forward"]["Output Shape Range"] == "[8,12..40,16]"
    assert found["Tensor.mean"]["Output Shape Range"] == "[8,16]"
    # the head sees [8,16] whatever the length: one shape, not reported
    assert not any(row["Line"] == str(line_of("LINE_HEAD")) and "mean" not in name for name, row in found.items())

    [message] = warnings(tmp_path)
    assert message.startswith("dynamic shapes: 6 ops changed shape between steps 0-5: Functional.embedding at ")
    assert "pad or bucket the inputs" in message and "set_compile_mode(jit_compile=False)" in message
    with open(tmp_path / "summary.json", encoding="utf-8") as fh:
        shapes = json.load(fh)["shapes"]
    assert shapes["steps"] == [0, 5] and shapes["dynamic"] == 6 and shapes["ops"] > 6


def test_fixed_shapes_write_the_header_alone_and_no_warning(tmp_path):
    train(tmp_path, [20] * 6, shapes=True)
    assert rows(tmp_path / "shapes.csv") == []
    assert warnings(tmp_path) == []
    with open(tmp_path / "summary.json", encoding="utf-8") as fh:
        assert json.load(fh)["shapes"]["dynamic"] == 0


def test_a_loop_over_layers_of_different_widths_is_not_dynamic(tmp_path):
    class Stack(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = nn.Embedding(50, 16)
            self.layers = nn.ModuleList([nn.Linear(16, 32), nn.Linear(32, 8), nn.Linear(8, 4)])

        def forward(self, tokens):
            h = self.emb(tokens).mean(dim=1)
            for layer in self.layers:
                h = layer(h)  # three shapes at one line, the same three every step
            return h

    train(tmp_path, [10] * 4, model=Stack(), shapes=True)
    assert rows(tmp_path / "shapes.csv") == []


def test_shape_range_per_position_rank_and_optional_positions():
    assert shape_range([((8, 12, 64),), ((8, 40, 64),), ((8, 20, 64),)]) == "[8,12..40,64]"
    assert shape_range([((8, 12), (3,)), ((8, 40),)]) == "[8,12..40]; [3]?"
    assert shape_range([((4,),), ((4, 2),)]) == "[4]|[4,2]"
    assert shape_range([((),), ((),)]) == "[]"
    assert shape_range([(), ()]) == ""


# --- what is and is not recorded --------------------------------------------------------------------------------------


def test_nothing_is_hooked_after_the_watched_steps(tmp_path):
    modes, hooks = mode_and_hooks()
    seen = []
    # steps 0-2 fixed, then lengths change: outside the watched steps nothing is recorded
    train(tmp_path, [16, 16, 16, 30, 9, 22], during=lambda step, mon: seen.append(mode_and_hooks()),
          shapes=dict(steps=3))
    assert seen == [(modes + 1, hooks + 1)] * 3 + [(modes, hooks)] * 3
    assert rows(tmp_path / "shapes.csv") == []
    assert mode_and_hooks() == (modes, hooks)


def test_with_no_optimizer_the_mode_goes_once_the_step_ending_in_backward_returns(tmp_path):
    before = mode_and_hooks()
    model = Tagger()
    loader = DataLoader(batches([16, 16, 30, 9]), batch_size=None)
    seen = []
    with TrainingMonitor(model, None, loader, log_dir=tmp_path, quiet=True, shapes=dict(steps=2)):
        for x, y in loader:
            loss = F.cross_entropy(model(x), y)
            seen.append(mode_and_hooks())
            loss.backward()  # each backward ends a step, inside a torch call the mode itself handles
            with torch.no_grad():
                for p in model.parameters():
                    p -= 0.1 * p.grad
                    p.grad = None
    modes, hooks = before
    assert seen == [(modes + 1, hooks + 1)] * 2 + [(modes, hooks)] * 2
    assert mode_and_hooks() == before
    assert rows(tmp_path / "shapes.csv") == []  # steps 2 and 3 change shape, but they are not watched


def test_the_monitors_own_tensor_work_is_not_recorded(tmp_path):
    def internal_work(step, mon):
        with internal():
            torch.ones(step + 1, 3).sum(dim=0)  # shapes change every step, but it is ascend_tune's own

    train(tmp_path, [16] * 4, during=internal_work, shapes=True)
    assert rows(tmp_path / "shapes.csv") == []


def test_batches_padded_in_a_collate_fn_flag_the_model_not_the_loader(tmp_path):
    g = torch.Generator().manual_seed(0)
    samples = [torch.randint(0, 50, (n,), generator=g) for n in (5, 9, 5, 14, 7, 11, 6, 13)]

    def pad_batch(items):
        longest = max(len(t) for t in items)
        return torch.stack([F.pad(t, (0, longest - len(t))) for t in items])

    loader = DataLoader(samples, batch_size=2, collate_fn=pad_batch)
    model = Tagger()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with TrainingMonitor(model, optimizer, loader, log_dir=tmp_path, quiet=True, tune=False, shapes=True):
        for x in loader:
            loss = model(x).square().mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    found = rows(tmp_path / "shapes.csv")
    assert "Functional.embedding" in {r["Function Name"] for r in found}
    assert not any(r["Function Name"] in ("Functional.pad", "Torch.stack") for r in found)


# --- with other features, and when things go wrong --------------------------------------------------------------------


def test_runs_alongside_a_builtin_precision_dump_of_the_same_steps(tmp_path):
    lengths = [12, 40, 12, 25]
    train(tmp_path / "alone", lengths, shapes=True)
    train(tmp_path / "both", lengths, shapes=True, precision=dict(steps=[0, 1, 2], level="mix", backend="builtin"))
    train(tmp_path / "dump", lengths, precision=dict(steps=[0, 1, 2], level="mix", backend="builtin"))
    def without_callers(path):  # the two runs are called from different lines of this test
        return [dict(r, **{"Call Stack": r["Call Stack"].split(" <- ")[0]}) for r in rows(path)]

    assert without_callers(tmp_path / "both" / "shapes.csv") == without_callers(tmp_path / "alone" / "shapes.csv")
    for step in (0, 1, 2):
        with open(tmp_path / "both" / "dump" / f"step{step}" / "rank0" / "dump.json", encoding="utf-8") as fh:
            both = json.load(fh)["data"]
        with open(tmp_path / "dump" / "dump" / f"step{step}" / "rank0" / "dump.json", encoding="utf-8") as fh:
            alone = json.load(fh)["data"]
        assert list(both) == list(alone)


@pytest.fixture
def fake_ptdbg(monkeypatch):
    """The legacy fakes on sys.path, so precision's ``auto`` backend is ptdbg_ascend."""
    monkeypatch.syspath_prepend(fakes_dir())
    monkeypatch.syspath_prepend(legacy_dir())
    drop = [n for n in sys.modules if n.split(".")[0] in ("ptdbg_ascend", "torch_npu")]
    for name in drop:
        del sys.modules[name]
    yield
    for name in [n for n in sys.modules if n.split(".")[0] in ("ptdbg_ascend", "torch_npu")]:
        del sys.modules[name]


def test_a_foreign_dump_backend_on_the_watched_steps_is_refused_and_nothing_stays(tmp_path, fake_ptdbg):
    hooks = mode_and_hooks()
    with pytest.raises(AscendTuneError, match=r"ptdbg_ascend backend.*backend='builtin'"):
        train(tmp_path, [12, 20], shapes=True, precision=dict(steps=[1]))
    assert mode_and_hooks() == hooks
    # dumping after the watched steps is fine
    train(tmp_path / "later", [12, 20, 12], shapes=dict(steps=2), precision=dict(steps=[2]))
    assert [r["Function Name"] for r in rows(tmp_path / "later" / "shapes.csv")][0] == "Functional.embedding"


def test_torch_save_of_the_model_inside_the_block(tmp_path):
    saved = tmp_path / "model.pt"

    def save(step, mon):
        if step == 1:
            torch.save(mon.model, saved)

    model = train(tmp_path, [12, 30, 12], during=save, shapes=True)
    loaded = torch.load(saved, weights_only=False)
    tokens = torch.randint(0, 50, (2, 7))
    assert loaded(tokens).shape == (2, 4)
    assert not loaded._forward_hooks and not loaded.emb._forward_hooks
    assert model(tokens).shape == (2, 4)


def test_an_exception_in_the_block_leaves_nothing_installed_and_keeps_what_was_seen(tmp_path):
    hooks = mode_and_hooks()

    def fail(step, mon):
        assert mode_and_hooks()[0] == hooks[0] + 1
        if step == 2:
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        train(tmp_path, [12, 30, 18, 12], during=fail, shapes=True)
    assert mode_and_hooks() == hooks
    assert "Functional.embedding" in by_name(tmp_path / "shapes.csv")


# --- switching it on --------------------------------------------------------------------------------------------------


def test_the_environment_switch(tmp_path, monkeypatch):
    monkeypatch.setenv("ASCEND_TUNE_SHAPES", "steps=2")
    train(tmp_path / "on", [12, 30, 18])
    assert by_name(tmp_path / "on" / "shapes.csv")["Tensor.mean"]["Input Shape Range"] == "[8,12..30,16]"
    monkeypatch.setenv("ASCEND_TUNE_SHAPES", "0")
    train(tmp_path / "off", [12, 30])
    assert not os.path.exists(tmp_path / "off" / "shapes.csv")
    monkeypatch.setenv("ASCEND_TUNE_SHAPES", "maybe")
    with pytest.raises(AscendTuneError, match="ASCEND_TUNE_SHAPES='maybe'.*steps=N"):
        train(tmp_path / "bad", [12])
    monkeypatch.setenv("ASCEND_TUNE_SHAPES", "1")
    train(tmp_path / "given", [12, 30], shapes=False)  # the option wins over the environment
    assert not os.path.exists(tmp_path / "given" / "shapes.csv")


def test_config_forms():
    assert ShapesConfig.from_any(True) == ShapesConfig(steps=20)
    assert ShapesConfig.from_any(None) is None and ShapesConfig.from_any(False) is None
    assert ShapesConfig.from_any({"steps": 5}).steps == 5
    with pytest.raises(AscendTuneError, match="did you mean 'steps'"):
        ShapesConfig.from_any({"step": 5})
    with pytest.raises(AscendTuneError, match="integer >= 1"):
        ShapesConfig(steps=0)
    with pytest.raises(AscendTuneError, match="True, False, a dict"):
        ShapesConfig.from_any(3.5)


def test_other_ranks_write_their_own_report_only_when_distributed(tmp_path, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    train(tmp_path / "dist", [12, 30], rank=1, shapes=True)
    assert os.path.exists(tmp_path / "dist" / "rank1" / "shapes.csv")
    assert not os.path.exists(tmp_path / "dist" / "shapes.csv")
    monkeypatch.setenv("WORLD_SIZE", "1")
    train(tmp_path / "single", [12, 30], rank=1, shapes=True)
    assert not os.path.exists(tmp_path / "single" / "shapes.csv")


# --- ascend-tune shapes -----------------------------------------------------------------------------------------------


def test_cli_summarises_a_report_with_exit_codes(tmp_path, capsys):
    train(tmp_path / "dynamic", [12, 40, 25], shapes=True)
    train(tmp_path / "fixed", [12, 12, 12], shapes=True)
    assert main(["shapes", str(tmp_path / "dynamic" / "shapes.csv")]) == 1
    out = capsys.readouterr().out
    assert "6 dynamic ops" in out and "Functional.embedding" in out and "[8,12..40,16]" in out and "fix: pad" in out
    assert main(["shapes", str(tmp_path / "fixed")]) == 0  # a run folder holding shapes.csv
    assert "no dynamic ops" in capsys.readouterr().out
    assert main(["shapes", "--json", "--limit", "1", str(tmp_path / "dynamic")]) == 1
    assert len(json.loads(capsys.readouterr().out)["dynamic"]) == 6


@pytest.mark.parametrize("content, message", [
    (None, "does not exist"),
    (b"", "is empty"),
    (b"step,loss\n1,2.0\n", "not a dynamic-shape report"),
    (b"\xff\xfe\x00binary", "not a text CSV"),
    (",".join(COLUMNS).encode() + b"\nF,s,f,1,[1],[1],many,\n", "Distinct Shapes 'many' is not a number"),
])
def test_cli_bad_input_is_one_line_and_exit_2(tmp_path, capsys, content, message):
    path = tmp_path / "shapes.csv"
    if content is not None:
        path.write_bytes(content)
    assert main(["shapes", str(path)]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_cli_does_not_import_torch(tmp_path):
    path = tmp_path / "shapes.csv"
    path.write_text(",".join(COLUMNS) + "\nTensor.mean,s,f.py,3,[8;2..4],[8],2,1\n")
    code = f"import sys; from ascend_tune.cli import main; rc = main(['shapes', {str(path)!r}]); " \
           "print(rc, 'torch' in sys.modules)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.strip().splitlines()[-1] == "1 False"


class _StackDepth(torch.utils.data.Dataset):
    """Each sample is the function-mode stack depth where it was made (a worker process, here)."""

    def __len__(self) -> int:
        return 8

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.tensor([torch._C._len_torch_function_stack(), index])


def test_loader_workers_forked_during_the_watched_steps_inherit_nothing(tmp_path):
    loader = DataLoader(_StackDepth(), batch_size=2, num_workers=1, multiprocessing_context="fork")
    model = nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    depths = []
    base = torch._C._len_torch_function_stack()
    with TrainingMonitor(model, optimizer, loader, log_dir=tmp_path, quiet=True, tune=False, shapes=True):
        for batch in loader:
            depths.append(torch._C._len_torch_function_stack() - base)  # here: the detector's mode
            depths.extend((batch[:, 0] - base).tolist())
            loss = model(batch.float()).sum()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    assert depths == [1, 0, 0] * 4
