"""``ascend-tune compare-trace``: real torch.profiler traces of a tiny GPT and a CNN, made here under
TrainingMonitor(profile=...), each target with one injected slowdown; the injected part must be the top row of its
level, the rows must add up to the measured gap, and identical code must give no slowdown beyond noise (with the
noise floor two runs of identical code drift apart by on this machine)."""

from __future__ import annotations

import csv
import functools
import json
import math
import os
import statistics
import subprocess
import sys
import time

import pytest
import torch
from torch.utils.data import DataLoader

from ascend_tune import TrainingMonitor
from ascend_tune.analysis.traces.compare import UNATTRIBUTED, RunSide, compare_sides
from ascend_tune.analysis.traces.pair import compare_traces
from ascend_tune.cli import main
from ascend_tune.testing.models import (
    MobileNetV1,
    TinyGPT,
    synthetic_classification,
    synthetic_images,
    synthetic_tokens,
)
from ascend_tune.testing.torch_features import drop_library, fused_on_cpu_missing

# Sized for a loaded 2-core machine, where the scheduler takes ~8 ms slices out of random steps and the load changes
# between runs: each injected slowdown costs ~100 ms per step or more, several times the step (10-40 ms), beyond 3
# spreads of log step times on either torch.
STEPS = 14
PROFILE = dict(skip_first=3, wait=0, warmup=1, active=9, repeat=1)
# the slowed module's extra work: SLOW_ROUNDS tanh of SLOW_SHAPE (compute, not per-op overhead: the same on every
# torch), as many as take SLOW_MS on one core of this machine (timed once: one tanh of it takes 0.12 ms with one
# CPU's AVX2 kernel and 1.5 ms on another machine)
SLOW_SHAPE = (256, 1024)
SLOW_MS = 130
SYNC_READS = 1000  # a read-back loop per step: float(loss), then Python work on what was read, SYNC_READS times
SYNC_MS = 120  # the loop's length; the Python between two reads counts as host-sync time (a read-back loop)


def _python_taking(ms: float) -> int:
    """``n`` such that ``sum(range(n))`` takes about ``ms`` here (timed once, without torch)."""
    start = time.perf_counter()
    sum(range(200_000))
    return max(100, int(200_000 * ms / 1e3 / (time.perf_counter() - start)))


