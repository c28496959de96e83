"""What plugs into the monitor's step clock: the profiler, the precision dump, tuning, or a user's own class.

Each method is optional and receives the run's :class:`~ascend_tune.contract.context.RunContext` (``ctx``), never the
monitor. Steps are numbered as in the log. ``on_step_begin(n)`` runs before step n's first forward (at the block's
start, then right after step n-1 ends); ``on_step_end(n)`` right after step n's ``optimizer.step()`` (or backward /
``mon.step()`` when that is what ends a step).

:class:`CallbackSet` drives them. A feature's callback (ours) that raises is contained: warned once, driven no more,
training goes on; what it registered on the block's stack is still undone at the end. A user's callback is the
user's own code: its exception propagates as any exception of the loop would (at the block's end, once everything
is closed).
"""

from __future__ import annotations

import contextlib
import importlib
from typing import TYPE_CHECKING, Any, Callable, Optional

from ..errors import AscendTuneError, ConfigError

if TYPE_CHECKING:
    from .context import RunContext


STEPS_DONE = "steps done"
"""What ``on_step_begin`` / ``on_step_end`` return when their callback has nothing more to do at steps: neither is
called again (its other methods still are), so a feature whose work is over costs no step anything."""


class Callback:
    """Base class of monitor callbacks; ``name`` keys this callback's entry in summary.json. A step hook may return
    :data:`STEPS_DONE`."""

    name = "callback"

    def on_enter(self, ctx: RunContext, stack: contextlib.ExitStack) -> None:
        """Set up before the first step; register every undo on ``stack`` (it is closed at the block's end)."""

    def on_step_begin(self, ctx: RunContext, step: int) -> None:
        """Step ``step`` is about to run."""

    def on_step_end(self, ctx: RunContext, step: int) -> None:
        """Step ``step`` has run (its loss may still be on the device)."""

    def read_along(self, ctx: RunContext, entries: list) -> Any:
        """Device values to read back with the losses of a log window's steps (``entries``: their
        :class:`~ascend_tune.runtime.steps.ClosedStep`, loss still on the device) in the same transfer, as one
        tensor (read flattened), or None; :meth:`on_window` gets them back as floats."""
        return None

    def on_window(self, ctx: RunContext, window: Any, values: list) -> Optional[dict]:
        """A log window's losses are on the host (``window``: a :class:`~ascend_tune.runtime.step_clock.Window`;
        ``values``: what :meth:`read_along` gave for it). Returns fields added to the window's metrics.jsonl line, or
        None."""
        return None

    def on_exit(self, ctx: RunContext, exc_type: Optional[type]) -> None:
        """The block ends (``exc_type`` set when it raised); runs before summary.json is written."""

    def summary(self) -> Optional[dict]:
        """What this callback adds to summary.json, or None."""
        return None

    def listens(self, hook: str) -> bool:
        """Whether step hook ``hook`` (``"on_step_begin"``, ``"on_step_end"``) is called: when its class defines it.
        A callback whose options leave a hook with nothing to do says False for it, so that no step calls it."""
        return getattr(type(self), hook) is not getattr(Callback, hook)


# feature option -> its package; every feature package has the same shape: config.py (a FeatureConfig), callback.py
# (its Callback and build_callback(value, ctx), which returns the callback or None when the feature is off; ctx is
# the RunContext without features), its work modules. A new feature is one package and one entry here. Each
# build_callback reads its own environment switch (ASCEND_TUNE_PROFILE, ...) when the option is not given. The
# order is the order of on_enter and of every step event: experiment first, so its reads of the first step (the
# initial weights) come before a dump or a trace starts; profile and precision only prepare at on_enter (nothing
# is hooked before a selected step begins); seed then seeds, so that tune's probes, which draw no random numbers,
# run after it and the user's first batch draws the seeded stream; shapes comes late because it checks the
# precision feature it would run beside (ctx.feature("precision")); health comes last: it arms the precision
# feature's dump after a spike, and its module hook sees the steps the others have prepared.
FEATURES: dict = {
    "experiment": "ascend_tune.experiment",
    "profile": "ascend_tune.profiling",
    "precision": "ascend_tune.precision",
    "seed": "ascend_tune.seed",
    "tune": "ascend_tune.tuning",
    "shapes": "ascend_tune.shapes",
    "health": "ascend_tune.health",
}


def feature_config(option: str) -> type:
    """The :class:`~ascend_tune.config.FeatureConfig` of a feature option, from its package's ``config.py``: its
    environment switch (``ENV``) and ``ascend-tune run`` flags (``RUN_FLAGS``) are declared there, once."""
    from ..config import FeatureConfig

    config = importlib.import_module(f"{FEATURES[option]}.config")
    return next(v for v in vars(config).values() if isinstance(v, type) and issubclass(v, FeatureConfig)
                and v.__module__ == config.__name__ and v.OPTION == option)


def build_features(values: dict, ctx: RunContext) -> list:
    """The callbacks of the feature options (``values``: option -> value), each built by its own module (imported
    only when used), in the order of :data:`FEATURES`."""
    for option, value in values.items():
        if value is not None and option not in FEATURES:
            raise ConfigError(f"option {option!r} is not available in this version of ascend_tune")
    built = []
    for option, package in FEATURES.items():
        cb = importlib.import_module(f"{package}.callback").build_callback(values.get(option), ctx)
        if cb is not None:
            built.append(cb)
    return built


