"""StepTracker: the events of a training loop in, closed optimizer steps out. No hooks, no files, no clock.

How a step is seen:
- a *step* ends at an ``optimizer.step()`` (its post-hook); with no optimizer, each backward ends one, once its
  gradients exist; from the first explicit ``mon.step()`` on, only explicit calls end steps;
- its *loss* is the sum of the scalar tensors back-propagated since the previous step: with the usual
  ``(loss / accum).backward()`` that is the mean micro-batch loss, the objective whose gradient the step applied
  (``accumulate="mean"`` divides by the number of backwards, for scripts that back-propagate undivided losses);
- backwards inside ``step()`` (between its pre- and post-hook) are closure evaluations (LBFGS): the first one is
  the step's loss when no backward came before the step, and they never add up;
- a step that GradScaler skips (inf/nan gradients: ``optimizer.step()`` never ran) is closed as *skipped*, with its
  loss, and never merged into the next one.

A step is *closed* when it ends (``on_end(step)`` at once, so a profiler or a dump brackets exactly that step) and
*committed* (``on_commit(ClosedStep)``: numbered, timed, logged) at the next event of the loop: a batch, a backward,
an optimizer step, ``mon.step``, the end of the block. That one-event delay lets an explicit ``mon.step(loss)``
adopt a step the hooks already closed, so mixing both styles never counts a step twice.

Losses are whatever tensors the caller hands in (already detached); they are only added, never read back here.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Optional

from . import capture


@dataclass
class ClosedStep:
    """One step as it ended: its number, its loss (a device tensor or None), its samples and times."""

    step: int
    loss: Any
    samples: Optional[int]
    skipped: bool
    at: float  # time.perf_counter() when the step ended
    wall: float  # time.time() when the step ended


class StepTracker:
    """Turns backward / optimizer / batch / explicit-step events into closed steps (see the module docstring).

    Parameters:
        start_step: the first step's number.
        on_end: called with a step's number the moment it ends.
        on_commit: called with the :class:`ClosedStep` once it is committed, in step order.
        optimizer_ends_steps: whether optimizer hooks are wired; without them each backward ends a step.
        accumulate: ``"sum"`` or ``"mean"`` of the losses back-propagated within one step.
        samples_per_step: a fixed sample count per step; else the batches' sizes are added (:meth:`batch`).
    """

    def __init__(
        self,
        start_step: int,
        on_end: Callable[[int], None],
        on_commit: Callable[[ClosedStep], None],
        *,
        optimizer_ends_steps: bool = True,
        accumulate: str = "sum",
        samples_per_step: Optional[int] = None,
    ):
        self.next_step = start_step
        self.explicit = False
        self._on_end = on_end
        self._on_commit = on_commit
        self._optimizer_ends_steps = optimizer_ends_steps
        self._mean = accumulate == "mean"
        self._samples_per_step = samples_per_step
        self._loss: Any = None
        self._backwards = 0
        self._in_step = False
        self._closure_loss: Any = None
        self._post_count = 0
        self._closed: Optional[ClosedStep] = None
        self._samples: Optional[int] = None  # None: batches are not counted (or one had no size)

    # --- events in ------------------------------------------------------------------------------------------------

    def count_batches(self) -> None:
        """From now on add each batch's size to the step's samples (the loader is marked)."""
        if self._samples is None:
            self._samples = 0

    def backward(self, loss: Any) -> None:
        """A scalar loss was back-propagated."""
        if self._in_step:
            if self._closure_loss is None:
                self._closure_loss = loss
            return
        self.commit()
        if self._loss is None:
            self._loss = loss
        else:
            with capture.internal():
                self._loss = self._loss + loss
        self._backwards += 1

    def backward_done(self) -> None:
        """The backward's gradients exist; with no optimizer and no explicit steps, that ends the step."""
        if not self._optimizer_ends_steps and not self.explicit and not self._in_step:
            self._close(skipped=False)

    def optimizer_pre(self) -> None:
        """``optimizer.step()`` begins."""
        self.commit()
        self._in_step = True
        self._closure_loss = None

    def optimizer_post(self) -> None:
        """``optimizer.step()`` ran."""
        self._in_step = False
        self._post_count += 1
        if self._loss is None and self._closure_loss is not None:
            self._loss, self._backwards = self._closure_loss, 1
        self._closure_loss = None
        if not self.explicit:
            self._close(skipped=False)

    def scaler_step(self, run: Callable[[], Any], ours: bool) -> Any:
        """``GradScaler.step``: ``run()`` calls the original; when it skipped ``optimizer.step()``, close a skipped
        step (``ours``: the scaler stepped the optimizer whose hooks end steps)."""
        before = self._post_count
        result = run()
        if ours and self._post_count == before and not self.explicit:
            self._close(skipped=True)
        return result

    def batch(self, samples: Optional[int]) -> None:
        """The loader handed out a batch of ``samples`` (None: size unknown)."""
        self.commit()
        if self._samples is not None:
            self._samples = None if samples is None else self._samples + samples

    def explicit_step(self, loss: Any = None) -> None:
        """``mon.step(loss)``: end a step now; a step the hooks just closed is adopted, not doubled.

        From the first call on, hooks no longer end steps.
        """
        self.explicit = True
        if self._closed is not None:
            if loss is not None:
                self._closed.loss = loss
            self.commit()
            return
        self.commit()
        if loss is not None:
            self._loss, self._backwards = loss, 1
        self._close(skipped=False)
        self.commit()

    def commit(self) -> None:
        """Commit the step closed last, if any (the block's end calls this too)."""
        closed, self._closed = self._closed, None
        if closed is not None:
            self._on_commit(closed)

    # --- closing --------------------------------------------------------------------------------------------------

    def _close(self, skipped: bool) -> None:
        self.commit()  # a step closed earlier is never overwritten
        loss = self._loss
        if loss is not None and self._mean and self._backwards > 1:
            with capture.internal():
                loss = loss / self._backwards
        samples = self._samples_per_step if self._samples_per_step is not None else self._samples
        step = self.next_step
        self.next_step += 1
        self._closed = ClosedStep(step, loss, samples, skipped, time.perf_counter(), time.time())
        self._loss, self._backwards = None, 0
        if self._samples is not None:
            self._samples = 0
        self._on_end(step)
