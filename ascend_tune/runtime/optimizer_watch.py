"""With no optimizer passed: which optimizer's steps are the training steps, and whether any optimizer steps at all.

Frameworks build their optimizer themselves, often inside the block (Hugging Face ``Trainer.train()``, Lightning's
``fit()``, minGPT's ``run()``). :class:`OptimizerWatch` sees every optimizer's ``step()`` through torch's global
step hooks (``torch.optim.optimizer.register_optimizer_step_pre_hook`` / ``_post_hook``, removed at the block's
end) and tells the :class:`~ascend_tune.runtime.steps.StepTracker`, which keeps the first optimizer that steps the
model's parameters (the first to step at all when no model was given) as the one whose steps end steps.

Until an optimizer steps, the tracker holds the backwards it sees. This module also gathers the evidence that none
will: between two backwards (checked before the next batch and before the next backward) the watched parameters
changed or their gradients were reset, which a step applied without ``optimizer.step()`` does and accumulating
micro-batches does not; or a whole pass over the loader went by; or the block ended. Then the held backwards become
one step each (:meth:`~ascend_tune.runtime.steps.StepTracker.fall_back`) and a warning says so, once.

The watched parameters are the model's, or, with no model, the leaves the first loss back-propagates into.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Optional

import torch

from ..recording.frames import internal
from .steps import StepTracker


class OptimizerWatch:
    """Every optimizer's steps for the block, and the evidence that none steps (see the module docstring).

    Parameters:
        tracker: the monitor's step tracker (created with ``source="watch"``).
        models: the modules being trained (may be empty).
        warn: how the one warning of a fall back is given (the monitor's event log).
    """

    def __init__(self, tracker: StepTracker, models: tuple, warn: Callable[[str], None]):
        self._tracker = tracker
        self._models = models
        self._warn = warn
        self._model_params: Optional[frozenset] = None
        self._watched: Optional[list] = None
        self._fingerprint: Optional[tuple] = None
        self._passes = 0

    def install(self, stack: contextlib.ExitStack) -> None:
        """Register both global step hooks, each with its removal on ``stack``."""
        from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

        pre = register_optimizer_step_pre_hook(self._pre)
        stack.callback(pre.remove)
        post = register_optimizer_step_post_hook(self._post)
        stack.callback(post.remove)

    # --- optimizer steps --------------------------------------------------------------------------------------------

    def steps_model(self, optimizer: Any) -> Optional[bool]:
        """Whether ``optimizer`` steps the model's parameters (None: no model was given, or the optimizer that ends
        steps is known already and the question does not matter)."""
        if not self._models or self._tracker.found:
            return None
        if self._model_params is None:
            self._model_params = frozenset(id(p) for m in self._models for p in m.parameters())
        return holds_any(optimizer, self._model_params)

    def _pre(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        # every optimizer's steps go to the tracker, which keeps one: a wrapper that is a hooked Optimizer itself
        # (ZeroRedundancyOptimizer) steps first and is kept, so the inner optimizer it steps is not counted again
        self._tracker.optimizer_pre(optimizer, self.steps_model(optimizer))

    def _post(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self._tracker.optimizer_post(optimizer)

    # --- evidence that no optimizer steps -------------------------------------------------------------------------

    def before_backward(self, loss: torch.Tensor) -> None:
        """A loss is about to be back-propagated."""
        if self._watched is None:
            with internal():
                self._watched = ([p for m in self._models for p in m.parameters()] if self._models
                                 else graph_leaves(loss))
        self._check("the parameters changed, or their gradients were reset, between two backwards without an "
                    "optimizer step")

    def after_backward(self) -> None:
        """A backward's gradients exist: remember the parameters as they are, while backwards are held."""
        if self._tracker.holding:
            self._fingerprint = fingerprint(self._watched or [])

    def before_batch(self) -> None:
        """The loader hands out the next batch (before the tracker is told)."""
        self._check("the parameters changed, or their gradients were reset, after a backward without an optimizer "
                    "step")

    def new_pass(self) -> None:
        """A pass over the loader begins."""
        if self._passes > 0 and self._tracker.holding:
            self._fall_back("a whole pass over train_loader went by without an optimizer step")
        self._passes += 1

    def at_exit(self) -> None:
        """The block ends."""
        if self._tracker.holding:
            self._fall_back("the block ended without an optimizer step")

    def _check(self, reason: str) -> None:
        if self._tracker.holding and self._fingerprint is not None:
            if fingerprint(self._watched or []) != self._fingerprint:
                self._fall_back(reason)

    def _fall_back(self, reason: str) -> None:
        self._fingerprint = None
        held = self._tracker.fall_back()
        if held:
            self._warn(
                f"no optimizer stepped the model's parameters ({reason}): each backward counts as a step "
                f"({held} so far); pass the optimizer to TrainingMonitor, or call mon.step() where a step ends"
            )


def model_name(optimizer: Any, index: int, models: tuple) -> str:
    """An optimizer's name in a step's ``losses``: the class of the first of ``models`` whose parameters it steps,
    else ``optimizer<index>``."""
    for model in models:
        if holds_any(optimizer, frozenset(id(p) for p in model.parameters())):
            return type(model).__name__
    return f"optimizer{index}"


def holds_any(optimizer: Any, param_ids: frozenset) -> bool:
    """Whether ``optimizer``'s param groups hold any of the parameters whose ids are ``param_ids``."""
    try:
        groups = optimizer.param_groups
    except Exception:  # a wrapper whose proxying fails: it is not the one
        return False
    return any(id(p) in param_ids for group in groups for p in group.get("params", ()))


def graph_leaves(loss: torch.Tensor, limit: int = 100_000) -> list:
    """The leaf tensors (parameters) ``loss`` back-propagates into, found by walking its graph once (up to
    ``limit`` nodes): what a loop trains when no model was given."""
    # nodes are told apart by id, so each one met is held until the walk ends (torch 2.1 does not keep a node's
    # Python object alive, and a new object for another node could get a freed one's id)
    leaves, seen, todo, held = [], set(), [loss.grad_fn], []
    while todo and len(seen) < limit:
        node = todo.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        held.append(node)
        variable = getattr(node, "variable", None)  # AccumulateGrad
        if isinstance(variable, torch.Tensor):
            leaves.append(variable)
        todo.extend(next_node for next_node, _ in node.next_functions)
    return leaves


def fingerprint(params: list) -> tuple:
    """What a step applied without ``optimizer.step()`` changes: each parameter's version counter (a manual update
    bumps it) and its gradient's identity and version (``p.grad = None`` / ``zero_()``); accumulating micro-batches
    changes neither between two backwards."""
    out = []
    for p in params:
        grad = p.grad
        try:
            out.append((p._version, id(grad), -1 if grad is None else grad._version))
        except RuntimeError:  # inference tensors keep no version counter
            out.append((0, id(grad), 0))
    return tuple(out)
