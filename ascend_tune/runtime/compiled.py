"""The step path compiled: the C twins of the functions of ours that run at every batch, backward and step.

At ``log_every=10`` a step of the usual loop runs ~10 Python functions of ours (the loader's wrapper and batch
report, the backward patch and loss capture, the optimizer's two hooks, the step's close and commit), ~30 us a step
on a 2-core VM, most of it the interpreter itself: the least a step tracker can do in Python costs ~10 us there.
``step_path.c`` (beside this module) does the same work in C: :class:`~.steps.StepTracker`'s hot methods over the
same fields (a compiled base class: the Python methods read and write what the C ones do), ``TrainingMonitor``'s
``_on_backward`` / ``_on_batch`` / ``_on_commit`` and :func:`.capture.iterate_marked`, and, at a log step, a plain
window's line (``_log_due``: :class:`~.log_windows.LogWindows`' close and write, :func:`.sinks.metrics_line` and
:func:`~ascend_tune.formats.log_line.format_log_line`'s bytes, each line one ``write``; ~30 us a line less). Each
hands every case but the usual one (a GradScaler's loss, the optimizer watch, a closure, several optimizers,
explicit steps, held backwards, a NaN in a line, a read on a device) to its Python twin, which stays the
definition.

Built as the replay's measure is (:mod:`..contract.native`): once per machine and Python (the key: the source, the
interpreter's version and ABI), against the running interpreter's headers (``sysconfig``'s include folder). No
compiler, no ``Python.h`` (a Python without its development files), a cache that cannot be written, a library that
does not load, or ``ASCEND_TUNE_NO_COMPILE=1``: the Python step path, the same steps, losses and lines.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.machinery
import importlib.util
import logging
import os
import sys
import sysconfig
import threading
import time
from collections.abc import Iterator
from typing import Any, Optional

import torch

from ..config import env_switch
from ..contract import native
from ..errors import ConfigError
from ..formats import log_line
from . import capture, log_windows, sinks, step_clock, steps

logger = logging.getLogger("ascend_tune")

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "step_path.c")
MODULE = "ascend_tune_step_path"
FLAGS = ("-O2", "-shared", "-fPIC", "-fvisibility=hidden", "-Wno-cast-function-type",
         *(("-undefined", "dynamic_lookup") if sys.platform == "darwin" else ()))  # macOS: Python's symbols at load
_lock = threading.Lock()
_tried = False
_loaded: dict = {}  # "module", "tracker": the loaded module and the compiled StepTracker class
_python_only = [0]  # python_only() blocks open


class StepFields:
    """The monitor's fields its step path reads at every step or line, as slots: ``step_path.c`` finds each slot's
    place in the instance once and reads it there (a name a subclass gives another meaning is read by name)."""

    __slots__ = ("_watch", "_scaled", "_finished", "_log_broken", "clock", "log_every", "_windows", "_outputs",
                 "_callbacks", "_ctx", "epoch")


def tracker_class() -> type:
    """The StepTracker class to use: the compiled one where the step path is built, else the Python one."""
    return steps.StepTracker if _python_only[0] else _load().get("tracker", steps.StepTracker)


def module() -> Optional[Any]:
    """The compiled step path's module, or None (compiling it on the first call)."""
    return None if _python_only[0] else _load().get("module")


@contextlib.contextmanager
def python_only() -> Iterator[None]:
    """Monitors entered inside this block run the Python step path (a benchmark's or a test's baseline)."""
    _python_only[0] += 1
    try:
        yield
    finally:
        _python_only[0] -= 1


def hook_steps(stack: contextlib.ExitStack, monitor: Any) -> tuple:
    """Patch the backward for ``monitor`` (a TrainingMonitor whose tracker is made); returns ``(on_batch,
    iterate)`` for its loader wraps. Where the step path is compiled (and the tracker is the compiled class), the
    patch is the C twin of ``monitor._on_backward`` and the wrapper, the batch hook and the iterator are C, and the
    tracker commits through the C twin of ``monitor._on_commit``; else the monitor's own Python methods."""
    loaded = module() if isinstance(monitor._tracker, tracker_class()) else None
    make = None if loaded is None else functools.partial(loaded.Hooks, monitor, monitor._tracker, monitor._host)
    hooks = capture.patch_backward(stack, monitor._on_backward, monitor._on_backward_done, monitor._host,
                                   compiled=make)
    if loaded is None:
        return monitor._on_batch, capture.iterate_marked
    monitor._tracker._on_commit = hooks.on_commit
    return hooks.on_batch, loaded.iterate_marked


def _load() -> dict:
    global _tried
    if _tried:
        return _loaded
    with _lock:
        if not _tried:
            try:
                if not env_switch("ASCEND_TUNE_NO_COMPILE"):
                    _install(_library())
            except ConfigError as exc:
                logger.warning("ascend_tune: %s; the step path runs in Python", exc)
            except Exception as exc:  # no compiler or headers, an unwritable cache, a library that won't load
                logger.debug("the step path runs in Python: %s", exc)
                _loaded.clear()
            _tried = True
    return _loaded


def _install(loaded: Any) -> None:
    loaded.setup(steps.StepTracker, steps.OPTIMIZER, time.perf_counter, time.time, torch.Tensor,
                 capture.batch_size, torch._C._len_torch_function_stack)
    loaded.setup_lines(log_windows.LogWindows, step_clock.StepClock, sinks.TextLogSink, sinks.JsonlSink,
                       step_clock.Window, step_clock.make_window, step_clock._PROFILER_ENABLED,
                       getattr(torch._C, "_len_torch_dispatch_stack", None), log_line._stamp_cache, sum,
                       step_clock._floats, log_line.stamp, sinks.LineFile, sinks.Outputs)
    tracker = type("StepTracker", (loaded.Tracker, steps.StepTracker), {
        "__module__": steps.__name__, "__doc__": steps.StepTracker.__doc__})
    _loaded.update(module=loaded, tracker=tracker)


def _library() -> Any:
    with open(SOURCE, encoding="utf-8") as fh:
        source = fh.read()
    include = sysconfig.get_paths()["include"]
    if not os.path.exists(os.path.join(include, "Python.h")):
        raise OSError(f"no Python.h in {include} (this Python's development files are not installed)")
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    return native.load_built("step-path", suffix, "step_path.c", source, ((*FLAGS, f"-I{include}"),),
                             (*FLAGS, include, sys.version, suffix, sys.platform), _load_module)


def _load_module(path: str) -> Any:
    spec = importlib.util.spec_from_file_location(MODULE, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"{path} cannot be loaded as a module")
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    return loaded
