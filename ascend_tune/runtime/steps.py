"""StepTracker: the events of a training loop in, closed optimizer steps out. No hooks, no files, no clock.

How a step is seen:
- a *step* ends at an ``optimizer.step()`` (its post-hook) of the optimizer that defines steps: the one passed to
  the monitor, else the one the monitor finds stepping the model's parameters (global optimizer hooks, see
  :mod:`.capture`); from the first explicit ``mon.step()`` on, only explicit calls end steps;
- with no optimizer passed, backwards seen before the first optimizer step are *held*: no step ends for them
  until it is known whether an optimizer steps. When one does, they are that step's micro-batches (gradient
  accumulation). When the caller learns that none does (:meth:`StepTracker.fall_back`: the parameters changed
  between two backwards, a pass over the loader ended, the block ended), each held backward becomes a step of its
  own, and from then on each backward ends a step once its gradients exist. An optimizer that steps later takes
  over again;
- its *loss* is the sum of the scalar tensors back-propagated since the previous step: with the usual
  ``(loss / accum).backward()`` that is the mean micro-batch loss, the objective whose gradient the step applied
  (``accumulate="mean"`` divides by the number of backwards, for scripts that back-propagate undivided losses);
- backwards inside ``step()`` (between its pre- and post-hook) are closure evaluations: the first one is a
  micro-batch of the step like those before ``step()`` (Lightning runs the last micro-batch of an accumulation
  window in the closure), later ones re-evaluate the same loss (LBFGS) and never add up;
- a step that GradScaler skips (inf/nan gradients: ``optimizer.step()`` never ran) is closed as *skipped*, with its
  loss, and never merged into the next one;
- several optimizers per batch (a GAN steps its discriminator's, then its generator's): a backward belongs to the
  next optimizer that steps. What another optimizer's step takes is its loss, never the step's; it is kept in the
  step's ``losses`` (by optimizer name) with the step's own: the same batch's step, the one just closed when that
  optimizer first stepped after it (it follows), else the next one (it leads). An optimizer stepping with no
  backward of its own since the previous optimizer step (two optimizers over one loss) shares that loss.

A step is *closed* when it ends (``on_end(step)`` at once, so a profiler or a dump brackets exactly that step) and
*committed* (``on_commit(ClosedStep)``: numbered, timed, logged) at the next event of the loop that can begin a step:
a batch, the steps' optimizer's next step, ``mon.step``, the end of the block (also a backward, once backwards end
steps or explicit steps have begun). That delay lets an explicit ``mon.step(loss)`` adopt a step the hooks already
closed, so mixing both styles never counts a step twice, and another optimizer stepping later in the same batch add
its loss to the step. Held backwards that fall back are closed late, at the moment it is known: their ``on_end``
comes then, their times are their own.

Losses are whatever tensors the caller hands in (already detached); they are only added, never read back here.
Where the step path is compiled (:mod:`.compiled`), the monitor's tracker is a subclass whose ``backward``,
``step_pre_hook``, ``optimizer_post`` and ``batch`` are C twins of these for the usual case, calling these otherwise.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Optional

from ..recording.frames import internal

# where steps come from: an optimizer's step hooks; held backwards until an optimizer steps or is known not to;
# each backward (no optimizer steps)
OPTIMIZER, WATCH, BACKWARD = "optimizer", "watch", "backward"
SOURCES = (OPTIMIZER, WATCH, BACKWARD)


class ClosedStep:
    """One step as it ended: its number, its loss (a device tensor or None), its samples and times.

    A plain class with slots, not a dataclass: one is made every step. ``losses``: several optimizers stepping,
    each one's loss by name, the step's own included (else None).
    """

    __slots__ = ("step", "loss", "samples", "skipped", "at", "wall", "losses")

    def __init__(self, step: int, loss: Any, samples: Optional[int], skipped: bool, at: float, wall: float,
                 losses: Optional[dict] = None):
        self.step = step
        self.loss = loss
        self.samples = samples
        self.skipped = skipped
        self.at = at  # time.perf_counter() when the step ended
        self.wall = wall  # time.time() when the step ended
        self.losses = losses

    def __repr__(self) -> str:
        return (f"ClosedStep(step={self.step}, loss={self.loss!r}, samples={self.samples}, skipped={self.skipped}, "
                f"at={self.at}, wall={self.wall}, losses={self.losses!r})")


@dataclass
class _Held:
    """A backward seen before the first optimizer step: its loss, when its gradients existed, samples so far."""

    loss: Any
    at: float
    wall: float
    samples: Optional[int]


class StepTracker:
    """Turns backward / optimizer / batch / explicit-step events into closed steps (see the module docstring).

    Parameters:
        start_step: the first step's number.
        on_end: called with a step's number the moment it ends.
        on_commit: called with the :class:`ClosedStep` once it is committed, in step order.
        source: ``"optimizer"`` (the steps of ``optimizer`` end steps), ``"watch"`` (no optimizer was passed:
            backwards are held until one steps or :meth:`fall_back`) or ``"backward"`` (each backward ends a step).
        optimizer: with ``source="optimizer"``, the optimizer whose steps end steps (any object the events name).
        accumulate: ``"sum"`` or ``"mean"`` of the losses back-propagated within one step.
        samples_per_step: a fixed sample count per step; else the batches' sizes are added (:meth:`batch`).
        name_of: ``name_of(optimizer, index)``: an optimizer's name in ``ClosedStep.losses`` (``index``: in the order
            they first stepped); default ``optimizer<index>``.
    """

    def __init__(
        self,
        start_step: int,
        on_end: Callable[[int], None],
        on_commit: Callable[[ClosedStep], None],
        *,
        source: str = OPTIMIZER,
        optimizer: Any = None,
        accumulate: str = "sum",
        samples_per_step: Optional[int] = None,
        name_of: Optional[Callable[[Any, int], str]] = None,
    ):
        if source not in SOURCES:
            raise ValueError(f"source must be one of {SOURCES}, got {source!r}")
        self.next_step = start_step
        self.explicit = False
        self.source = source
        self.step_optimizer: Any = optimizer
        self._found = source == OPTIMIZER  # whether step_optimizer is known (None is a valid name in tests)
        self.on_end: Optional[Callable[[int], None]] = on_end  # None: nothing listens (the monitor's features are done)
        self._on_commit = on_commit
        self._mean = accumulate == "mean"
        self._samples_per_step = samples_per_step
        self._loss: Any = None
        self._backwards = 0
        self._last: Any = None  # the loss of the backward under way (for holding it once its gradients exist)
        self._held: list = []
        self._in_step = False
        self._closure_loss: Any = None
        self._absorb = False  # this optimizer step belongs to the step its backward already closed
        self._post_count = 0
        self._closed: Optional[ClosedStep] = None
        self._samples: Optional[int] = None  # None: batches are not counted (or one had no size)
        self._name_of = name_of or (lambda optimizer, index: f"optimizer{index}")
        self._names: dict = {}  # id(optimizer) -> (name, whether it follows the steps' optimizer in a batch)
        self._others: dict = {}  # losses of optimizers that lead, for the next step
        self._shared: Any = None  # the loss another optimizer took since the last backward

    @property
    def found(self) -> bool:
        """Whether the optimizer whose steps end steps is known (passed, or seen stepping)."""
        return self._found

    @property
    def holding(self) -> int:
        """How many backwards are held, waiting to learn whether an optimizer steps (0 once it is known)."""
        return len(self._held) if self.source == WATCH else 0

    # --- events in ------------------------------------------------------------------------------------------------

    def count_batches(self) -> None:
        """From now on add each batch's size to the step's samples (the loader is marked)."""
        if self._samples is None:
            self._samples = 0

    def backward(self, loss: Any) -> bool:
        """A scalar loss is being back-propagated. Returns whether :meth:`backward_done` has work when its backward
        ends (only while backwards end steps or are held: with an optimizer's steps ending them, the usual case,
        the step path makes no call at the backward's end)."""
        if self._in_step:
            if self._closure_loss is None:
                self._closure_loss = loss
            return False
        if (self.explicit or self.source == BACKWARD) and self._closed is not None:
            self.commit()
        self._shared = None
        if self._loss is None:  # the usual case, one backward a step: no call, no tensor work
            self._loss = loss
            self._backwards += 1
        else:
            self._add(loss)
        if self.source == OPTIMIZER or self.explicit:
            return False
        self._last = loss
        return True

    def backward_done(self) -> None:
        """The backward's gradients exist; with backwards ending steps (and no explicit steps), that ends one."""
        last, self._last = self._last, None
        if self.explicit or self._in_step or last is None:
            return
        if self.source == BACKWARD:
            self._close(skipped=False)
        elif self.source == WATCH:
            self._held.append(_Held(last, time.perf_counter(), time.time(), self._samples))

    def defines_steps(self, optimizer: Any, steps_model: Optional[bool] = None) -> bool:
        """Whether ``optimizer``'s steps end steps; the first to step that ``steps_model`` (steps the model's
        parameters; None: no model is known, any optimizer does) becomes the one, and stays the one."""
        if not self._found and steps_model is not False:
            self.step_optimizer, self._found = optimizer, True
        return self._found and optimizer is self.step_optimizer

    def optimizer_pre(self, optimizer: Any = None, steps_model: Optional[bool] = None) -> None:
        """``optimizer.step()`` begins; only the steps of the optimizer that defines steps count (several
        optimizers: :meth:`defines_steps`)."""
        if (optimizer is not self.step_optimizer or not self._found) and not self.defines_steps(optimizer, steps_model):
            return
        if self.source != OPTIMIZER:
            self._take_over()
        self.step_pre_hook(optimizer)

    def step_pre_hook(self, optimizer: Any, *_hook_args: Any) -> None:
        """:meth:`optimizer_pre` of the optimizer whose steps end steps, once that is known (the passed optimizer's
        own pre-hook: torch calls it with ``args, kwargs``, ignored). The step path's one call before a step."""
        if id(optimizer) not in self._names:
            self._name(optimizer)
        closed = self._closed
        if closed is not None:
            self._closed = None
            self._on_commit(closed)
        self._in_step = True
        self._closure_loss = None

    def optimizer_post(self, optimizer: Any = None, *_hook_args: Any) -> None:
        """``optimizer.step()`` ran (any optimizer's: the one that does not define steps tells where its backwards'
        loss went); a global step post-hook itself (its ``args, kwargs`` ignored)."""
        if not (self._found and optimizer is self.step_optimizer):
            if not self._in_step:
                self._other_stepped(optimizer)
            return
        self._in_step = False
        self._post_count += 1
        if self._closure_loss is not None:
            self._add(self._closure_loss)
        self._closure_loss = None
        absorb, self._absorb = self._absorb and self._loss is None, False
        if self._loss is None and self._shared is not None and not absorb:
            self._loss, self._backwards = self._shared, 1  # one loss, stepped by another optimizer first
        if not self.explicit and not absorb:
            self._close(skipped=False)

    def scaler_step(self, run: Callable[[], Any], optimizer: Any = None, steps_model: Optional[bool] = None) -> Any:
        """``GradScaler.step(optimizer)``: ``run()`` calls the original; when it skipped ``optimizer.step()`` of the
        optimizer that defines steps, close a skipped step."""
        before = self._post_count
        result = run()
        if self._post_count == before and not self.explicit and self.defines_steps(optimizer, steps_model):
            self._take_over()
            absorb, self._absorb = self._absorb and self._loss is None, False
            if not absorb:
                self._close(skipped=True)
        return result

    def batch(self, samples: Optional[int]) -> None:
        """The loader handed out a batch of ``samples`` (None: size unknown)."""
        closed = self._closed  # the step the last optimizer step closed (commit(), inline: once a step)
        if closed is not None:
            self._closed = None
            self._on_commit(closed)
        if self._samples is not None:
            self._samples = None if samples is None else self._samples + samples

    def fall_back(self) -> int:
        """No optimizer steps: each held backward becomes a step, and so does each backward from now on.

        Returns how many held backwards became steps (0 when nothing was held or steps already have a source).
        """
        if self.source != WATCH:
            return 0
        self.source = BACKWARD
        held, self._held = self._held, []
        if self.explicit:
            return 0
        before = 0
        for entry in held:
            samples = None
            if entry.samples is not None and self._samples is not None:
                samples = entry.samples - before
                before = entry.samples
            self._close(False, held=entry, samples=samples)
        if self._samples is not None:
            self._samples -= before  # what came after the last held backward belongs to the next step
        self._loss, self._backwards = None, 0
        return len(held)

    def explicit_step(self, loss: Any = None) -> None:
        """``mon.step(loss)``: end a step now; a step the hooks just closed is adopted, not doubled.

        From the first call on, hooks no longer end steps.
        """
        self.explicit = True
        self._held = []  # their losses are in the step being ended
        if self._closed is not None and self._loss is None:
            if loss is not None:
                self._closed.loss = loss
            self.commit()
            return
        self.commit()
        if loss is not None:
            self._loss, self._backwards = loss, 1
        self._close(skipped=False)
        self.commit()

    def steps_from(self, passed: bool) -> dict:
        """What ended the steps (summary.json's ``steps_from``); ``passed``: the optimizer was given."""
        kind = "explicit" if self.explicit else self.source
        opt = self.step_optimizer
        return {"kind": None if kind == WATCH else kind,
                "optimizer": type(opt).__name__ if opt is not None and kind == OPTIMIZER else None,
                "passed": passed}

    def commit(self) -> None:
        """Commit the step closed last, if any (the block's end calls this too)."""
        closed, self._closed = self._closed, None
        if closed is not None:
            self._on_commit(closed)

    # --- several optimizers ------------------------------------------------------------------------------------

    def _name(self, optimizer: Any) -> tuple:
        """``(name, follows)`` of an optimizer, fixed when it first steps."""
        known = self._names.get(id(optimizer))
        if known is None:
            follows = self._post_count > 0 and optimizer is not self.step_optimizer
            known = self._names[id(optimizer)] = (self._name_of(optimizer, len(self._names)), follows)
        return known

    def _other_stepped(self, optimizer: Any) -> None:
        """An optimizer other than the steps' one stepped: what was back-propagated since the last optimizer step
        is its loss (see the module docstring)."""
        if self.explicit or self.source == BACKWARD:
            return
        name, follows = self._name(optimizer)
        loss, backwards = self._loss, self._backwards
        self._loss, self._backwards, self._held = None, 0, []  # the held backwards were this optimizer's
        if loss is None:
            loss = self._shared
        elif self._mean and backwards > 1:
            with internal():
                loss = loss / backwards
        self._shared = loss
        if loss is None:
            return
        if not follows:
            self._others[name] = loss
        elif self._closed is not None:
            closed = self._closed
            if closed.losses is None:
                closed.losses = {self._name(self.step_optimizer)[0]: closed.loss}
            closed.losses[name] = loss

    # --- closing --------------------------------------------------------------------------------------------------

    def _add(self, loss: Any) -> None:
        if self._loss is None:
            self._loss = loss
        else:
            with internal():
                self._loss = self._loss + loss
        self._backwards += 1

    def _take_over(self) -> None:
        """An optimizer steps: from now on it ends steps, and what was held is this step's. After steps per
        backward, the step its backward already closed is this optimizer step's (it is not closed twice)."""
        if self.source != OPTIMIZER:
            self._absorb = self.source == BACKWARD and self._loss is None
            self.source = OPTIMIZER
            self._held = []

    def _close(self, skipped: bool, held: Optional[_Held] = None, samples: Optional[int] = None) -> None:
        """Close the step under way (its losses and samples so far, ending now), or a ``held`` backward's (its one
        loss, ``samples``, its times). One call a step: the step path's ``optimizer.step()`` ends here."""
        if held is None:
            loss, backwards, samples = self._loss, self._backwards, self._samples
            at, wall = time.perf_counter(), time.time()
            self._loss, self._backwards = None, 0
            if samples is not None:
                self._samples = 0
        else:
            loss, backwards, at, wall = held.loss, 1, held.at, held.wall
        if self._closed is not None:
            self.commit()  # a step closed earlier is never overwritten
        if loss is not None and self._mean and backwards > 1:
            with internal():
                loss = loss / backwards
        if self._samples_per_step is not None:
            samples = self._samples_per_step
        losses = None
        if self._others:
            losses, self._others = self._others, {}
            losses[self._name(self.step_optimizer)[0]] = loss
        step = self.next_step
        self.next_step += 1
        self._closed = ClosedStep(step, loss, samples, skipped, at, wall, losses)
        if self.on_end is not None:
            self.on_end(step)