def build_feature(option: str, value: object, ctx: RunContext) -> Optional[Callback]:
    """One feature's callback, built by its own factory (the registry's, :data:`FEATURES`): how a feature that needs
    another one (health's dump after a spike needs a precision dump) gets it without importing its internals. The
    caller drives the callback it gets (``on_enter`` with its stack, the step events)."""
    return importlib.import_module(f"{FEATURES[option]}.callback").build_callback(value, ctx)


class CallbackSet:
    """The callbacks of one block in order: the features' (``ours``), then the user's.

    Parameters:
        ours: the callbacks the feature options built; contained when they raise.
        users: the user's ``callbacks=``; their exceptions propagate.
        warn: where a contained failure is reported (the run's warning, recorded in metrics.jsonl).
    """

    def __init__(self, ours: list, users: list, warn: Callable[[str], None]):
        self.active = list(ours) + list(users)
        self._ours = {id(cb) for cb in ours}
        self._warn = warn
        self.user_error: Optional[BaseException] = None  # the first a user's callback raised at the block's end
        self.dropped: list = []  # summary.json's features_failed: {"feature", "method", "error"} per one stopped
        self._stepless: set = set()  # the callbacks whose step hooks said STEPS_DONE
        self._index()

    def enter(self, ctx: RunContext, stack: contextlib.ExitStack) -> None:
        """``on_enter`` of each; a bad option or output found there (``AscendTuneError``) stops the block's start."""
        for cb in list(self.active):
            try:
                cb.on_enter(ctx, stack)
            except AscendTuneError:
                raise
            except Exception as exc:
                if not self._drop(cb, "on_enter", exc):
                    raise

    def step_begin(self, ctx: RunContext, step: int) -> None:
        """``on_step_begin(step)`` of each callback that has one."""
        if self._begin:
            self._each_step(self._begin, "on_step_begin", ctx, step)

    def between(self, ctx: RunContext, step: int) -> None:
        """``on_step_end(step)``, then ``on_step_begin(step + 1)``, of each callback that has one: one call of ours a
        step boundary."""
        if self._end:
            self._each_step(self._end, "on_step_end", ctx, step)
        if self._begin:
            self._each_step(self._begin, "on_step_begin", ctx, step + 1)

    def _each_step(self, callbacks: list, hook: str, ctx: RunContext, step: int) -> None:
        """``hook(ctx, step)`` of each of ``callbacks``; one that fails is dropped (or its error raised), one that
        returns :data:`STEPS_DONE` is not called at steps again."""
        for cb in callbacks:
            try:
                if getattr(cb, hook)(ctx, step) is STEPS_DONE:
                    self._stepless.add(id(cb))
                    self._index()
            except Exception as exc:
                if not self._drop(cb, hook, exc):
                    raise

    def read_along(self, ctx: RunContext, entries: list) -> tuple:
        """(one tensor of what the riders read along with ``entries``' losses, read flattened, or None;
        [(callback, size)])."""
        parts, layout = [], []
        for cb in self.riders:
            try:
                values = cb.read_along(ctx, entries)
            except Exception as exc:
                if not self._drop(cb, "read_along", exc):
                    raise
                continue
            if values is not None:
                parts.append(values)
                layout.append((cb, values.numel()))
        if not parts:
            return None, []
        if len(parts) == 1:  # as it is: the read flattens it (one rider, the usual case, costs no op here)
            return parts[0], layout
        import torch

        dev = parts[0].device
        return torch.cat([p.reshape(-1).to(dev).float() for p in parts]), layout

    def window(self, ctx: RunContext, window: Any, values: list, layout: list) -> dict:
        """``on_window`` of each rider with its share of ``values``; the fields they add to the window's line."""
        fields: dict = {}
        at = 0
        for cb, size in layout:
            share, at = values[at:at + size], at + size
            if cb not in self.active:
                continue
            try:
                fields.update(cb.on_window(ctx, window, share) or {})
            except Exception as exc:
                if not self._drop(cb, "on_window", exc):
                    raise
        return fields

    def exit(self, ctx: RunContext, exc_type: Optional[type]) -> None:
        """``on_exit`` of each; never raises (a user's exception waits in :attr:`user_error`)."""
        for cb in list(self.active):
            try:
                cb.on_exit(ctx, exc_type)
            except Exception as exc:
                if not self._drop(cb, "on_exit", exc) and self.user_error is None:
                    self.user_error = exc

    def summaries(self) -> dict:
        """summary.json's entry of each callback that has one, by name; never raises."""
        out: dict = {}
        for cb in self.active:
            try:
                extra = cb.summary()
            except Exception as exc:
                if not self._drop(cb, "summary", exc) and self.user_error is None:
                    self.user_error = exc
                continue
            if extra is not None:
                out[cb.name] = extra
        return out

    def _drop(self, cb: Callback, method: str, exc: Exception) -> bool:
        """Stop driving one of our callbacks that raised (warned once); False for a user's, whose error is theirs."""
        if id(cb) not in self._ours:
            return False
        with contextlib.suppress(ValueError):
            self.active.remove(cb)
        self._index()
        error = f"{type(exc).__name__}: {exc}"
        self.dropped.append({"feature": cb.name, "method": method, "error": error})
        self._warn(f"{cb.name}: {error} (in {method}); this feature stops for the rest of the run, training goes on")
        return True

    def _index(self) -> None:
        stepping = [cb for cb in self.active if id(cb) not in self._stepless]
        self._begin = tuple(cb for cb in stepping if cb.listens("on_step_begin"))
        self._end = tuple(cb for cb in stepping if cb.listens("on_step_end"))
        self.riders = tuple(cb for cb in self.active if type(cb).read_along is not Callback.read_along)
        self.stepping = bool(self._begin or self._end)  # whether any listens to steps (else the monitor skips)
