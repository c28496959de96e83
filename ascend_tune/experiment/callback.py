"""The ``experiment=`` feature (on by default): config.json, the settings that change this run's numbers.

At the block's start it reads the optimizer, the loader, the model, the process-wide precision switches, the seed
and the environment; during the first step's first forward calls (a forward pre-hook on the model, removed after
them) autocast and the batches' statistics; at the first step's start the initial weights (one read-back); during
the first ``steps`` steps the gradient clipping calls (``torch.nn.utils.clip_grad_norm_`` / ``clip_grad_value_``
wrapped, unwrapped after). config.json is written once, at the end of that window (or at the block's end when the
run is shorter). Nothing runs after that; a section that cannot be read is recorded as unreadable, never raised.
"""

from __future__ import annotations

import contextlib
import logging
from typing import TYPE_CHECKING, Any, Optional

import torch

from .._version import __version__
from ..contract.callbacks import Callback
from ..formats.run_dir import CONFIG_JSON
from ..recording.frames import internal
from ..recording.modules import Detachable, unwrapped
from . import record
from .config import ExperimentConfig

if TYPE_CHECKING:
    from ..contract.context import RunContext

logger = logging.getLogger("ascend_tune")
FORMAT = 1  # config.json's version


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
        self._last_step: Optional[int] = None
        self._stepped: Any = None  # with no optimizer passed: the first that steps
        self._stepping: Any = None
        self._model: Any = None

    def on_enter(self, ctx: RunContext, stack: contextlib.ExitStack) -> None:
        self.data = {
            "format": FORMAT, "written_by": f"ascend_tune {__version__}", "rank": ctx.rank,
            "world_size": ctx.world_size, "device": ctx.device.kind,
            **record.section(record.optimizers, ctx.optimizer),
            "grad_scaler": record.section(record.grad_scaler, ctx.scaler),
            "precision": record.section(record.precision_flags),
            "model": record.section(record.model_of, self._models(ctx)),
            "data": record.section(record.loader_of, ctx.loader),
            "randomness": {"torch_initial_seed": torch.initial_seed()},
            "environment": record.section(record.environment),
        }
        self._last_step = ctx.start_step + self.config.steps - 1
        if ctx.is_main:
            ctx.run_dir.set_aside([CONFIG_JSON], "config")
        if ctx.models and unwrapped(ctx.models[0]) is ctx.models[0]:
            # a hook that pickles as a no-op (torch.save of the model inside the block works); a compiled model is
            # not hooked (adding and removing a hook recompiles it): its first forwards go unrecorded
            self._model = ctx.models[0]
            self._hook = self._model.register_forward_pre_hook(Detachable(self._on_forward))
            stack.callback(self._remove_hook)
        self._unpatch = contextlib.ExitStack()
        stack.callback(self._unpatch.close)
        self._patch_clipping(stack)
        if ctx.optimizer is None:  # a framework's or the launcher's run: the optimizer that steps first is the one
            from torch.optim.optimizer import register_optimizer_step_pre_hook

            self._stepping = register_optimizer_step_pre_hook(self._on_optimizer_step)
            self._unpatch.callback(self._stepping.remove)

    def on_step_begin(self, ctx: RunContext, step: int) -> None:
        # before every other feature's begin (experiment is first): no dump or trace of the step is on yet, so our
        # own tensor work is in none (msprobe does not know ascend_tune's internal() marker)
        with internal():
            if step == ctx.start_step and "weights" not in self.data:
                self.data["weights"] = record.section(record.weights_of, self._models(ctx))
            if step > ctx.start_step:
                self._fingerprint()

    def on_step_end(self, ctx: RunContext, step: int) -> None:
        if self._forwards or (self._last_step is not None and step >= self._last_step):
            self._remove_hook()  # after the first step's forwards (the launcher opens the block inside the first)
        if self._last_step is not None and step >= self._last_step and self._written is None:
            self._write(ctx)

    def on_exit(self, ctx: RunContext, exc_type: Optional[type]) -> None:
        if self._written is None and self.data:
            with internal():
                self._fingerprint()
            self._write(ctx)

    def summary(self) -> Optional[dict]:
        return {"config_json": self._written} if self._written else None

    def _on_forward(self, module: Any, args: tuple) -> None:
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
        pending = [f for f in self._forwards if isinstance(f, tuple)]
        if not pending:
            return
        done = record.section(record.tensor_fingerprints, pending)
        taken = iter(done if isinstance(done, list) else [done] * len(pending))
        self._forwards = [next(taken) if isinstance(f, tuple) else f for f in self._forwards]

    def _on_optimizer_step(self, optimizer: Any, args: tuple, kwargs: dict) -> None:
        # never removed from here: torch is iterating its hooks (removed with the clipping wrappers, after the window)
        if self._stepped is None:
            self._stepped = optimizer

    def _remove_hook(self) -> None:
        if self._hook is not None:
            self._hook.remove()
            self._hook = None

    def _patch_clipping(self, stack: contextlib.ExitStack) -> None:
        utils = torch.nn.utils
        for name in ("clip_grad_norm_", "clip_grad_value_"):
            original = getattr(utils, name, None)
            if original is None:
                continue
            wrapper = self._clipper(name, original)
            setattr(utils, name, wrapper)
            # after the window the wrapper passes calls through, and is taken off where it is still the top one (a
            # feature that wrapped it since, health, keeps its own; the block's end restores what was there)
            self._unpatch.callback(_unwrap, utils, name, wrapper, original)  # type: ignore[union-attr]
            stack.callback(_unwrap, utils, name, wrapper, original)

    def _clipper(self, name: str, original: Any) -> Any:
        keys = ("max_norm", "norm_type") if name == "clip_grad_norm_" else ("clip_value",)

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
        data = self.data.get("data")
        if isinstance(data, dict):  # forwards seen in this very step stay out: their step may be being dumped
            data["first_forwards"] = [f for f in self._forwards if not isinstance(f, tuple)]
        if ctx.is_main:
            path = ctx.run_dir.path(CONFIG_JSON)
            if ctx.outputs.write_json(path, self.data, output="config.json"):
                self._written = path
        else:
            self._written = ""


def build_callback(value: Any, ctx: RunContext) -> Optional[ExperimentCallback]:
    """The monitor's factory for ``experiment=``: on unless ``False`` (or ``ASCEND_TUNE_EXPERIMENT=off``)."""
    config = ExperimentConfig.from_option(value, default=ExperimentConfig())
    return ExperimentCallback(config) if config is not None else None


def _unwrap(module: Any, name: str, wrapper: Any, original: Any) -> None:
    """Put ``original`` back as ``module.name`` where ``wrapper`` is still what is there."""
    if getattr(module, name, None) is wrapper:
        setattr(module, name, original)
