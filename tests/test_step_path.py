"""The compiled step path (runtime/step_path.c): the same steps, losses and lines as the Python one, errors
contained, and the Python path where it cannot be built (its calls a step: test_monitor.py)."""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import subprocess
import sys
import time

import pytest
import torch
import torch.nn.functional as F
from conftest import built_at_once
from hypothesis import example, given, settings
from hypothesis import strategies as st
from torch.utils.data import DataLoader, TensorDataset

from ascend_tune import TrainingMonitor
from ascend_tune.formats import log_line
from ascend_tune.formats.log_line import format_log_line
from ascend_tune.runtime import capture, compiled, log_windows, sinks, step_clock, steps

built = pytest.mark.skipif(compiled.module() is None, reason="the step path is not compiled here (no C compiler or "
                           "no Python.h)")


def _evaluate(model, optimizer, x, y) -> torch.Tensor:
    """LBFGS's closure: the loss, back-propagated."""
    optimizer.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    return loss


def _loop(style: str, log_dir, log_every: int = 3) -> tuple:
    """A small monitored run of one loop style: (the model's final weights, metrics.jsonl's step lines)."""
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    data = TensorDataset(torch.randn(46, 4), torch.randint(0, 3, (46,)))
    loader = DataLoader(data, batch_size=4)  # a last batch of 2
    optimizer = (torch.optim.LBFGS(model.parameters(), lr=0.1, max_iter=2) if style == "closure" else
                 torch.optim.SGD(model.parameters(), lr=0.1))
    with TrainingMonitor(model, optimizer, loader, log_dir=log_dir, log_every=log_every, quiet=True,
                         accumulate="mean" if style == "accumulate" else "sum"):
        for i, (x, y) in enumerate(loader):
            if style == "closure":
                optimizer.step(functools.partial(_evaluate, model, optimizer, x, y))
                continue
            loss = F.cross_entropy(model(x), y)
            if style == "tuple":
                torch.autograd.backward((loss,))
            elif style == "keywords":
                torch.autograd.backward(retain_graph=False, tensors=loss)
            else:
                loss.backward()
            if style == "accumulate" and i % 2 == 0:
                continue
            optimizer.step()
            optimizer.zero_grad()
    with open(os.path.join(log_dir, "metrics.jsonl")) as fh:
        lines = [json.loads(line) for line in fh if '"step"' in line and '"event"' not in line]
    kept = ("step", "loss", "step_losses", "samples", "window_steps", "first_step", "skipped", "nonfinite")
    return model.weight.detach().clone(), [{k: line[k] for k in kept} for line in lines]


@built
@pytest.mark.parametrize("style", ["plain", "tuple", "keywords", "accumulate", "closure"])
def test_the_compiled_path_logs_the_steps_the_python_path_logs(tmp_path, style):
    weights, lines = _loop(style, tmp_path / "compiled")
    with compiled.python_only():
        python_weights, python_lines = _loop(style, tmp_path / "python")
    assert torch.equal(weights, python_weights)
    assert lines == python_lines
    assert len(lines) >= 2 and lines[-1]["samples"] >= 2


@built
def test_inside_the_block_the_hooks_are_the_compiled_ones(tmp_path):
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(TensorDataset(torch.randn(8, 4)), batch_size=2)
    original = torch.autograd.backward
    with TrainingMonitor(model, optimizer, loader, log_dir=tmp_path, quiet=True) as mon:
        patched = torch.autograd.backward
        while type(patched).__name__ != "Hooks" and hasattr(patched, "__wrapped__"):
            patched = patched.__wrapped__  # config.json's record of the first steps wraps it for a while
        assert type(patched).__name__ == "Hooks" and patched.__wrapped__ is original
        assert patched.__name__ == "backward" and patched.__doc__ == original.__doc__
        assert type(mon._tracker) is compiled.tracker_class() and isinstance(mon._tracker, steps.StepTracker)
        assert type(iter(loader)).__name__ == "iterate_marked"
        assert type(iter(mon.loader([1, 2]))).__name__ == "iterate_marked"
    assert torch.autograd.backward is original


@built
@pytest.mark.parametrize("breaks, reported", [("host.data", "the batch count"), ("tracker", "the loss capture"),
                                              ("host.backward", "the loss capture"), ("clock", "the step log")])
