"""In each process of ``ascend-tune run``: wait for a training loop, open a TrainingMonitor at its first step, close
it at the process's end.

What the two lines learn from their arguments, this learns by watching:
- *a process trains* once a module's forward runs with gradients on and parameters that require them, outside any
  other module's forward (the outermost module: the model; its submodules' names are the dump's module names).
  torchrun's agent, DataLoader workers, ``setup.py`` or ``pip`` never do: they are left untouched and write nothing.
  Until torch is imported nothing is installed but an import watcher, so a process without torch pays nothing;
- the optimizer(s) that step: the monitor's global optimizer hooks (:mod:`ascend_tune.runtime.optimizer_watch`);
- the loader: a ``DataLoader`` held by the frames that run the first forward (the loop iterating it), marked from
  its next pass on (:meth:`~ascend_tune.TrainingMonitor.adopt_loader`).

The block ends when the process does: a normal exit or ``sys.exit`` (``atexit``), an uncaught exception (its
``sys.excepthook`` first names it), SIGTERM (the monitor's own handler), or ``torch.distributed
.destroy_process_group`` (before the group goes, so the ranks' summary is gathered as with the two lines). A script
that opens its own ``TrainingMonitor`` block is monitored by that block alone.
"""

from __future__ import annotations

import atexit
import importlib.abc
import os
import sys
import threading
from typing import Any, Optional

from .environment import PREFIX, RunOptions

_state: dict = {"installed": False, "hook": None, "monitor": None, "pid": None, "ended_by": None, "said": set(),
                "inside": set(), "unwatched": None, "unwatched_steps": 0, "why_not": None}
_lock = threading.Lock()


def install() -> None:
    """Watch for torch's import (called by the bootstrap ``sitecustomize``); once per process."""
    if _state["installed"] or RunOptions.from_env() is None:
        return
    _state["installed"] = True
    if "torch" in sys.modules:
        _torch_imported()
    else:
        sys.meta_path.insert(0, _TorchImportWatch())


