"""Overhead of TrainingMonitor per step, end to end: monitored minus bare, beside the guide's own snippet.

The workload is a ``Linear(4, 2)`` step (batch 2 from a ``DataLoader``, cross-entropy, SGD, one thread), so what
the monitor adds is most of what changes. Each mode runs the same 2000-step loop; the modes of one repeat run
back to back, in alternating order from one repeat to the next (7 repeats), and each is timed from its first batch
to its last ``optimizer.step()`` in this process's CPU time (``__enter__`` and ``__exit__`` are once a run, not a
step, and left out). A mode's cost is its loop time minus the bare loop's of the same repeat, per step, the median
over the repeats:

- the monitor at ``log_every=1``, ``10`` and ``100`` (``quiet=True``, ``tune=False``: the fused-optimizer swap is a
  speed-up of its own, measured in optimizer_swap.py);
- the same on the Python step path at ``log_every=1``, ``10`` and ``100``, where the step path is compiled
  (runtime/compiled.py): what the C twins of the per-step hooks and of a plain window's line save, in the same
  interleaving;
- the guide's snippet the monitor replaces: ``loss.item()`` and a ``logging`` line to a file every step;
- three floors at the monitor's own hook points (the patched ``torch.autograd.backward``, the optimizer's step pre-
  and post-hook, a generator around the loader): "hooks, no-op" calls through them and does nothing else; "a
  minimal step tracker" does there, in plain Python, the least a step log must do (keep the step's detached loss,
  count its samples, close the step with its two clocks at the optimizer's step, hand it on at the next batch, a
  thread-local depth for reentrant backwards), writing no line; "a minimal step log" is that tracker writing a
  line at every step as the monitor must (the loss read back, metrics.jsonl's fields with seven exact floats and
  log.txt's line, one ``os.write`` to each file as it is made). What a pure-Python monitor could cost at best.
  Where the step path is compiled, a fourth: "a minimal step tracker, compiled" (minimal_tracker.c, built as the
  package builds its step path) does the minimal tracker's work in C, through the monitor's compiled loader wrapper:
  what a compiled step path could cost at best, writing no line.

Goals (issue #34), each a ratio measured in this run: the monitor's own cost a step, end to end (the fastest
monitored loop minus the fastest bare one), at most 1/3 of the snippet's at ``log_every=1`` and 1/6 at
``log_every=10``; a ~5 ms MLP step (make_setup, its batch sized to 5 ms of this machine's core by mlp_batch) at
``log_every=10``, 9 interleaved repeats of 100 steps, the fastest monitored run over the fastest bare one, at most
1.01x. Beside them the Python calls a step of ours:
``sys.setprofile`` counts of the package's functions on the stubbed loop below.
``--cnn`` adds whole runs on a ~5 ms CNN step (monitored against bare, the same interleaving). ``--hooks`` adds the
monitor's own path alone (the torch work stubbed: a no-op backward and optimizer), thread CPU time, the fastest of
30 interleaved blocks: steadier than whole runs on a loaded machine, but not end to end.
``--line-parts`` adds the minimal log taken apart (its read alone; its two lines formatted but not written): what
the read, the format and the two writes each cost a line.
Usage: python benchmarks/monitor_overhead.py [--steps 2000] [--repeats 7] [--mlp-repeats 9] [--mlp-batch B] [--cnn]
       [--hooks] [--line-parts]
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.machinery
import importlib.util
import logging
import os
import statistics
import sys
import sysconfig
import tempfile
import threading
import time

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import ascend_tune
from ascend_tune import TrainingMonitor
from ascend_tune.contract import native
from ascend_tune.runtime import compiled
from ascend_tune.runtime.capture import iterate_marked

GOALS = {1: 1 / 3, 10: 1 / 6}  # the monitor's own cost a step over the snippet's, end to end
MLP_GOAL = 1.01  # a ~5 ms step at log_every=10, monitored over bare
MLP_STEP = 5e-3  # the row's step, thread CPU seconds: its batch is sized to it on the machine that runs it


def make_setup(steps: int, batch: int = 80):
    """An MLP step (256-512-512-10, SGD with momentum) with a DataLoader (profile_overhead.py's workload): batch 80
    is ~5-7 ms on the machines the goals were set on, 2-3 ms on a recent x86 core; :func:`mlp_batch` sizes it."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    data = TensorDataset(torch.randn(steps * batch, 256), torch.randint(0, 10, (steps * batch,)))
    return model, optimizer, DataLoader(data, batch_size=batch)


def mlp_batch(target: float, steps: int = 40) -> int:
    """The batch (a multiple of 8, at least 80) whose bare MLP step takes ``target`` thread CPU seconds here: the
    issue's row is a ~5 ms step, whatever the core. Two rounds: the step is linear in the batch plus a fixed part."""
    batch = 80
    for _ in range(2):
        setup = make_setup(steps + 10, batch)
        marks: list = []
        loop(*setup, per_step=lambda loss, marks=marks: marks.append(time.thread_time()))
        step = statistics.median(b - a for a, b in zip(marks[10:], marks[11:]))  # past the first ten (warm-up)
        batch = max(80, round(batch * target / step / 8) * 8)
    return batch


def make_tiny_setup(steps: int):
    """The per-step workload: a Linear(4, 2) step, so the monitor's own work is most of what it adds."""
    torch.manual_seed(0)
    model = nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    data = TensorDataset(torch.randn(steps * 2, 4), torch.randint(0, 2, (steps * 2,)))
    return model, optimizer, DataLoader(data, batch_size=2)


def make_cnn_setup(steps: int):
    """The whole-run workload: a small CNN, ~5 ms a step on one thread."""
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(inplace=True), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(inplace=True), nn.AdaptiveAvgPool2d(4),
        nn.Flatten(), nn.Linear(32 * 16, 10),
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    data = TensorDataset(torch.randn(steps * 12, 3, 32, 32), torch.randint(0, 10, (steps * 12,)))
    return model, optimizer, DataLoader(data, batch_size=12)


def loop(model, optimizer, loader, per_step=None) -> None:
    for x, y in loader:
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if per_step is not None:
            per_step(loss)


def timed_loop(setup, per_step=None) -> float:
    """CPU seconds of one loop over ``setup``'s loader."""
    start = time.process_time()
    loop(*setup, per_step=per_step)
    return time.process_time() - start


def run_bare(setup, out: str) -> float:
    return timed_loop(setup)


def run_monitored(log_every: int, python: bool = False):
    """The monitor at ``log_every``; ``python``: on the Python step path where the compiled one is built."""
    def run(setup, out: str) -> float:
        model, optimizer, loader = setup
        with compiled.python_only() if python else contextlib.nullcontext():
            with TrainingMonitor(model, optimizer, loader, log_dir=out, log_every=log_every, quiet=True, tune=False):
                return timed_loop(setup)

    return run


def run_seed_snippet(setup, out: str) -> float:
    """The guide's snippet: ``loss.item()`` and a ``logging`` line to a file every step."""
    log = logging.getLogger("seed_style")
    log.propagate = False
    handler = logging.FileHandler(os.path.join(out, "seed.log"))
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    state = {"step": 0, "t": time.time()}

    def per_step(loss):
        now = time.time()
        rate = 1 / (now - state["t"]) if now > state["t"] else float("inf")
        log.info(f"(step={state['step']:07d}) Train Loss: {loss.item():.4f}, Train Steps/Sec: {rate:.2f}")
        state["step"] += 1
        state["t"] = now

    try:
        return timed_loop(setup, per_step)
    finally:
        log.removeHandler(handler)
        handler.close()


class _MinimalTracker:
    """The least a step log must do per step (the "minimal step tracker" floor of the module docstring)."""

    def __init__(self) -> None:
        self.loss = None
        self.samples = 0
        self.in_step = False
        self.closed = None
        self.window: list = []  # the closed steps a log window would read: dropped every 100

    def backward(self, loss: torch.Tensor) -> None:
        if not self.in_step:
            self.loss = loss.detach()

    def batch(self, batch, waited: float) -> None:
        self._hand_on()
        self.samples += batch[0].size(0)

    def pre(self, optimizer, args, kwargs) -> None:
        self._hand_on()
        self.in_step = True

    def post(self, optimizer, args, kwargs) -> None:
        self.in_step = False
        self.closed = (self.loss, self.samples, time.perf_counter(), time.time())
        self.loss, self.samples = None, 0

    def _hand_on(self) -> None:
        closed = self.closed
        if closed is not None:
            self.closed = None
            self.window.append(closed)
            if len(self.window) == 100:
                self.window = []


def _at_hook_points(setup, on_loss=None, on_batch=None, pre=None, post=None, patch=None, iterate=iterate_marked):
    """``timed_loop(setup)`` with the monitor's hook points installed, calling the given functions (None: the point
    calls through and does nothing else). ``patch``: what stands in for ``torch.autograd.backward`` instead of the
    wrapper calling ``on_loss``; ``iterate``: the loader's wrapper, given ``on_batch``."""
    model, optimizer, loader = setup
    original = torch.autograd.backward
    local = threading.local()

    def backward(tensors, *args, **kwargs):
        if on_loss is None:
            return original(tensors, *args, **kwargs)
        depth = getattr(local, "depth", 0)
        if not depth and type(tensors) is torch.Tensor and tensors.numel() == 1:
            on_loss(tensors)
        local.depth = depth + 1
        try:
            return original(tensors, *args, **kwargs)
        finally:
            local.depth = depth

    def nothing(optimizer, args, kwargs):
        return None

    from torch.optim.optimizer import register_optimizer_step_post_hook

    handles = [optimizer.register_step_pre_hook(pre or nothing), register_optimizer_step_post_hook(post or nothing)]
    torch.autograd.backward = patch or backward
    try:
        start = time.process_time()
        # the monitor's own loader wrapper (its batch timed, one call a batch), or a bare generator
        loop(model, optimizer, iterate(loader, on_batch) if on_batch else (batch for batch in loader))
        return time.process_time() - start
    finally:
        torch.autograd.backward = original
        for handle in handles:
            handle.remove()


def run_hooks_noop(setup, out: str) -> float:
    return _at_hook_points(setup)


def run_minimal_tracker(setup, out: str) -> float:
    tracker = _MinimalTracker()
    return _at_hook_points(setup, tracker.backward, tracker.batch, tracker.pre, tracker.post)


def _compiled_floor():
    """minimal_tracker.c (beside this script) built and loaded as the package builds its step path, or None where
    it cannot be (no compiler, no Python.h)."""
    source = os.path.join(os.path.dirname(os.path.abspath(__file__)), "minimal_tracker.c")
    include, suffix = sysconfig.get_paths()["include"], importlib.machinery.EXTENSION_SUFFIXES[0]

    def load(path: str):
        spec = importlib.util.spec_from_file_location("minimal_tracker", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    try:
        with open(source, encoding="utf-8") as fh:
            text = fh.read()
        return native.load_built("bench-minimal-tracker", suffix, "minimal_tracker.c", text,
                                 ((*compiled.FLAGS, f"-I{include}"),), (*compiled.FLAGS, include, sys.version, suffix),
                                 load)
    except (OSError, ImportError) as exc:
        print(f"monitor_overhead: no compiled floor ({exc})")
        return None


def run_minimal_compiled(module):
    """The minimal step tracker compiled: the same work at the same hook points, in C (minimal_tracker.c)."""
    def run(setup, out: str) -> float:
        tracker = module.Tracker(torch.autograd.backward, torch.Tensor)
        return _at_hook_points(setup, on_batch=tracker.batch, pre=tracker.pre, post=tracker.post, patch=tracker,
                               iterate=compiled.module().iterate_marked)  # the monitor's own loader wrapper, in C

    return run


# the least a log line can be with the monitor's fields: metrics.jsonl's at full precision (exact float reprs: what a
# reader takes back bit for bit) and log.txt's guide line
_LEAST_JSON = ('{"step":%d,"loss":%s,"steps_per_sec":%r,"samples_per_sec":%r,"time":%r,"first_step":%d,'
               '"window_steps":1,"seconds":%r,"samples":%d,"step_losses":[%s],"nonfinite":0,"skipped":0,"epoch":0,'
               '"rank":0,"world_size":1,"warmup":false,"memory_mib":null,"host_s":{"data":%r,"backward":%r}}\n')
_LEAST_TEXT = "[%s] (step=%07d) Train Loss: %.4f, Train Steps/Sec: %.2f\n"


class _MinimalLog(_MinimalTracker):
    """The minimal step tracker writing a line at every step the way the monitor must: the step's loss read back,
    metrics.jsonl's line (its fields, seven exact floats) and log.txt's, each file written with one ``os.write`` as
    it is made (a killed run keeps every line before the kill). What a pure-Python monitor's line could cost at
    best; the write and the format alone bound what a compiled one could."""

    def __init__(self, out: str, parts: str = "write") -> None:
        super().__init__()
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND
        self.files = (os.open(os.path.join(out, "least.jsonl"), flags), os.open(os.path.join(out, "least.txt"), flags))
        self.step, self.last, self.second, self.stamp = 0, time.perf_counter(), None, ""
        self.parts = parts  # how far a line goes: "read" (the loss read back), "format" (and its two lines), "write"

    def post(self, optimizer, args, kwargs) -> None:
        super().post(optimizer, args, kwargs)
        loss, samples, at, wall = self.closed
        value, seconds, step = loss.item(), at - self.last, self.step
        self.last, self.step = at, step + 1
        if self.parts == "read":
            return
        if int(wall) != self.second:  # the stamp made once a second, as the monitor makes it
            self.second, self.stamp = int(wall), time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(wall))
        loss_text = float.__repr__(value)  # once: the loss and the window's one step loss
        metrics = (_LEAST_JSON % (step, loss_text, 1 / seconds, samples / seconds, wall, step, seconds, samples,
                                  loss_text, seconds / 4, seconds / 3)).encode()  # two stand-ins for the host times
        text = (_LEAST_TEXT % (self.stamp, step, value, 1 / seconds)).encode()
        if self.parts == "write":
            os.write(self.files[0], metrics)
            os.write(self.files[1], text)

    def close(self) -> None:
        for fd in self.files:
            os.close(fd)


def run_minimal_log(parts: str = "write"):
    def run(setup, out: str) -> float:
        log = _MinimalLog(out, parts)
        try:
            return _at_hook_points(setup, log.backward, log.batch, log.pre, log.post)
        finally:
            log.close()

    return run


FLOORS = ("floor: hooks, no-op", "floor: a minimal step tracker", "floor: a minimal log, a line a step",
          "floor: a minimal step tracker, compiled")
PYTHON_PATH = "monitor, Python path"  # the step path uncompiled (runtime/compiled.py), where it is compiled


def interleaved(modes: dict, make, steps: int, repeats: int) -> dict:
    """CPU seconds of each mode's loop, one entry per repeat; the order alternates between repeats."""
    seconds: dict = {name: [] for name in modes}
    with tempfile.TemporaryDirectory() as tmp:
        for name, run in modes.items():  # warm the kernels, the allocator and the monitor's lazy imports once
            out = os.path.join(tmp, "warm-" + "".join(c if c.isalnum() else "_" for c in name))
            os.makedirs(out)
            run(make(20), out)
        for rep in range(repeats):
            order = list(modes) if rep % 2 == 0 else list(reversed(modes))
            for name in order:
                setup = make(steps)
                out = os.path.join(tmp, f"{rep}-{name.replace(' ', '_').replace('=', '')}")
                os.makedirs(out)
                seconds[name].append(modes[name](setup, out))
    return seconds


def added_per_step(seconds: dict, steps: int) -> dict:
    """Each mode's added seconds a step: its loop minus the bare loop of the same repeat, median over repeats."""
    bare = seconds["bare"]
    return {name: statistics.median((m - b) / steps for m, b in zip(runs, bare))
            for name, runs in seconds.items() if name != "bare"}


def fastest_added(seconds: dict, steps: int) -> dict:
    """Each mode's fastest loop minus the fastest bare loop, a step: what a quiet moment of the machine shows."""
    return {name: (min(runs) - min(seconds["bare"])) / steps for name, runs in seconds.items() if name != "bare"}


class _NoopOptimizer(torch.optim.Optimizer):
    def __init__(self, params):
        super().__init__(params, {})

    def step(self, closure=None):
        return None


def hooks_only(log_every: int, steps: int = 1000, blocks: int = 30) -> float:
    """Seconds a step the monitor's own path adds with the torch work stubbed (see the module docstring)."""
    def noop(tensors, *args, **kwargs):
        return None

    real, torch.autograd.backward = torch.autograd.backward, noop  # the monitor wraps this no-op
    try:
        p = nn.Parameter(torch.ones(2))
        loss, batch = (p * 2).sum(), [torch.zeros(2, 4), torch.zeros(2, dtype=torch.long)]
        hooked, other = _NoopOptimizer([p]), _NoopOptimizer([p])
        loader = DataLoader(TensorDataset(torch.zeros(4, 4)), batch_size=2)
        bare, monitored = [], []
        with tempfile.TemporaryDirectory() as tmp:
            with TrainingMonitor(None, hooked, loader, log_dir=tmp, log_every=log_every, quiet=True, tune=False):
                on_batch, backward = loader.__dict__["_ascend_tune_marks"][2], torch.autograd.backward
                for _ in range(blocks):
                    start = time.thread_time()
                    for _ in range(steps):
                        noop(loss)
                        other.step()
                    middle = time.thread_time()
                    for _ in range(steps):
                        on_batch(batch, 0.0)  # what the wrapped loader calls for each batch
                        backward(loss)
                        hooked.step()
                    bare.append(middle - start)
                    monitored.append(time.thread_time() - middle)
    finally:
        torch.autograd.backward = real
    return (min(monitored) - min(bare)) / steps


def calls_per_step(log_every: int, steps: int = 200) -> float:
    """Python calls of ours (``sys.setprofile`` "call" events of a function of the package) a step of the stubbed
    loop makes (torch's own, the same with or without the monitor, are not counted)."""
    def noop(tensors, *args, **kwargs):
        return None

    package = os.path.dirname(os.path.abspath(ascend_tune.__file__))
    seen = [0]

    def profile(frame, event, arg):
        if event == "call" and frame.f_code.co_filename.startswith(package):
            seen[0] += 1

    real, torch.autograd.backward = torch.autograd.backward, noop
    try:
        p = nn.Parameter(torch.ones(2))
        loss, batch = (p * 2).sum(), [torch.zeros(2, 4), torch.zeros(2, dtype=torch.long)]
        hooked = _NoopOptimizer([p])
        loader = DataLoader(TensorDataset(torch.zeros(4, 4)), batch_size=2)
        with tempfile.TemporaryDirectory() as tmp:
            with TrainingMonitor(None, hooked, loader, log_dir=tmp, log_every=log_every, quiet=True, tune=False):
                on_batch = loader.__dict__["_ascend_tune_marks"][2]
                for _ in range(20):  # past the first steps' recording (experiment=)
                    on_batch(batch, 0.0)
                    torch.autograd.backward(loss)
                    hooked.step()
                sys.setprofile(profile)
                try:
                    for _ in range(steps):
                        on_batch(batch, 0.0)
                        torch.autograd.backward(loss)
                        hooked.step()
                finally:
                    sys.setprofile(None)
        return seen[0] / steps
    finally:
        torch.autograd.backward = real


def mlp_ratio(repeats: int, batch: int, steps: int = 100) -> tuple:
    """(the fastest monitored run over the fastest bare one, the bare step's seconds, the monitored step's median
    and 10th percentile over the bare one's, the fastest second bare run over the fastest bare one, and its median
    and 10th percentile step over the bare one's): the MLP step of ``batch`` at ``log_every=10``, ``repeats``
    interleaved repeats of ``steps`` steps. The percentiles pool every step's thread CPU time over the repeats (log
    steps included): a quiet step's cost holds still where whole runs move by several percent on a shared machine.
    The second bare run (A/A) is the same loop unmonitored, interleaved like the others: how far two identical runs'
    ratios move on this machine, beside the goal's 1%."""
    times: dict = {}

    def run(monitored: bool, name: str):
        def inner(setup, out: str) -> float:
            marks = [time.thread_time()]
            per_step = lambda loss: marks.append(time.thread_time())  # noqa: E731
            if monitored:
                model, optimizer, loader = setup
                with TrainingMonitor(model, optimizer, loader, log_dir=out, log_every=10, quiet=True, tune=False):
                    seconds = timed_loop(setup, per_step)
            else:
                seconds = timed_loop(setup, per_step)
            times.setdefault(name, []).extend(b - a for a, b in zip(marks, marks[1:]))
            return seconds

        return inner

    names = ("bare", "monitor log_every=10", "bare again")
    seconds = interleaved({name: run(name.startswith("monitor"), name) for name in names},
                          lambda n: make_setup(n, batch), steps, repeats)
    warm = 20  # interleaved's warm-up runs
    bare, monitored, again = (sorted(times[name][warm:]) for name in names)

    def at(values: list, q: float) -> float:
        return values[int(q * (len(values) - 1))]

    return (min(seconds[names[1]]) / min(seconds["bare"]), min(seconds["bare"]) / steps,
            at(monitored, 0.5) / at(bare, 0.5), at(monitored, 0.1) / at(bare, 0.1),
            min(seconds["bare again"]) / min(seconds["bare"]), at(again, 0.5) / at(bare, 0.5),
            at(again, 0.1) / at(bare, 0.1))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--mlp-repeats", type=int, default=9, help="the MLP row's repeats (0: no MLP row)")
    parser.add_argument("--mlp-batch", type=int, default=0, help="the MLP row's batch (default: a ~5 ms step here)")
    parser.add_argument("--cnn", action="store_true", help="also whole runs on a ~5 ms CNN step (200 steps)")
    parser.add_argument("--hooks", action="store_true", help="also the monitor's own path, torch work stubbed")
    parser.add_argument("--line-parts", action="store_true",
                        help="also the minimal log's line taken apart: the read alone, the lines formatted unwritten")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    modes = {"bare": run_bare, **{f"monitor log_every={k}": run_monitored(k) for k in (1, 10, 100)},
             "seed snippet item()+logging": run_seed_snippet, FLOORS[0]: run_hooks_noop,
             FLOORS[1]: run_minimal_tracker, FLOORS[2]: run_minimal_log()}
    if args.line_parts:  # the minimal log's line taken apart: its read alone, then formatted but not written
        modes.update({"floor: the minimal log's read alone": run_minimal_log("read"),
                      "floor: the minimal log, lines unwritten": run_minimal_log("format")})
    if compiled.module() is not None:  # the Python step path beside the compiled one, in the same interleaving
        modes.update({f"{PYTHON_PATH} log_every={k}": run_monitored(k, python=True) for k in (1, 10, 100)})
        floor = _compiled_floor()
        if floor is not None:
            modes[FLOORS[3]] = run_minimal_compiled(floor)
    seconds = interleaved(modes, make_tiny_setup, args.steps, args.repeats)
    bare_step = statistics.median(seconds["bare"]) / args.steps
    print(f"monitor_overhead: Linear(4, 2), {args.steps} steps x {args.repeats} interleaved repeats, bare step "
          f"{bare_step * 1e6:.1f} us (CPU time, 1 thread); added per step, monitored minus bare:")
    median, least = added_per_step(seconds, args.steps), fastest_added(seconds, args.steps)
    snippet = least["seed snippet item()+logging"]
    for name in median:
        every = int(name.rsplit("=", 1)[1]) if name.startswith("monitor") else None
        with compiled.python_only() if name.startswith(PYTHON_PATH) else contextlib.nullcontext():
            calls = f", {calls_per_step(every):5.1f} Python calls" if every is not None else ""
        goal = GOALS.get(every) if every is not None and not name.startswith(PYTHON_PATH) else None
        shown = f" = {least[name] / snippet:.2f}x the snippet (goal <= {goal:.2f}x)" if goal is not None else ""
        if name.startswith("floor:"):
            shown = f" = {least[name] / snippet:.2f}x the snippet"
        print(f"  {name:<44} median {median[name] * 1e6:6.1f} us, min {least[name] * 1e6:6.1f} us/step{calls}"
              f"{shown}")
    if args.mlp_repeats > 0:  # 0: the MLP row is left out
        batch = args.mlp_batch or mlp_batch(MLP_STEP)
        ratio, step, median, p10, again, again_median, again_p10 = mlp_ratio(args.mlp_repeats, batch)
        print(f"monitor_overhead: a {step * 1e3:.2f} ms MLP step (batch {batch}) at log_every=10, 100 steps x "
              f"{args.mlp_repeats} interleaved repeats: {ratio:.4f}x bare, fastest over fastest (goal <= "
              f"{MLP_GOAL}x); every step pooled: median {median:.4f}x, 10th percentile {p10:.4f}x; A/A (a second "
              f"bare run, interleaved): {again:.4f}x, pooled median {again_median:.4f}x, 10th percentile "
              f"{again_p10:.4f}x")
    if args.hooks:
        hooks_only(1, blocks=2)  # warm
        print("monitor_overhead: the monitor's own path alone (torch work stubbed; thread CPU time, fastest block):")
        for k in (1, 10, 100):
            print(f"  monitor log_every={k:<3}        {hooks_only(k) * 1e6:6.1f} us/step")
    if args.cnn:
        cnn = interleaved({name: modes[name] for name in ("bare", "monitor log_every=1", "monitor log_every=10")},
                          make_cnn_setup, 200, args.repeats)
        cnn_step = statistics.median(cnn["bare"]) / 200
        print(f"monitor_overhead: a {cnn_step * 1e3:.2f} ms CNN step, 200 steps x {args.repeats} repeats:")
        for name, cost in added_per_step(cnn, 200).items():
            print(f"  {name:<28} {1 + cost / cnn_step:.4f}x bare  ({cost * 1e6:+.1f} us/step)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