def test_what_the_compiled_hooks_raise_never_reaches_the_loop(tmp_path, breaks, reported):
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(TensorDataset(torch.randn(24, 4), torch.randint(0, 2, (24,))), batch_size=4)
    with TrainingMonitor(model, optimizer, loader, log_dir=tmp_path, quiet=True) as mon:
        for i, (x, y) in enumerate(loader):
            if i == 2:
                if breaks == "host.data":
                    mon._host.data = "not seconds"  # host.data += waited raises in C
                elif breaks == "tracker":
                    mon._tracker._backwards = "not a count"  # the tracker's count cannot grow
                elif breaks == "host.backward":
                    mon._host.backward = "not seconds"  # the backward's time cannot be added
                else:
                    mon.clock = None  # no clock to commit to
            loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    with open(tmp_path / "metrics.jsonl") as fh:
        text = fh.read()
    assert f"{reported}: " in text and "training goes on" in text
    assert '"step":1,' in text  # what was logged before stays


@pytest.mark.parametrize("kind", ["python", "compiled"])
def test_the_marked_iterator_ends_as_a_generator_does(kind):
    """StopIteration for good after the end, and after an error from the loader once it has propagated."""
    iterate = capture.iterate_marked if kind == "python" else getattr(compiled.module(), "iterate_marked", None)
    if iterate is None:
        pytest.skip("the step path is not compiled here")
    seen = []
    marked = iterate(iter([1, 2]), lambda batch, waited: seen.append((batch, type(waited))))
    assert list(marked) == [1, 2] and next(marked, "end") == "end"
    assert seen == [(1, float), (2, float)]

    def failing():
        yield 1
        raise ValueError("a worker died")

    marked = iterate(failing(), lambda batch, waited: None)
    assert next(marked) == 1
    with pytest.raises(ValueError, match="a worker died"):
        next(marked)
    assert next(marked, "end") == "end"


def _closed_steps(log_dir, steps_run: int) -> list:
    """(perf_counter and time read before the step's optimizer.step(), the ClosedStep, the same read after) for each
    step of a monitored run that logs no line."""
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(TensorDataset(torch.randn(2 * steps_run, 4), torch.randint(0, 2, (2 * steps_run,))),
                        batch_size=2)
    reads = []
    with TrainingMonitor(model, optimizer, loader, log_dir=log_dir, log_every=10_000, quiet=True) as mon:
        for x, y in loader:
            F.cross_entropy(model(x), y).backward()
            before = (time.perf_counter(), time.time())
            optimizer.step()
            reads.append((before, (time.perf_counter(), time.time())))
            optimizer.zero_grad()
        closed = [*mon.clock._entries, mon._tracker._closed]  # the last is handed on at the block's end
    return [(before, step, after) for (before, after), step in zip(reads, closed)]


@built
def test_the_compiled_step_reads_the_time_modules_clocks(tmp_path):
    """The step's close reads perf_counter and time as the time module does (in C on Linux): each between the two
    functions' reads around it; a clock that is not the time module's own is called, as before."""
    for before, step, after in _closed_steps(tmp_path / "stock", 6):
        assert before[0] <= step.at <= after[0] and before[1] <= step.wall <= after[1]
        assert type(step.at) is float and type(step.wall) is float
    loaded, ticks = compiled.module(), []

    def counter() -> float:
        ticks.append(len(ticks) + 1000.0)
        return ticks[-1]

    given = (steps.StepTracker, steps.OPTIMIZER, counter, time.time, torch.Tensor, capture.batch_size,
             torch._C._len_torch_function_stack)
    loaded.setup(*given)
    try:
        closed = [step for _, step, _ in _closed_steps(tmp_path / "counted", 3)]
    finally:
        loaded.setup(*given[:2], time.perf_counter, *given[3:])
    assert ticks and {step.at for step in closed} <= set(ticks)
    assert [step.step for step in closed] == [0, 1, 2]


def test_without_a_build_the_python_path_runs(tmp_path):
    """ASCEND_TUNE_NO_COMPILE=1, or a Python without its headers: the Python classes, and the same run."""
    code = ("import sysconfig, sys\n"
            "if sys.argv[1] == 'headers':\n"
            "    paths = sysconfig.get_paths; sysconfig.get_paths = lambda *a: {**paths(*a), 'include': sys.argv[2]}\n"
            "from ascend_tune.runtime import compiled, steps\n"
            "print(compiled.module() is None, compiled.tracker_class() is steps.StepTracker)\n")
    for how, env in (("switch", {"ASCEND_TUNE_NO_COMPILE": "1"}), ("headers", {})):
        done = subprocess.run([sys.executable, "-c", code, how, str(tmp_path)], capture_output=True, text=True,
                              env={**os.environ, "ASCEND_TUNE_CACHE": str(tmp_path / "cache"), **env}, timeout=300)
        assert done.stdout.split() == ["True", "True"], done.stderr
    assert not (tmp_path / "cache").exists()  # nothing was built