class _TorchImportWatch(importlib.abc.MetaPathFinder):
    """Finds nothing itself: when ``torch`` is imported, its loader is wrapped to call back once it has run."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        # libraries ask importlib.util.find_spec("torch") before they import it (is_torch_available): this finder
        # stays until torch's module has run, and each spec it hands out calls back once that happens
        if name != "torch":
            return None
        spec = None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None) if finder is not self else None
            spec = find(name, path, target) if find is not None else None
            if spec is not None:
                break
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        run = spec.loader.exec_module

        def exec_module(module: Any) -> None:
            run(module)
            if self in sys.meta_path:
                sys.meta_path.remove(self)
                _contained(_torch_imported)

        spec.loader.exec_module = exec_module
        return spec


def _torch_imported() -> None:
    import torch
    from torch.optim.optimizer import register_optimizer_step_post_hook

    _state["hook"] = torch.nn.modules.module.register_module_forward_pre_hook(_on_forward)
    # until a monitor opens, optimizer steps are counted: a process that trained unmonitored says so at its end
    _state["unwatched"] = register_optimizer_step_post_hook(_count_unwatched_step)
    atexit.register(_contained, _say_if_trained_unmonitored)
    _close_before_destroy()  # now, before a script's `from torch.distributed import destroy_process_group`


def _on_forward(module: Any, args: Any) -> None:
    try:
        _watch_forward(module, args)
    except Exception as exc:  # a hook of ours never raises into the script's forward
        _stop_watching_forwards()
        _say(f"stopped watching module calls ({type(exc).__name__}: {exc})", once="forward watch")


def _watch_forward(module: Any, args: Any) -> None:
    import torch

    monitor = _state["monitor"]
    if monitor is not None and monitor.next_step > monitor.start_step:
        _stop_watching_forwards()  # the first step is over: no cost per module call from now on
        return
    if id(module) in _state["inside"] or not torch.is_grad_enabled():
        return
    if not any(p.requires_grad for p in module.parameters()):
        return
    with _lock:
        if _state["monitor"] is None:
            _contained(_open, module, args)
            if _state["monitor"] is None:  # the script's own block, or a monitor that could not open: done here
                _stop_watching_forwards()
                return
        else:  # another model of the first step (a GAN's generator): it names the optimizer that steps it
            monitor.models_seen.append(module)
        _state["inside"].update(id(m) for m in module.modules())


def _count_unwatched_step(optimizer: Any, args: Any, kwargs: Any) -> None:
    _state["unwatched_steps"] += 1


def _stop_counting_steps() -> None:
    if _state["unwatched"] is not None:
        _state["unwatched"].remove()
        _state["unwatched"] = None


def _say_if_trained_unmonitored() -> None:
    """At the process's end: optimizer steps ran and no monitor opened (a script's own block aside). One line on
    stderr, and a ``summary.json`` saying why where the run folder has none."""
    steps = _state["unwatched_steps"]
    if _state["unwatched"] is None or steps == 0 or _state["pid"] is not None:
        return
    why = _state["why_not"] or ("no training forward was seen (a module called with gradients on and parameters "
                                "that require them)")
    _say(f"{steps} optimizer step{'s' if steps != 1 else ''} ran in this process but no monitor started: {why}")
    options = RunOptions.from_env()
    if options is None or int(os.environ.get("RANK", "0") or 0) != 0:
        return
    import json

    path = os.path.join(options.log_dir, "summary.json")
    if not os.path.exists(path):  # never over what a run wrote
        os.makedirs(options.log_dir, exist_ok=True)
        with open(path, "w", encoding="utf-8") as fh:
            json.dump({"monitored": False, "not_monitored_because": why, "optimizer_steps_seen": steps}, fh)


def _stop_watching_forwards() -> None:
    if _state["hook"] is not None:
        _state["hook"].remove()
        _state["hook"] = None
    _state["inside"] = set()


def _open(model: Any, args: Any = ()) -> None:
    from ..runtime.monitor import _OPEN, TrainingMonitor

    if _OPEN:
        _say("the script opens its own TrainingMonitor block: that block monitors it, the launcher stays out",
             once="own block")
        _stop_watching_forwards()
        _stop_counting_steps()
        return
    options = RunOptions.from_env()
    monitor = TrainingMonitor(model, None, None, log_dir=options.log_dir, log_every=options.log_every,
                              warmup_steps=options.warmup_steps, seed=options.seed, quiet=options.quiet)
    monitor.gives_way = True
    monitor.forward_seen = args  # the forward under way: its pre-hooks ran before the block's features existed
    monitor.__enter__()
    _state["monitor"], _state["pid"] = monitor, os.getpid()
    _stop_counting_steps()
    atexit.register(_at_exit)
    _chain_excepthook()
    loader = _loader_in_frames()
    if loader is not None and not monitor.adopt_loader(loader):
        loader = None  # a loader whose class cannot be swapped: steps are still counted, batches are not
    if monitor.rank == 0:
        _say(f"monitoring {os.path.basename(sys.argv[0]) or 'python'} (model {type(model).__name__}"
             f"{f', loader {type(loader).__name__}' if loader is not None else ''}) into {options.log_dir}")


def _loader_in_frames() -> Optional[Any]:
    """The nearest ``DataLoader`` a caller's frame holds (the loop iterating it), or None."""
    from torch.utils.data import DataLoader

    frame = sys._getframe(1)
    while frame is not None:
        if not frame.f_globals.get("__name__", "").startswith(("torch", "ascend_tune")):
            for value in list(frame.f_locals.values()):
                if isinstance(value, DataLoader):
                    return value
        frame = frame.f_back
    return None


def _close(ended_by: Optional[str], exc_type: Any = None, gather: bool = False) -> None:
    monitor = _state["monitor"]
    if monitor is None or _state["pid"] != os.getpid():  # a forked child holds a copy of the run, not the run
        return
    _state["monitor"] = None
    _stop_watching_forwards()
    monitor.close(ended_by, exc_type, gather=gather)


def _at_exit() -> None:
    _contained(_close, _state["ended_by"], None)


def _chain_excepthook() -> None:
    previous = sys.excepthook

    def excepthook(exc_type: Any, exc: Any, tb: Any) -> None:
        _state["ended_by"] = exc_type.__name__  # what ended the process, for summary.json at atexit
        previous(exc_type, exc, tb)

    sys.excepthook = excepthook
    exit_ = sys.exit

    def exit(status: Any = None) -> None:  # noqa: A001 - sys.exit's own name
        _state["ended_by"] = "SystemExit"
        exit_(status)

    sys.exit = exit


def _close_before_destroy() -> None:
    import torch.distributed as dist

    if not dist.is_available():
        return
    destroy = dist.destroy_process_group

    def destroy_process_group(*args: Any, **kwargs: Any) -> Any:
        if _state["monitor"] is not None and dist.is_initialized():
            _contained(_close, None, None, True)  # every rank is here: the ranks' summary is gathered
        return destroy(*args, **kwargs)

    dist.destroy_process_group = destroy_process_group


def _contained(fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception as exc:  # the launcher never stops the run it watches
        _state["why_not"] = _state["why_not"] or f"{type(exc).__name__}: {exc}"
        _say(f"stopped monitoring this process ({type(exc).__name__}: {exc})", once="failed")
        return None


def _say(message: str, once: Optional[str] = None) -> None:
    if once is not None:
        if once in _state["said"]:
            return
        _state["said"].add(once)
    print(PREFIX + message, file=sys.stderr, flush=True)
