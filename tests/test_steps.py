"""StepTracker on its own: loop events in, closed steps out (no torch, no hooks, no files)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ascend_tune.steps import StepTracker

losses = st.floats(min_value=-100, max_value=100, allow_nan=False).map(lambda x: round(x, 3))

# one optimizer step of a training loop, as (kind, batch size, losses back-propagated before step(), losses of
# closure evaluations inside step())
iteration = st.one_of(
    st.tuples(st.just("step"), st.integers(1, 9), st.lists(losses, min_size=1, max_size=4), st.just([])),
    st.tuples(st.just("skip"), st.integers(1, 9), st.lists(losses, min_size=1, max_size=4), st.just([])),
    st.tuples(st.just("closure"), st.integers(1, 9), st.just([]), st.lists(losses, min_size=1, max_size=3)),
    st.tuples(st.just("closure"), st.integers(1, 9), st.lists(losses, min_size=1, max_size=2),
              st.lists(losses, min_size=1, max_size=3)),
)


class Loop:
    """Drives a tracker the way the monitor's capture does."""

    def __init__(self, accumulate: str = "sum", optimizer: bool = True, start_step: int = 0):
        self.ended: list = []
        self.committed: list = []
        self.tracker = StepTracker(start_step, self.ended.append, self.committed.append,
                                   optimizer_ends_steps=optimizer, accumulate=accumulate)
        self.tracker.count_batches()

    def run(self, kind: str, batch: int, before: list, inside: list) -> None:
        t = self.tracker
        t.batch(batch)
        for loss in before:
            t.backward(loss)
            t.backward_done()
        if kind == "skip":  # GradScaler found inf/nan gradients: optimizer.step() never runs
            t.scaler_step(lambda: "skipped", ours=True)
            return
        t.optimizer_pre()
        for loss in inside:  # LBFGS: step() calls the closure, which back-propagates
            t.backward(loss)
            t.backward_done()
        t.optimizer_post()


def expected(kind: str, before: list, inside: list, accumulate: str) -> float:
    if before:
        total = sum(before)
        return total / len(before) if accumulate == "mean" and len(before) > 1 else total
    return inside[0]


@settings(max_examples=150, deadline=None)
@given(st.lists(iteration, min_size=1, max_size=12), st.sampled_from(["sum", "mean"]), st.integers(0, 50))
def test_each_optimizer_step_is_one_step_with_its_accumulated_loss(iterations, accumulate, start_step):
    loop = Loop(accumulate, start_step=start_step)
    for it in iterations:
        loop.run(*it)
    loop.tracker.commit()  # the block's end
    assert [c.step for c in loop.committed] == list(range(start_step, start_step + len(iterations)))
    assert loop.ended == [c.step for c in loop.committed]
    for closed, (kind, batch, before, inside) in zip(loop.committed, iterations):
        assert closed.skipped == (kind == "skip")
        assert closed.samples == batch
        assert math.isclose(closed.loss, expected(kind, before, inside, accumulate), rel_tol=1e-12, abs_tol=1e-9)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 9), st.lists(losses, min_size=1, max_size=3), st.booleans(),
                          st.one_of(st.none(), losses)), min_size=1, max_size=10))
def test_explicit_steps_adopt_the_step_the_hooks_closed(iterations):
    """``optimizer.step(); mon.step(loss)`` in one loop, hooks and explicit calls mixed: one step each."""
    loop = Loop()
    for batch, before, with_hooks, explicit_loss in iterations:
        loop.tracker.batch(batch)
        for loss in before:
            loop.tracker.backward(loss)
        if with_hooks:
            loop.tracker.optimizer_pre()
            loop.tracker.optimizer_post()
        loop.tracker.explicit_step(explicit_loss)
    loop.tracker.commit()
    assert [c.step for c in loop.committed] == list(range(len(iterations)))
    for closed, (batch, before, _hooks, explicit_loss) in zip(loop.committed, iterations):
        want = explicit_loss if explicit_loss is not None else sum(before)
        assert math.isclose(closed.loss, want, rel_tol=1e-12, abs_tol=1e-9)
        assert closed.samples == batch


def test_after_the_first_explicit_step_hooks_no_longer_end_steps():
    loop = Loop()
    loop.tracker.backward(1.0)
    loop.tracker.explicit_step()
    for loss in (2.0, 3.0):  # two optimizer steps, then one explicit step: one step of both losses
        loop.tracker.backward(loss)
        loop.tracker.optimizer_pre()
        loop.tracker.optimizer_post()
    loop.tracker.explicit_step()
    loop.tracker.commit()
    assert [(c.step, c.loss) for c in loop.committed] == [(0, 1.0), (1, 5.0)]


def test_without_an_optimizer_each_backward_is_a_step_once_its_gradients_exist():
    loop = Loop(optimizer=False)
    loop.tracker.batch(4)
    loop.tracker.backward(0.5)
    assert loop.ended == []  # its gradients are not there yet
    loop.tracker.backward_done()
    assert loop.ended == [0] and loop.committed == []  # committed at the next event only
    loop.tracker.batch(4)
    assert [(c.step, c.loss, c.samples) for c in loop.committed] == [(0, 0.5, 4)]


def test_a_skipped_step_keeps_its_loss_and_is_not_merged_into_the_next():
    loop = Loop()
    loop.run("skip", 2, [8.0], [])
    loop.run("step", 2, [1.0], [])
    loop.tracker.commit()
    assert [(c.loss, c.skipped) for c in loop.committed] == [(8.0, True), (1.0, False)]


def test_a_scaler_stepping_another_optimizer_closes_nothing():
    loop = Loop()
    loop.tracker.backward(1.0)
    assert loop.tracker.scaler_step(lambda: 7, ours=False) == 7
    loop.tracker.commit()
    assert loop.committed == []


@pytest.mark.parametrize("fixed", [None, 32])
def test_samples_per_step_overrides_the_batches(fixed):
    committed: list = []
    tracker = StepTracker(0, lambda step: None, committed.append, samples_per_step=fixed)
    tracker.count_batches()
    tracker.batch(3)
    tracker.batch(None)  # a batch of unknown size: the step's samples are unknown
    tracker.backward(1.0)
    tracker.optimizer_pre()
    tracker.optimizer_post()
    tracker.commit()
    assert committed[0].samples == fixed