def test_the_python_path_logs_what_it_always_did(tmp_path):
    with compiled.python_only():
        weights, lines = _loop("plain", tmp_path)
    assert type(torch.autograd.backward).__name__ != "Hooks"
    assert [line["step"] for line in lines] == [2, 5, 8, 11]
    assert sum(line["samples"] for line in lines) == 46


@built
def test_ranks_building_at_once_and_a_broken_library_in_the_cache(tmp_path):
    """Three processes build into one cache: one library, no temporary file left; a library cut short there is
    built again, not taken as a reason to run in Python from then on."""
    cache = tmp_path / "cache"
    code = "from ascend_tune.runtime import compiled; print(compiled.module() is not None)"
    library = built_at_once(code, cache)
    assert library.name.startswith("step-path-")
    library.write_bytes(b"cut short")
    done = subprocess.run([sys.executable, "-c", code], env={**os.environ, "ASCEND_TUNE_CACHE": str(cache)},
                          capture_output=True, text=True, timeout=300)
    assert done.stdout.strip() == "True", done.stderr
    assert library.stat().st_size > 1000  # built again


_floats = st.floats(allow_nan=True, allow_infinity=True, width=64)
_keys = st.one_of(st.sampled_from(["grad_norm", "step", "epoch", 'a"b', "a\\b", "\u00e9", "a\tb", "", "~"]),
                  st.text(max_size=6))
_values = st.one_of(st.none(), st.booleans(), st.integers(-2**64, 2**64), _floats, st.text(max_size=2))
_field_values = st.recursive(_values, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                              st.tuples(inner, inner),
                                                              st.dictionaries(st.text(max_size=2), inner, max_size=2)),
                             max_leaves=6)


@built
@settings(max_examples=2000, deadline=None)
@given(x=st.one_of(st.floats(allow_nan=False, allow_infinity=False), st.floats(width=32, allow_nan=False,
                   allow_infinity=False), st.floats(min_value=1e-4, max_value=2.0**53),
                   st.integers(-60, 60).map(lambda e: 2.0**e), st.integers(-6, 18).map(lambda e: 10.0**e),
                   st.tuples(st.integers(1, 10**17), st.integers(-25, 5)).map(lambda p: float(f"{p[0]}e{p[1]}"))))
@example(x=0.6931471824645996)  # a float32 loss: 16-17 digits
@example(x=math.nextafter(1e16, 0))  # the last double repr writes without an exponent
@example(x=math.nextafter(1e-4, 0))  # the first below it that repr writes with one
@example(x=2.0**52)  # a power of two: the double below is nearer than the one above
@example(x=-0.0)
def test_a_lines_floats_are_written_as_repr_writes_them(x):
    """The line's floats (step_path.c's short_repr, and dtoa outside its range) are float.__repr__'s text, and
    read back as the same double."""
    text = compiled.module().float_text(x)
    assert text == repr(x) and float(text) == x
    for neighbour in (math.nextafter(x, -math.inf), math.nextafter(x, math.inf)):
        if math.isfinite(neighbour):
            assert compiled.module().float_text(neighbour) == repr(neighbour)


@built
@settings(max_examples=2000, deadline=None)
@given(x=st.one_of(st.floats(allow_nan=False, allow_infinity=False), st.floats(width=32, allow_nan=False,
                   allow_infinity=False), st.floats(min_value=0, max_value=1e4),
                   st.tuples(st.integers(-10**6, 10**6), st.integers(0, 12)).map(lambda p: p[0] / 2**p[1]),
                   st.integers(-80, 70).map(lambda e: 2.0**e), st.integers(-8, 20).map(lambda e: 10.0**e)),
       digits=st.sampled_from([2, 4, 1, 9]))
