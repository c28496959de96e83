"""The ``experiment=`` feature (on by default): config.json, the settings that change this run's numbers.

At the block's start it reads the loader, the model, the process-wide precision switches, the seed, the
environment and the LR schedulers of the optimizer passed (among what the script's frames hold); during the first
step's first training forward calls (with gradients on; a forward pre-hook on the model, removed after them)
autocast and the batches' statistics; at the first step's start the initial weights' statistics; at the
optimizer's first ``step()`` its settings (the lr the first update used); during the first ``steps`` steps the
gradient clipping calls (``torch.nn.utils.clip_grad_norm_`` and the like wrapped, unwrapped after) and the
backwards of each step (``torch.autograd.backward`` wrapped likewise: gradient accumulation). Schedulers not found
by then (no optimizer passed, or made in the block) are looked for at the window's end among what the training
loop's frames hold (a Trainer's, Lightning's). Statistics are computed on the device and come back with no sync (a
non-blocking copy and an event, asked at the steps after). config.json is written once, when the window is over
and they are back (or at the block's end): rank 0's in the run folder, every other rank's in its ``rank{R}/``
(ranks can differ: their data shards, a seed or a variable set on one node). Nothing runs after that; a section
that cannot be read is recorded as unreadable, never raised.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
from typing import TYPE_CHECKING, Any, Optional

import torch

from .._version import __version__
from ..contract.callbacks import STEPS_DONE, Callback
from ..formats.config_json import FORMAT
from ..formats.run_dir import CONFIG_JSON, rank_dir_name
from ..recording.frames import in_internal, internal
from ..recording.modules import Detachable, unwrapped
from . import record
from .config import ExperimentConfig

if TYPE_CHECKING:
    from ..contract.context import RunContext

logger = logging.getLogger("ascend_tune")
_OPTIMIZER_FILE = os.path.normcase(sys.modules[torch.optim.Optimizer.__module__].__file__ or "")
_local = threading.local()
CLIPPERS = {  # torch.nn.utils' clipping functions: the setting each records, and its arguments after the parameters
    "clip_grad_norm_": ("clip_grad_norm_", ("max_norm", "norm_type")),
    # torch >= 2.6's split form (get_total_norm, then this), which accelerate and the HF Trainer call: one setting
    "clip_grads_with_norm_": ("clip_grad_norm_", ("max_norm",)),
    "clip_grad_value_": ("clip_grad_value_", ("clip_value",)),
}


class ExperimentCallback(Callback):
    """Gathers config.json (see the module docstring)."""

    name = "experiment"

    def __init__(self, config: ExperimentConfig):
        self.config = config
        self.data: dict = {}
        self._forwards: list = []
        self._autocast: Optional[dict] = None
        self._clipping: dict = {}
        self._hook: Any = None
        self._unpatch: Optional[contextlib.ExitStack] = None
        self._written: Optional[str] = None
        self._last_step = 0  # the window's last step (set at the block's start)
        self._stepped: Any = None  # with no optimizer passed: the first that steps
        self._stepping: Any = None
        self._passed: list = []  # the optimizer objects passed to the monitor
        self._passed_as: Any = None  # as passed: one, a list or a dict (names the optimizers in config.json)
        self._model: Any = None
        self._backwards = [0, 0]  # this step's backwards: outside optimizer.step(), inside it (a closure's)
        self._per_step: list = []
        self._reads: list = []  # device reads on their way: (put, key, finish, keys, DeviceRead)

    def on_enter(self, ctx: RunContext, stack: contextlib.ExitStack) -> None:
        self.data = {
            "format": FORMAT, "written_by": f"ascend_tune {__version__}", "rank": ctx.rank,
            "world_size": ctx.world_size, "device": ctx.device.kind,
            "grad_scaler": record.section(record.grad_scaler, ctx.scaler),
            "precision": record.section(record.precision_flags),
            "model": record.section(record.model_of, self._models(ctx)),
            "data": record.section(record.loader_of, ctx.loader),
            "randomness": record.section(record.random_states),
            "environment": record.section(record.environment),
        }
        self._last_step = ctx.start_step + self.config.steps - 1
        ctx.run_dir.set_aside([self._relpath(ctx)], "config")
        if ctx.models and unwrapped(ctx.models[0]) is ctx.models[0]:
            # a hook that pickles as a no-op (torch.save of the model inside the block works); a compiled model is
            # not hooked (adding and removing a hook recompiles it): its first forwards go unrecorded
            self._model = ctx.models[0]
            self._hook = self._model.register_forward_pre_hook(Detachable(self._on_forward))
            stack.callback(self._remove_hook)
            if ctx.forward_seen is not None:  # the launcher opened the block inside this forward: it is the first
                self._on_forward(self._model, ctx.forward_seen)
        self._unpatch = contextlib.ExitStack()
        stack.callback(self._unpatch.close)
        self._patch_clipping(stack)
        self._patch_backward(stack)
        # the optimizer's settings as its first step uses them (a schedule or a script sets the lr by then); with
        # none passed (a framework's or the launcher's run) the optimizer that steps first is the one
        from torch.optim.optimizer import register_optimizer_step_pre_hook

        self._passed, self._passed_as = _optimizers_of(ctx.optimizer), ctx.optimizer
        if self._passed:  # its schedulers made before the block: among the script's frames
            self.data["schedulers"] = record.section(record.schedulers_near, self._passed, sys._getframe(1))
        self._stepping = register_optimizer_step_pre_hook(self._on_optimizer_step)
        self._unpatch.callback(self._stepping.remove)

    def on_step_begin(self, ctx: RunContext, step: int) -> None:
        # before every other feature's begin (experiment is first): no dump or trace of the step is on yet, so our
        # own tensor work is in none (msprobe does not know ascend_tune's internal() marker)
        with internal():
            if step == ctx.start_step and "weights" not in self.data:
                self._start(self.data.__setitem__, "weights", record.weight_statistics, record.weights_from,
                            self._models(ctx))
            if step > ctx.start_step:
                self._fingerprint()

    def on_step_end(self, ctx: RunContext, step: int) -> Optional[str]:
        if step <= self._last_step:
            self._per_step.append(tuple(self._backwards))
            self._backwards = [0, 0]
        if self._forwards or step >= self._last_step:
            self._remove_hook()  # after the first step's forwards (the launcher opens the block inside the first)
        # written once the window is over and its device reads are on the host (a step or two later: no sync)
        if step >= self._last_step and self._written is None and self._resolve(wait=False):
            self._write(ctx)
        return STEPS_DONE if self._written is not None else None  # nothing is recorded after the window

    def on_exit(self, ctx: RunContext, exc_type: Optional[type]) -> None:
        if self._written is None and self.data:
            with internal():
                self._fingerprint()
                self._resolve(wait=True)  # the block's end: waiting for the device is allowed
            self._write(ctx)

    def summary(self) -> Optional[dict]:
        return {"config_json": self._written} if self._written else None

    def _on_forward(self, module: Any, args: tuple) -> None:
        if not torch.is_grad_enabled():  # an evaluation inside the block (nanoGPT's at iteration 0): not a batch
            return                       # the step trains on, nor its precision (the launcher skips them too)
        if self._autocast is None:
            self._autocast = record.section(record.autocast_now)
        if len(self._forwards) < self.config.batches:
            # the tensors themselves, no op on them here: the step may be being dumped; their statistics are taken
            # at the next step's start (or the block's end)
            self._forwards.append((args, {}))
        if len(self._forwards) >= self.config.batches:
            self._remove_hook()

    @staticmethod
    def _models(ctx: RunContext) -> tuple:
        """The models as they were defined (a compiled model's own module: the same names compiled or not)."""
        return tuple(unwrapped(m) for m in ctx.models)

    def _fingerprint(self) -> None:
        """Start reading the statistics of the forwards seen so far (taken: None until they are back)."""
        pending = [i for i, f in enumerate(self._forwards) if isinstance(f, tuple)]
        if not pending:
            return
        calls = [self._forwards[i] for i in pending]
        for i in pending:
            self._forwards[i] = None

        def put(_key: str, found: Any) -> None:
            for i, entry in zip(pending, found if isinstance(found, list) else [found] * len(pending)):
                self._forwards[i] = entry

        self._start(put, "first_forwards", record.tensor_statistics,
                    lambda keys, rows: record.fingerprints_from(keys, rows, len(calls)), calls)

    def _start(self, put: Any, key: str, measure: Any, finish: Any, *args: Any) -> None:
        """``measure(*args)`` on the device now, read back with no sync (:class:`~.record.DeviceRead`);
        ``put(key, finish(keys, rows))`` once the rows are on the host (:meth:`_resolve`)."""
        def begin() -> tuple:
            keys, rows = measure(*args)
            return keys, record.DeviceRead(rows)

        started = record.section(begin)
        if isinstance(started, dict):  # it could not be measured: the section says why
            put(key, started)
            return
        self._reads.append((put, key, finish, *started))
        self._resolve(wait=False)  # on the host already (the CPU's): put now, as it was measured

    def _resolve(self, wait: bool) -> bool:
        """Put the reads that are on the host (all of them when ``wait``); True when none is left."""
        left = []
        for put, key, finish, keys, read in self._reads:
            if wait or read.ready():
                put(key, record.section(lambda: finish(keys, read.values())))  # noqa: B023 - called here, now
            else:
                left.append((put, key, finish, keys, read))
        self._reads = left
        return not left

    def _on_optimizer_step(self, optimizer: Any, args: tuple, kwargs: dict) -> None:
        # never removed from here: torch is iterating its hooks (removed with the clipping wrappers, after the window)
        if self._stepped is not None or (self._passed and all(optimizer is not o for o in self._passed)):
            return
        self._stepped = optimizer
        with internal():  # section() contains what the read raises: the user's step goes on
            self.data.update(record.section(record.optimizers, self._passed_as or optimizer))

    def _remove_hook(self) -> None:
        if self._hook is not None:
            self._hook.remove()
            self._hook = None

    def _patch_clipping(self, stack: contextlib.ExitStack) -> None:
        utils = torch.nn.utils
        for name in CLIPPERS:
            original = getattr(utils, name, None)
            if original is None:
                continue
            wrapper = self._clipper(name, original)
            setattr(utils, name, wrapper)
            # after the window the wrapper passes calls through, and is taken off where it is still the top one (a
            # feature that wrapped it since, health, keeps its own; the block's end restores what was there)
            self._unpatch.callback(_unwrap, utils, name, wrapper, original)  # type: ignore[union-attr]
            stack.callback(_unwrap, utils, name, wrapper, original)

    def _patch_backward(self, stack: contextlib.ExitStack) -> None:
        original = torch.autograd.backward

        def backward(tensors: Any, *args: Any, **kwargs: Any) -> Any:
            depth = getattr(_local, "depth", 0)
            # the outermost (reentrant checkpointing nests backwards), and the user's: not our own work's
            if self._written is None and not depth and not in_internal():
                try:
                    if isinstance(tensors, (list, tuple)) and len(tensors) == 1:
                        tensors = tensors[0]
                    if isinstance(tensors, torch.Tensor) and tensors.numel() == 1:  # a loss, not a stage's output
                        self._backwards[_in_optimizer_step()] += 1
                except Exception:  # noqa: BLE001 - the user's call goes on whatever our count does
                    pass
            _local.depth = depth + 1
            try:
                return original(tensors, *args, **kwargs)
            finally:
                _local.depth = depth

        backward.__wrapped__ = original  # type: ignore[attr-defined]
        torch.autograd.backward = backward
        self._unpatch.callback(_unwrap, torch.autograd, "backward", backward, original)  # type: ignore[union-attr]
        stack.callback(_unwrap, torch.autograd, "backward", backward, original)

    def _clipper(self, name: str, original: Any) -> Any:
        name, keys = CLIPPERS[name]

        def clip(parameters: Any, *args: Any, **kwargs: Any) -> Any:
            if self._written is not None:
                return original(parameters, *args, **kwargs)
            try:  # the user's call: our bookkeeping never reaches it
                seen = dict(zip(keys, args))
                seen.update({k: v for k, v in kwargs.items() if k in keys + ("error_if_nonfinite", "foreach")})
                self._clipping.setdefault(name, {k: record.plain(v) for k, v in seen.items()})
            except Exception:  # noqa: BLE001
                self._clipping.setdefault(name, {"unreadable": "its arguments"})
            return original(parameters, *args, **kwargs)

        clip.__wrapped__ = original  # type: ignore[attr-defined]
        return clip

    def _write(self, ctx: RunContext) -> None:
        if self._unpatch is not None:
            self._unpatch.close()
        if "optimizer" not in self.data and "optimizers" not in self.data:
            found = ctx.optimizer if ctx.optimizer is not None else self._stepped
            if found is not None:
                self.data.update(record.section(record.optimizers, found))
        precision = self.data.get("precision")
        if isinstance(precision, dict):
            precision["autocast"] = self._autocast or {"unreadable": "no forward of the model seen in the step"}
        self.data["clipping"] = dict(self._clipping)
        self.data["accumulation"] = _accumulation(self._per_step)
        optimizers = self._passed or _optimizers_of(self._stepped)
        if optimizers and not self.data.get("schedulers"):  # made in the block, or by a framework: from its frames
            self.data["schedulers"] = record.section(record.schedulers_near, optimizers, sys._getframe(1))
        data = self.data.get("data")
        if isinstance(data, dict):  # forwards seen in this very step stay out: their step may be being dumped
            data["first_forwards"] = [f for f in self._forwards if isinstance(f, (dict, list))]
        path = ctx.run_dir.path(self._relpath(ctx))
        if ctx.outputs.write_json(path, self.data, output="config.json"):
            self._written = path
        else:
            self._written = ""

    @staticmethod
    def _relpath(ctx: RunContext) -> str:
        """config.json for rank 0, ``rank{R}/config.json`` for every other rank."""
        return CONFIG_JSON if ctx.is_main else os.path.join(rank_dir_name(ctx.rank), CONFIG_JSON)


def build_callback(value: Any, ctx: RunContext) -> Optional[ExperimentCallback]:
    """The monitor's factory for ``experiment=``: on unless ``False`` (or ``ASCEND_TUNE_EXPERIMENT=off``)."""
    config = ExperimentConfig.from_option(value, default=ExperimentConfig())
    return ExperimentCallback(config) if config is not None else None


def _accumulation(per_step: list) -> dict:
    """The backwards of each recorded step: those outside ``optimizer.step()``, plus one for a closure's inside it
    (Lightning back-propagates the last micro-batch in its closure; LBFGS evaluates its one loss several times)."""
    return {"backwards_per_step": [outside + min(inside, 1) for outside, inside in per_step]}


def _optimizers_of(optimizer: Any) -> list:
    """The optimizer objects of the monitor's ``optimizer`` (one, a list or a dict of them)."""
    if optimizer is None:
        return []
    if isinstance(optimizer, dict):
        return list(optimizer.values())
    return list(optimizer) if isinstance(optimizer, (list, tuple)) else [optimizer]


def _in_optimizer_step() -> int:
    """1 inside an ``optimizer.step()`` (a closure's backward), else 0: torch's step wrapper is on the stack.
    Asked only for the window's few backwards (optimizer hooks would have to come off inside torch's hook loop)."""
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_name == "wrapper" and os.path.normcase(frame.f_code.co_filename) == _OPTIMIZER_FILE:
            return 1
        frame = frame.f_back
    return 0


def _unwrap(module: Any, name: str, wrapper: Any, original: Any) -> None:
    """Put ``original`` back as ``module.name`` where ``wrapper`` is still what is there."""
    if getattr(module, name, None) is wrapper:
        setattr(module, name, original)