def _tanh_rounds_taking(ms: float) -> int:
    """How many tanh of SLOW_SHAPE take about ``ms`` on one thread here (the fastest of three timings: load only
    ever makes a timing longer)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        best = float("inf")
        with torch.no_grad():
            work = torch.full(SLOW_SHAPE, 0.5)
            for _ in range(3):
                start = time.perf_counter()
                for _ in range(10):
                    work = torch.tanh(work)
                best = min(best, (time.perf_counter() - start) / 10)
    finally:
        torch.set_num_threads(threads)
    return max(10, int(ms / 1e3 / best))


SLOW_ROUNDS = _tanh_rounds_taking(SLOW_MS)
SYNC_WORK = _python_taking(SYNC_MS / SYNC_READS)  # few events per step: a profiled read costs 1-7 us by torch
DATA_SLEEP_S = 0.15  # a slow collate per batch


def _slow_forward(module: torch.nn.Module, rounds: int) -> None:
    """The module's forward also runs ``rounds`` tanh over a work tensor of SLOW_SHAPE (inside its own scope, no
    graph, its output unchanged): time in the module and in aten::tanh, few events."""
    original = module.forward

    def forward(x):
        with torch.no_grad():
            work = torch.full(SLOW_SHAPE, 0.5)
            for _ in range(rounds):
                work = torch.tanh(work)
        return original(x)

    module.forward = forward


class _ManyTensors(torch.nn.Module):
    """1000 small parameter tensors and almost no arithmetic (one stack): the optimizer is the step."""

    def __init__(self, count: int = 1000):
        super().__init__()
        self.weights = torch.nn.ParameterList(torch.nn.Parameter(torch.randn(4)) for _ in range(count))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.stack(tuple(self.weights)).mean(0)


FUSED_CPU = not fused_on_cpu_missing(torch.optim.AdamW)
NO_FUSED = pytest.mark.skipif(not FUSED_CPU, reason=str(fused_on_cpu_missing(torch.optim.AdamW)))


def make_run(root, name: str, model: str = "gpt", slow: str = "", optimizer: str = "fused") -> str:
    """Train ``STEPS`` steps of a tiny model under TrainingMonitor(profile=PROFILE); returns the run folder."""
    torch.manual_seed(0)
    log_dir = os.path.join(root, name)
    if model == "gpt":
        net = TinyGPT(vocab=64, block=16, dim=32, heads=2, layers=2)
        data = synthetic_tokens(n=8 * STEPS, block=16, vocab=64)
        if slow == "module":
            _slow_forward(net.h[1].mlp, SLOW_ROUNDS)
    elif model == "tensors":
        net = _ManyTensors()
        data = synthetic_classification(n=8 * STEPS, features=4, classes=4)
    else:
        net = MobileNetV1(num_classes=10, width=0.25)
        data = synthetic_images(n=8 * STEPS, size=32)
        if slow == "module":
            _slow_forward(net.features[3], SLOW_ROUNDS)
    collate = None
    if slow == "data":
        def collate(batch):
            time.sleep(DATA_SLEEP_S)
            return torch.utils.data.default_collate(batch)
    loader = DataLoader(data, batch_size=8, collate_fn=collate)
    flags = dict(foreach=False) if optimizer != "fused" else dict(fused=True) if FUSED_CPU else {}
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3, **flags)
    with TrainingMonitor(net, opt, loader, log_dir=log_dir, quiet=True, profile=PROFILE):
        for x, y in loader:
            loss = net(x, y) if model == "gpt" else torch.nn.functional.cross_entropy(net(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if slow == "sync":
                value = loss.detach()
                for _ in range(SYNC_READS):
                    float(value)
                    sum(range(SYNC_WORK))
    return log_dir


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    # one thread: tiny ops, where a second thread only adds contention on a shared 2-core machine
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield _make_runs(tmp_path_factory.mktemp("trace_runs"))
    finally:
        torch.set_num_threads(threads)


def _side_by_side(root, runs: dict, pin=False) -> dict:
    """The run of each name (``make_run``'s further arguments, as text) made at the same time, one process each: on
    a shared machine the load changes from one minute to the next, and identical code run one after the other is up
    to 50% apart (like with like: both runs see the same load). ``pin=True``: each run on a core of its own, for a
    pair whose runs differ in length: the shorter run's end (its trace written, its threads) otherwise lands on the
    longer run's profiled steps (seen: the unfused optimizer's steps 47 ms alone, 50-135 ms beside the fused one's
    end; 47-53 ms pinned). ``pin="together"``: all on one core, taking turns, for identical code: a load on one of
    two cores otherwise slows one run of 4 ms steps twice over and the other not at all (seen: 8 ms against 4)."""
    code = ("import os, sys, torch; torch.set_num_threads(1); core = sys.argv.pop(1); "
            "core and os.sched_setaffinity(0, {int(core)}); import test_trace_compare as t; t.make_run(*sys.argv[1:])")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, (os.path.dirname(__file__),
                                                                    os.environ.get("PYTHONPATH")))))
    cores = sorted(os.sched_getaffinity(0)) if pin and hasattr(os, "sched_getaffinity") else []
    if pin == "together":
        cores = cores[:1] * len(runs)
    procs = [subprocess.Popen([sys.executable, "-c", code, str(cores[i]) if len(cores) >= len(runs) else "",
                               str(root), name, *extra],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
             for i, (name, extra) in enumerate(runs.items())]
    for proc in procs:
        _, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err[-2000:]
    return {name: os.path.join(root, name) for name in runs}


# each injected slowdown's pair: (the base run's make_run arguments, the slowed run's)
PAIRS = {
    "module": ((), ("gpt", "module")),
    "sync": ((), ("gpt", "sync")),
    "data": ((), ("gpt", "data")),
    # many parameter tensors: the per-parameter loop of an unfused optimizer against one fused kernel
    "optimizer": (("tensors",), ("tensors", "", "foreach_false")),
}


def _make_runs(root) -> dict:
    made = _side_by_side(root, {"base": (), "same": ()}, pin="together")
    for slow in ("module", "sync", "data"):
        made[slow] = make_run(root, slow, slow=slow)
    if FUSED_CPU:  # side by side too: the optimizer's gap is judged against the two runs' own noise
        made.update(_side_by_side(root, {"deep": PAIRS["optimizer"][0], "optimizer": PAIRS["optimizer"][1]},
                                  pin=True))
    made["cnn_base"] = make_run(root, "cnn_base", model="cnn")
    made["cnn_module"] = make_run(root, "cnn_module", model="cnn", slow="module")
    made["root"] = root
    return made


# one comparison per pair of runs, shared by the tests that read it (an optimizer trace takes ~30 s to compare here)
compared = functools.lru_cache(maxsize=None)(compare_traces)


# a pair's gap is measured when it is this many times its noise: a gap just past its noise is real, but the row
# that holds ~96% of it is then within its own noise, and "no contributor beyond noise" is the right answer
MEASURED = 1.5
AGAIN = 2


def _clearness(result) -> float:
    return result.gap_ms / result.noise_ms if result.noise_ms > 0 else math.inf


@functools.cache
def _measured(runs_root: str, base: str, target: str, slow: str):
    """The comparison of an injected slowdown's pair, made again, side by side, when the first pair's steps
    scattered by more than its gap or nearly as much: a loaded minute on a shared 2-core machine can (seen: noise
    +-168 ms on a +160 ms gap, +-78 ms on +71 ms with three test suites running, +-51 ms on +52 ms in CI, +-48 ms
    on +36 ms idle), and "no slowdown (or no contributor) beyond noise" is then the right answer. The tests are
    about a pair whose gap can be measured: up to AGAIN more pairs are made and the clearest is kept; a wrong
    analysis fails on every pair."""
    result = compared(base, target)
    for round_ in range(AGAIN):
        if _clearness(result) >= MEASURED:
            break
        folder = os.path.join(runs_root, f"again{round_}")
        os.makedirs(folder, exist_ok=True)
        again = _side_by_side(folder, {f"{slow}-base": PAIRS[slow][0], slow: PAIRS[slow][1]}, pin=True)
        result = max(result, compared(again[f"{slow}-base"], again[slow]), key=_clearness)
    return result


def _pair(runs: dict, slow: str):
    return _measured(str(runs["root"]), runs["deep" if slow == "optimizer" else "base"], runs[slow], slow)


def _assert_adds_up(result) -> None:
    """At every level the rows, unattributed included, add up to the gap; unattributed stays under 5% of the step."""
    for level in ("module", "op", "kind"):
        rows = result.level_rows(level)
        assert sum(r.delta_ms for r in rows) == pytest.approx(result.gap_ms, abs=1e-6)
        left = next(r for r in rows if r.name == UNATTRIBUTED)
        assert abs(left.delta_ms) <= 0.05 * result.base.median_ms, (level, left)


@pytest.mark.parametrize("slow, level, name", [
    ("module", "module", "h.1.mlp"),
    ("module", "op", "aten::tanh"),
    pytest.param("optimizer", "kind", "optimizer", marks=NO_FUSED),
    ("sync", "kind", "host sync"),
    ("data", "kind", "data loading"),
])
def test_the_injected_slowdown_is_the_top_row_of_its_level(runs, slow, level, name):
    result = _pair(runs, slow)
    assert result.slower, result.verdict()
    top = result.top_of(level)
    assert top.name == name and top.beyond_noise, result.level_rows(level)[:4]
    _assert_adds_up(result)


@pytest.mark.parametrize("slow, rule", [pytest.param("optimizer", "unfused-optimizer", marks=NO_FUSED),
                                        ("sync", "host-sync")])
def test_the_top_contributor_line_names_the_advisor_fix(runs, slow, rule):
    result = _pair(runs, slow)
    assert result.top is not None and result.top.level == "kind"
    assert rule in result.next_action, result.top_line()
    assert result.top_line().count("\n") == 0 and "Next:" in result.top_line()


def test_a_slower_cnn_module_is_found_by_its_path(runs):
    result = compare_traces(runs["cnn_base"], runs["cnn_module"])
    assert result.top_of("module").name == "features.3"
    assert result.top is not None and result.top.name == "features.3"
    assert "slower on the target" in result.top_line()
    _assert_adds_up(result)


# what two runs of identical code drift apart by on this shared machine, beyond their steps' scatter (measured: side
# by side, medians up to 57% apart): the floor a user here passes (docs/traces.md)
SHARED_MACHINE_FLOOR = "1.0"


def test_identical_code_is_no_slowdown_beyond_noise(runs, capsys):
    code = main(["compare-trace", runs["base"], runs["same"], "--noise-floor", SHARED_MACHINE_FLOOR])
    out = capsys.readouterr().out
    assert code == 0 and "no slowdown beyond noise" in out
    result = compare_traces(runs["base"], runs["same"], noise_floor=float(SHARED_MACHINE_FLOOR))
    assert result.top is None and not any(r.beyond_noise for r in result.rows)


def test_threshold_exit_codes_and_outputs(runs, tmp_path, capsys):
    out = tmp_path / "cmp"
    assert main(["compare-trace", runs["base"], runs["module"], "-o", str(out)]) == 1
    text = capsys.readouterr().out
    assert "Top contributor: module h.1.mlp" in text
    with open(out / "trace_compare.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert {r["level"] for r in rows} == {"module", "op", "kind"}
    summary = json.loads((out / "trace_compare.json").read_text())
    assert summary["exit_code"] == 1 and summary["top"]["name"] == "h.1.mlp"
    # a threshold above the gap: still slower beyond noise, but not by more than T
    assert main(["compare-trace", runs["base"], runs["module"], "--threshold", "50", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert len(printed["rows"]) == len(rows)
    # outputs are not overwritten without --force
    assert main(["compare-trace", runs["base"], runs["module"], "-o", str(out)]) == 2
    assert main(["compare-trace", runs["base"], runs["module"], "-o", str(out), "--force"]) == 1


def test_one_step_on_both_sides(runs, capsys):
    result = compare_traces(runs["base"], runs["module"], step=8)
    assert result.base.steps == (8,) and result.target.steps == (8,)
    assert main(["compare-trace", runs["base"], runs["module"], "--step", "99"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no step 99" in err


def test_an_npu_trace_against_a_cpu_trace_lists_the_npu_only_ops(runs, tmp_path, fake_npu_profile):
    result = compare_traces(runs["base"], fake_npu_profile)
    assert result.target.device == "npu" and result.base.device == "cpu"
    only = {r.name for r in result.one_sided("target")}
    assert "npu::npu_rms_norm" in only, only
    _assert_adds_up(result)


@pytest.fixture(scope="module")
def npu_rms_norm():
    """A real dispatcher op in torch_npu's ``npu::`` namespace (the fake torch_npu has no kernels), so the NPU
    side's trace holds a fused op the CPU side computes as a chain of aten ops (a torch.library fragment: every
    torch from 2.1; its kernel is taken off the dispatcher again after the module)."""
    lib = torch.library.Library("npu", "FRAGMENT")
    lib.define("npu_rms_norm(Tensor x, Tensor weight) -> Tensor")
    lib.impl("npu_rms_norm", lambda x, w: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w, "CPU")
    yield torch.ops.npu.npu_rms_norm
    drop_library(lib)


@pytest.fixture
def fake_npu_profile(tmp_path, fake_npu, npu_rms_norm):
    """A ``*_ascend_pt`` folder written by the fake torch_npu profiler around a few steps that call an npu:: op
    (the plugin's fake_npu takes the fake off the path and out of sys.modules again, so later tests see the CPU)."""
    import torch_npu

    out = tmp_path / "npu_prof"
    prof = torch_npu.profiler.profile(
        activities=[torch_npu.profiler.ProfilerActivity.CPU, torch_npu.profiler.ProfilerActivity.NPU],
        schedule=torch_npu.profiler.schedule(wait=0, warmup=0, active=3, repeat=1),
        on_trace_ready=torch_npu.profiler.tensorboard_trace_handler(str(out)),
    )
    net = TinyGPT(vocab=64, block=16, dim=32, heads=2, layers=2)
    x, y = synthetic_tokens(n=8, block=16, vocab=64).tensors
    with prof:
        for _ in range(3):
            net(x, y).backward()
            npu_rms_norm(torch.ones(4, 8), torch.ones(8))
            prof.step()
    folders = [p for p in out.iterdir() if p.name.endswith("_ascend_pt")]
    assert folders
    return str(folders[0])


@pytest.mark.parametrize("case", ["missing", "empty", "not_a_trace", "no_step", "no_common_step", "no_trace_dir"])
def test_bad_inputs_are_one_line_and_exit_2(runs, tmp_path, capsys, case):
    good = runs["base"]
    empty = tmp_path / "empty.pt.trace.json"
    empty.write_text("")
    words = tmp_path / "words.pt.trace.json"
    words.write_text("hello")
    no_step = tmp_path / "nostep.pt.trace.json"
    no_step.write_text(json.dumps({"traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "aten::add", "ts": 0, "dur": 5, "pid": 1, "tid": 1}]}))
    (tmp_path / "no_trace").mkdir()
    args = {
        "missing": [good, str(tmp_path / "nowhere")],
        "empty": [str(empty), good],
        "not_a_trace": [good, str(words)],
        "no_step": [good, str(no_step)],
        "no_common_step": [good, good, "--step", "1000"],
        "no_trace_dir": [good, str(tmp_path / "no_trace")],
    }[case]
    assert main(["compare-trace", *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err


def _side(step_ms: tuple, optimizer_ms: tuple):
    """A side whose steps are ``step_ms``, the optimizer row ``optimizer_ms`` per step, the rest outside any op."""
    median = statistics.median(step_ms)
    rows = {"module": {}, "op": {}, "kind": {"optimizer": statistics.median(optimizer_ms)}}
    rows["kind"]["outside any op"] = median - rows["kind"]["optimizer"]
    outside = tuple(s - o for s, o in zip(step_ms, optimizer_ms))
    per_step = {"module": {}, "op": {}, "kind": {"optimizer": optimizer_ms, "outside any op": outside}}
    return RunSide("t.json", "cpu", "host", tuple(range(len(step_ms))), step_ms, median, 0.0, "none", rows, per_step)


def test_the_noise_floor_is_the_least_noise():
    steps = (10.0, 10.2, 9.9, 10.1, 10.0)  # steps that hardly scatter, 30% slower on the target
    base, target = _side(steps, steps), _side(tuple(1.3 * s for s in steps), tuple(1.3 * s for s in steps))
    assert compare_sides(base, target).slower  # the default 5% floor
    loose = compare_sides(base, target, noise_floor=0.5)
    assert not loose.slower and loose.noise_ms == pytest.approx(5.0)


def test_a_step_four_times_as_long_is_slower_though_it_scatters_four_times_as_many_ms():
    # the step times CI's loaded machine gave the unfused optimizer against the fused one: the target's ms scatter
    # in proportion to its length (absolute spreads combined: noise ±113 ms against a +105 ms gap)
    base = (30.1, 32.3, 28.9, 35.0, 32.0, 40.2, 31.5, 29.7, 33.4)
    target = (137.0, 112.0, 165.0, 110.0, 160.0, 114.0, 162.0, 137.3, 111.0)
    result = compare_sides(_side(base, tuple(0.8 * b for b in base)), _side(target, tuple(t - 6.0 for t in target)))
    assert result.slower and result.gap_ms > result.noise_ms, result.verdict()
    assert result.top_of("kind").name == "optimizer" and result.top_of("kind").beyond_noise
    # the same scatter around one median is noise, whichever side is longer
    same = compare_sides(_side(target, tuple(t - 6.0 for t in target)),
                         _side(tuple(1.3 * t for t in target), tuple(1.3 * t - 6.0 for t in target)))
    assert not same.slower and not any(r.beyond_noise for r in same.rows), same.verdict()