@example(x=0.03125, digits=4)  # a tie (x * 10^4 is 312.5): to the even 312
@example(x=0.09375, digits=4)  # 937.5: to the even 938
@example(x=0.125, digits=2)
@example(x=0.375, digits=2)
@example(x=-0.00001, digits=4)  # rounds to zero, keeps its sign
@example(x=2.0**63 - 1024, digits=2)  # the largest integer written here
@example(x=1.8446744073709552e15, digits=4)  # x * 10^4 past 64 bits: dtoa's
@example(x=2.0**-74, digits=2)
def test_a_lines_fixed_floats_are_written_as_format_writes_them(x, digits):
    """log.txt's two floats (step_path.c's fixed_text, and dtoa where it does not write them) are written as
    format_log_line's f-string writes them."""
    for value in (x, math.nextafter(x, -math.inf), math.nextafter(x, math.inf)):
        if math.isfinite(value):
            assert compiled.module().float_text(value, digits) == f"{value:.{digits}f}"


@built
def test_only_finite_floats_have_a_text():
    for value in (math.nan, math.inf, -math.inf, 1, "1.0"):
        with pytest.raises(ValueError, match="finite float"):
            compiled.module().float_text(value)


@built
@settings(max_examples=300, deadline=None)
@given(losses=st.lists(st.one_of(st.none(), _floats), min_size=1, max_size=4),
       seconds=st.one_of(st.just(0.0), st.floats(min_value=1e-9, max_value=1e6)),
       samples=st.one_of(st.none(), st.integers(min_value=0, max_value=2**64)),
       first=st.one_of(st.integers(min_value=-10**3, max_value=10**8), st.sampled_from([2**63 - 2, -2**63])),
       epoch=st.integers(min_value=-10**4, max_value=10**4), rank=st.integers(min_value=0, max_value=512),
       warmup=st.booleans(), host=st.tuples(_floats, _floats),
       when=st.floats(min_value=0, max_value=4e9),
       fields=st.one_of(st.none(), st.fixed_dictionaries({  # health's, or any a feature adds
           "grad_norm": st.one_of(st.none(), _floats), "step_grad_norms": st.lists(st.one_of(st.none(), _floats)),
           "grad_nonfinite": st.one_of(st.none(), st.integers(0, 2**70))}), st.dictionaries(_keys, _field_values)))
@example(losses=[1.0], seconds=0.5, samples=4, first=3, epoch=0, rank=0, warmup=False, host=(0.1, 0.2), when=1e9,
         fields={"step": 1.0, "x": 2})  # a window's own name: json keeps the record's place
@example(losses=[1.0], seconds=0.5, samples=4, first=3, epoch=0, rank=0, warmup=False, host=(0.1, 0.2), when=1e9,
         fields={"n": [1.0, (2, None, True)], "m": {"a": 1}})  # nested lists; a dict (Python's to write)
@example(losses=[1.0], seconds=0.5, samples=4, first=3, epoch=0, rank=0, warmup=False, host=(0.1, 0.2), when=1e9,
         fields={"a\\b": 1.0})  # a key json escapes
@example(losses=[1.0], seconds=0.5, samples=4, first=3, epoch=0, rank=0, warmup=False, host=(0.1, 0.2), when=1e9,
         fields={'q"': 1.0, "~": [0.5, -0.0]})
def test_the_compiled_lines_are_the_python_lines(losses, seconds, samples, first, epoch, rank, warmup, host, when,
                                                 fields):
    """step_path.c's two lines of a window, with the fields features add, are sinks.metrics_line's and
    format_log_line's bytes; where it would write otherwise than json (a NaN, an infinity, a step without a loss,
    an int past 64 bits, a key json escapes or one of the record's own, a dict) it hands the window to Python
    (None), never a line of its own."""
    entries = [steps.ClosedStep(first + i, None, None, i == 0, 0.0, when + i) for i in range(len(losses))]
    window = step_clock.make_window(entries, seconds, samples, losses)
    context = {"epoch": epoch, "rank": rank, "world_size": rank + 1, "warmup": warmup, "memory_mib": None,
               "host_s": {"data": host[0], "backward": host[1]}, **(fields or {})}
    metrics = sinks.metrics_line(window, context)
    text = format_log_line(window.last_step, window.loss, window.steps_per_sec, window.end_time) + "\n"  # its stamp
    made = compiled.module().plain_lines(window, epoch, rank, rank + 1, warmup, *host, fields)
    assert made in (None, (metrics, text.encode()))
    plain = (None not in losses and b"NaN" not in metrics and b"Infinity" not in metrics
             and max(first + len(losses) - 1, samples or 0) < 2**63 and _plain_fields(fields or {}))
    assert (made is not None) == plain


@built
@pytest.mark.parametrize("norms", [0, 30, 400])
def test_a_long_line_is_the_python_line(norms):
    """A line past the buffer's own room (a feature's long list: per-step norms of a 400-step window) grows it on
    the heap; its bytes are still the Python line's."""
    losses = [0.1 * (i + 1) for i in range(4)]
    entries = [steps.ClosedStep(7 + i, None, None, False, 0.0, 1.8e9 + i) for i in range(4)]
    window = step_clock.make_window(entries, 0.25, 16, losses)
    fields = {"grad_norm": 1.0 / 3, "step_grad_norms": [math.pi * (i + 1) for i in range(norms)]}
    context = {"epoch": 2, "rank": 0, "world_size": 1, "warmup": False, "memory_mib": None,
               "host_s": {"data": 0.001, "backward": 0.002}, **fields}
    made = compiled.module().plain_lines(window, 2, 0, 1, False, 0.001, 0.002, fields)
    assert made is not None and made[0] == sinks.metrics_line(window, context)
    assert len(made[0]) > 1024 * (norms > 100)


def _plain_fields(fields: dict) -> bool:
    """Whether step_path.c writes these fields itself: plain keys (printable ASCII, no quote or backslash, none of a
    window's or the context's own), values None, bools, ints of 64 bits, finite floats, lists and tuples of them."""
    def plain(value) -> bool:
        if type(value) in (list, tuple):
            return all(map(plain, value))
        if type(value) is int:
            return -2**63 <= value < 2**63
        return value is None or type(value) is bool or type(value) is float and math.isfinite(value)

    own = set(sinks._RECORD_KEYS)
    return all(type(k) is str and k.isascii() and k.isprintable() and '"' not in k and "\\" not in k and k not in own
               and plain(v) for k, v in fields.items())


def _plain_run(log_dir, log_every: int, nan_at: int = -1, health=None, before_step=None) -> list:
    """12 steps of the usual loop, quiet, at ``log_every`` (a NaN loss at step ``nan_at``; ``before_step()`` called
    at each step's start): metrics.jsonl's lines."""
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(TensorDataset(torch.randn(46, 4), torch.randint(0, 3, (46,))), batch_size=4)
    with TrainingMonitor(model, optimizer, loader, log_dir=log_dir, log_every=log_every, quiet=True, health=health):
        for i, (x, y) in enumerate(loader):
            if before_step is not None:
                before_step()
            loss = F.cross_entropy(model(x), y) * (math.nan if i == nan_at else 1.0)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return (log_dir / "metrics.jsonl").read_bytes().splitlines(keepends=True)


@built
@pytest.mark.parametrize("log_every", [1, 3])
@pytest.mark.parametrize("health", [None, True])
def test_a_plain_windows_lines_are_written_in_c_byte_for_byte_as_python_writes_them(tmp_path, monkeypatch,
                                                                                    log_every, health):
    by_python = []
    write = log_windows.LogWindows.write
    monkeypatch.setattr(log_windows.LogWindows, "write",
                        lambda self, window, *args: by_python.append(window.last_step) or write(self, window, *args))
    lines = _plain_run(tmp_path, log_every, health=health)
    texts = (tmp_path / "log.txt").read_text().splitlines(keepends=True)
    assert len(lines) == len(texts) == -(-12 // log_every)
    # Python wrote only windows whose time stamp was new to its second: a line in the second of the line before it
    # is C's (the lines of these tiny steps come milliseconds apart: only a second's boundary separates two)
    steps = [json.loads(line)["step"] for line in lines]
    again = {step for step, text, before in zip(steps[1:], texts[1:], texts) if text[:21] == before[:21]}
    assert again and not again & set(by_python)
    for line, text in zip(lines, texts):
        record = json.loads(line)
        window = step_clock.Window(record["first_step"], record["step"], record["seconds"], record["samples"],
                                   tuple(record["step_losses"]), record["skipped"], record["time"], record["loss"],
                                   record["nonfinite"], record["steps_per_sec"], record["samples_per_sec"])
        keys = list(record)
        context = {key: record[key] for key in keys[keys.index("epoch"):]}  # the monitor's, then the features'
        assert ("grad_norm" in context) == bool(health)
        assert sinks.metrics_line(window, context) == line
        assert format_log_line(window.last_step, window.loss, window.steps_per_sec, window.end_time) + "\n" == text


@built
def test_a_line_in_a_new_second_is_written_in_c_with_the_stamp_python_makes(tmp_path, monkeypatch):
    """A line whose second has no time stamp cached yet is C's too: log_line.stamp makes the stamp and caches it."""
    by_python = []
    write = log_windows.LogWindows.write
    monkeypatch.setattr(log_windows.LogWindows, "write",
                        lambda self, window, *args: by_python.append(window.last_step) or write(self, window, *args))
    cache = log_line._stamp_cache
    lines = _plain_run(tmp_path, 1, before_step=lambda: cache.__setitem__(slice(None), [None, ""]))  # each new
    texts = (tmp_path / "log.txt").read_text().splitlines(keepends=True)
    assert len(lines) == len(texts) == 12 and by_python == []
    assert cache == [int(json.loads(lines[-1])["time"]), texts[-1][1:20]]  # the last line's second, cached
    for line, text in zip(lines, texts):
        record = json.loads(line)
        assert format_log_line(record["step"], record["loss"], record["steps_per_sec"], record["time"]) + "\n" == text


@built
def test_a_field_a_subclass_redefines_is_read_by_its_name(tmp_path):
    """step_path.c reads the monitor's step fields where their slots lie (compiled.StepFields); a name a subclass
    gives another meaning (here a property over the slot) is read as Python reads it."""
    class EveryThird(TrainingMonitor):
        @property
        def log_every(self):
            return 3

        @log_every.setter
        def log_every(self, value):
            compiled.StepFields.log_every.__set__(self, value)  # the slot holds what was given: 1

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(TensorDataset(torch.randn(48, 4), torch.randint(0, 3, (48,))), batch_size=4)
    with EveryThird(model, optimizer, loader, log_dir=tmp_path, log_every=1, quiet=True):
        for x, y in loader:
            loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [2, 5, 8, 11]


@built
def test_a_nan_loss_is_written_as_json_writes_it_on_either_path(tmp_path):
    timing = ("steps_per_sec", "samples_per_sec", "time", "seconds", "host_s")
    runs = []
    for name, block in (("compiled", contextlib.nullcontext), ("python", compiled.python_only)):
        with block():
            lines = _plain_run(tmp_path / name, 1, nan_at=4)
        runs.append([{k: v for k, v in json.loads(line).items() if k not in timing} for line in lines])
    assert b'"loss":NaN' in lines[4] and runs[0][4]["nonfinite"] == 1
    assert repr(runs[0]) == repr(runs[1])  # NaN == NaN in the repr
    logs = [(tmp_path / name / "log.txt").read_text().splitlines() for name in ("compiled", "python")]
    assert [line.split("]", 1)[1].split(", Train Steps")[0] for line in logs[0]] == \
        [line.split("]", 1)[1].split(", Train Steps")[0] for line in logs[1]]
    assert "Train Loss: nan" in logs[0][4]


class _Rider:
    """A feature reading one value a step along with the losses, as a tensor subclass (a Parameter): not a plain host
    tensor, so the compiled path hands the window's read to Python (LogWindows.read)."""

    name = "rider"

    def read_along(self, ctx, entries):
        return torch.nn.Parameter(torch.tensor([float(e.step) for e in entries]), requires_grad=False)

    def on_window(self, ctx, window, values):
        return {"last_seen": values[-1]}


@built
def test_a_window_whose_riders_are_not_on_the_host_is_read_by_python_with_the_same_line(tmp_path, monkeypatch):
    from ascend_tune.contract.callbacks import Callback

    rider = type("Rider", (_Rider, Callback), {})
    handed = []
    read = log_windows.LogWindows.read
    monkeypatch.setattr(log_windows.LogWindows, "read", lambda self, entries, *args: handed.append(
        entries[-1].step) or read(self, entries, *args))
    records = []
    for name, block in (("compiled", contextlib.nullcontext), ("python", compiled.python_only)):
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 3)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        loader = DataLoader(TensorDataset(torch.randn(24, 4), torch.randint(0, 3, (24,))), batch_size=4)
        with block(), TrainingMonitor(model, optimizer, loader, log_dir=tmp_path / name, log_every=2, quiet=True,
                                      callbacks=[rider()]):
            for x, y in loader:
                F.cross_entropy(model(x), y).backward()
                optimizer.step()
                optimizer.zero_grad()
        lines = (tmp_path / name / "metrics.jsonl").read_text().splitlines()
        records.append([(r["step"], r["step_losses"], r["last_seen"]) for r in map(json.loads, lines)])
    assert records[0] == records[1] == [(s, records[1][i][1], float(s)) for i, s in enumerate((1, 3, 5))]
    assert handed == [1, 3, 5] * 2  # each window of either run read by Python
