"""StepTracker on its own: loop events in, closed steps out (no torch, no hooks, no files)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ascend_tune.runtime import compiled, steps
from ascend_tune.runtime.steps import StepTracker

losses = st.floats(min_value=-100, max_value=100, allow_nan=False).map(lambda x: round(x, 3))

# one optimizer step of a training loop, as (kind, batch size, losses back-propagated before step(), losses of
# closure evaluations inside step()); "closure" with losses before it is Lightning's accumulation, whose last
# micro-batch back-propagates inside optimizer.step(closure)
iteration = st.one_of(
    st.tuples(st.just("step"), st.integers(1, 9), st.lists(losses, min_size=1, max_size=4), st.just([])),
    st.tuples(st.just("skip"), st.integers(1, 9), st.lists(losses, min_size=1, max_size=4), st.just([])),
    st.tuples(st.just("closure"), st.integers(1, 9), st.just([]), st.lists(losses, min_size=1, max_size=3)),
    st.tuples(st.just("closure"), st.integers(1, 9), st.lists(losses, min_size=1, max_size=2),
              st.lists(losses, min_size=1, max_size=3)),
)

G, D = "generator optimizer", "discriminator optimizer"


@pytest.fixture(autouse=True, scope="module", params=["python", "compiled"])
def tracker_class(request):
    """Every test of this file runs on the Python StepTracker and on the compiled one (runtime/step_path.c), which
    must close, number and commit the same steps."""
    global StepTracker
    chosen = steps.StepTracker if request.param == "python" else compiled.tracker_class()
    if chosen is steps.StepTracker and request.param == "compiled":
        pytest.skip("the step path is not compiled here (no C compiler or no Python.h)")
    StepTracker = chosen
    yield chosen
    StepTracker = steps.StepTracker


class Loop:
    """Drives a tracker the way the monitor's capture does.

    ``passed``: the optimizer was given to the monitor (its own hooks), else every optimizer is watched and
    backwards are held until one steps; ``model``: whether a model was given (an optimizer then says whether it
    steps the model's parameters).
    """

    def __init__(self, accumulate: str = "sum", passed: bool = True, start_step: int = 0, model: bool = True):
        self.ended: list = []
        self.committed: list = []
        self.model = model
        self.tracker = StepTracker(start_step, self.ended.append, self.committed.append,
                                   source="optimizer" if passed else "watch", optimizer=G if passed else None,
                                   accumulate=accumulate)
        self.tracker.count_batches()

    def steps_model(self, name: str):
        return (name == G) if self.model else None

    def backward(self, loss: float) -> None:
        self.tracker.backward(loss)
        self.tracker.backward_done()

    def optimizer_step(self, name: str, inside: list = ()) -> None:
        self.tracker.optimizer_pre(name, self.steps_model(name))
        for loss in inside:  # LBFGS / Lightning: step() calls the closure, which back-propagates
            self.backward(loss)
        self.tracker.optimizer_post(name)

    def run(self, kind: str, batch: int, before: list, inside: list, other: list = ()) -> None:
        """One iteration; ``other``: a second optimizer (a GAN's discriminator) back-propagates and steps first."""
        t = self.tracker
        t.batch(batch)
        if other:
            for loss in other:
                self.backward(loss)
            self.optimizer_step(D)
        for loss in before:
            self.backward(loss)
        if kind == "skip":  # GradScaler found inf/nan gradients: optimizer.step() never runs
            t.scaler_step(lambda: "skipped", G, self.steps_model(G))
            return
        self.optimizer_step(G, inside)


def expected(before: list, inside: list, accumulate: str, other: list = ()) -> float:
    micro = list(other) + list(before) + list(inside[:1])  # later closure evaluations re-evaluate (LBFGS)
    total = sum(micro)
    return total / len(micro) if accumulate == "mean" and len(micro) > 1 else total


def close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-9)


@settings(max_examples=150, deadline=None)
@given(st.lists(iteration, min_size=1, max_size=12), st.sampled_from(["sum", "mean"]), st.integers(0, 50),
       st.booleans())
def test_each_optimizer_step_is_one_step_with_its_accumulated_loss(iterations, accumulate, start_step, passed):
    """The same steps whether the optimizer was passed or found stepping: backwards before the first step were held."""
    loop = Loop(accumulate, passed=passed, start_step=start_step)
    for it in iterations:
        loop.run(*it)
    loop.tracker.commit()  # the block's end
    assert [c.step for c in loop.committed] == list(range(start_step, start_step + len(iterations)))
    assert loop.ended == [c.step for c in loop.committed]
    for closed, (kind, batch, before, inside) in zip(loop.committed, iterations):
        assert closed.skipped == (kind == "skip")
        assert closed.samples == batch
        assert close(closed.loss, expected(before, inside, accumulate))


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 9), st.lists(losses, min_size=1, max_size=4)), min_size=1, max_size=6))
def test_held_backwards_end_no_step_until_the_first_optimizer_step(micro_batches):
    """An optimizer created inside the block: its first step, after N backwards, is one step of their sum."""
    loop = Loop(passed=False)
    for batch, micro in micro_batches[:-1]:  # no optimizer has stepped yet
        loop.tracker.batch(batch)
        for loss in micro:
            loop.backward(loss)
    assert loop.ended == [] and loop.committed == [] and loop.tracker.holding == sum(len(m) for _, m in
                                                                                     micro_batches[:-1])
    batch, micro = micro_batches[-1]
    loop.run("step", batch, micro, [])
    loop.tracker.commit()
    assert [c.step for c in loop.committed] == [0] and loop.tracker.holding == 0
    assert close(loop.committed[0].loss, sum(sum(m) for _, m in micro_batches))
    assert loop.committed[0].samples == sum(b for b, _ in micro_batches)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(iteration, st.lists(losses, min_size=1, max_size=2)), min_size=1, max_size=8),
       st.booleans())
def test_several_optimizers_the_one_stepping_the_model_defines_the_steps(iterations, passed):
    """A GAN: the discriminator back-propagates and steps first in each iteration. With the model (the generator)
    known, the generator's optimizer ends steps; a backward belongs to the next optimizer that steps, so each step's
    loss is the generator's alone, and its ``losses`` hold both, the discriminator's of the same batch included."""
    loop = Loop(passed=passed, model=True)
    for (kind, batch, before, inside), other in iterations:
        loop.run(kind, batch, before, inside, other)
    loop.tracker.commit()
    assert [c.step for c in loop.committed] == list(range(len(iterations)))
    assert loop.tracker.step_optimizer == G
    for closed, ((kind, _batch, before, inside), other) in zip(loop.committed, iterations):
        assert closed.skipped == (kind == "skip")
        assert close(closed.loss, expected(before, inside, "sum"))
        assert list(closed.losses) == ["optimizer0", "optimizer1"]  # named in the order they first stepped: D, G
        assert close(closed.losses["optimizer0"], sum(other)) and closed.losses["optimizer1"] == closed.loss


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.lists(losses, min_size=1, max_size=3), losses), min_size=1, max_size=8),
       st.booleans(), st.booleans())
def test_an_optimizer_stepping_after_the_steps_one_adds_its_loss_to_the_same_batch(batches, passed, loader):
    """pytorch/examples' dcgan: per batch errD_real and errD_fake back-propagate, optimizerD steps, then errG does and
    optimizerG steps. With D's optimizer defining steps (passed, or the first to step), step k logs errD(k) alone and
    holds errG(k) beside it, with or without batches marked."""
    ended, committed = [], []
    name_of = lambda opt, i: {D: "Discriminator"}.get(opt, f"o{i}")  # noqa: E731
    tracker = StepTracker(0, ended.append, committed.append, source="optimizer" if passed else "watch",
                          optimizer=D if passed else None, name_of=name_of)
    for d_losses, g_loss in batches:
        if loader:
            tracker.batch(4)
        for loss in d_losses:
            tracker.backward(loss)
            tracker.backward_done()
        tracker.optimizer_pre(D)
        tracker.optimizer_post(D)
        tracker.backward(g_loss)
        tracker.backward_done()
        tracker.optimizer_pre(G)
        tracker.optimizer_post(G)
    tracker.commit()
    assert [c.step for c in committed] == ended == list(range(len(batches)))
    for closed, (d_losses, g_loss) in zip(committed, batches):
        assert close(closed.loss, sum(d_losses))
        assert closed.losses == {"Discriminator": closed.loss, "o1": g_loss}


def test_two_optimizers_over_one_loss_share_it():
    """One backward, two optimizers (say, one for the matrices, one for the rest): the second to step shares the
    loss; the steps' optimizer keeps it whichever of them steps first."""
    for order in ((G, D), (D, G)):
        loop = Loop()
        for loss in (1.0, 2.0):
            loop.tracker.batch(1)
            loop.backward(loss)
            for name in order:
                loop.optimizer_step(name)
        loop.tracker.commit()
        assert [c.loss for c in loop.committed] == [1.0, 2.0], order


def test_with_no_model_the_first_optimizer_to_step_defines_the_steps():
    loop = Loop(passed=False, model=False)
    for g, d in ((1.0, 10.0), (2.0, 20.0), (3.0, 30.0)):
        loop.run("step", 4, [g], [], other=[d])
    loop.tracker.commit()
    # D steps first, so D's steps end steps with D's loss; G's loss of the same batch is beside it
    assert loop.tracker.step_optimizer == D
    assert [(c.step, c.loss, c.losses) for c in loop.committed] == [
        (0, 10.0, {"optimizer0": 10.0, "optimizer1": 1.0}), (1, 20.0, {"optimizer0": 20.0, "optimizer1": 2.0}),
        (2, 30.0, {"optimizer0": 30.0, "optimizer1": 3.0})]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 9), losses), min_size=1, max_size=10), st.integers(0, 10))
def test_a_loop_that_never_steps_an_optimizer_falls_back_to_a_step_per_backward(backwards, known_after):
    """Held backwards become one step each, with their own loss, samples and time, once the fall back is known;
    each later backward ends a step as its gradients exist."""
    known_after = min(known_after, len(backwards))
    loop = Loop(passed=False)
    for batch, loss in backwards[:known_after]:
        loop.tracker.batch(batch)
        loop.backward(loss)
    assert loop.ended == []
    assert loop.tracker.fall_back() == known_after
    assert loop.ended == list(range(known_after))
    for batch, loss in backwards[known_after:]:
        loop.tracker.batch(batch)
        loop.backward(loss)
    loop.tracker.commit()
    assert [(c.step, c.loss, c.samples) for c in loop.committed] == [
        (i, loss, batch) for i, (batch, loss) in enumerate(backwards)]
    times = [c.at for c in loop.committed]
    assert times == sorted(times)
    assert loop.tracker.fall_back() == 0  # once


def test_samples_after_the_last_held_backward_belong_to_the_next_step():
    loop = Loop(passed=False)
    loop.tracker.batch(3)
    loop.backward(1.0)
    loop.tracker.batch(5)  # the next iteration's batch comes before its backward tells it was no accumulation
    loop.tracker.fall_back()
    loop.backward(2.0)
    loop.tracker.commit()
    assert [(c.loss, c.samples) for c in loop.committed] == [(1.0, 3), (2.0, 5)]


def test_an_optimizer_stepping_after_the_fall_back_takes_over_without_a_double_step():
    loop = Loop(passed=False)
    loop.tracker.batch(2)
    loop.backward(1.0)
    loop.tracker.fall_back()  # say, a pass over the loader went by without an optimizer step
    loop.tracker.batch(2)
    loop.backward(2.0)  # ends step 1 at once (steps per backward) ...
    loop.optimizer_step(G)  # ... and the optimizer step that follows is that step's, not a new empty one
    for loss in (3.0, 4.0):  # from now on the optimizer ends steps: accumulation is one step again
        loop.tracker.batch(2)
        loop.backward(loss)
    loop.optimizer_step(G)
    loop.tracker.commit()
    assert [(c.step, c.loss, c.samples) for c in loop.committed] == [(0, 1.0, 2), (1, 2.0, 2), (2, 7.0, 4)]


def test_an_explicit_step_takes_what_was_held():
    loop = Loop(passed=False)
    for loss in (1.0, 2.0):
        loop.backward(loss)
    loop.tracker.explicit_step()
    loop.tracker.commit()
    assert [(c.step, c.loss) for c in loop.committed] == [(0, 3.0)] and loop.tracker.holding == 0


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
            loop.tracker.optimizer_pre(G)
            loop.tracker.optimizer_post(G)
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
        loop.optimizer_step(G)
    loop.tracker.explicit_step()
    loop.tracker.commit()
    assert [(c.step, c.loss) for c in loop.committed] == [(0, 1.0), (1, 5.0)]


def test_with_backwards_ending_steps_each_is_a_step_once_its_gradients_exist():
    committed: list = []
    ended: list = []
    tracker = StepTracker(0, ended.append, committed.append, source="backward")
    tracker.count_batches()
    tracker.batch(4)
    tracker.backward(0.5)
    assert ended == []  # its gradients are not there yet
    tracker.backward_done()
    assert ended == [0] and committed == []  # committed at the next event only
    tracker.batch(4)
    assert [(c.step, c.loss, c.samples) for c in committed] == [(0, 0.5, 4)]


def test_a_skipped_step_keeps_its_loss_and_is_not_merged_into_the_next():
    loop = Loop()
    loop.run("skip", 2, [8.0], [])
    loop.run("step", 2, [1.0], [])
    loop.tracker.commit()
    assert [(c.loss, c.skipped) for c in loop.committed] == [(8.0, True), (1.0, False)]


def test_a_scaler_stepping_another_optimizer_closes_nothing():
    loop = Loop()
    loop.tracker.backward(1.0)
    assert loop.tracker.scaler_step(lambda: 7, D, False) == 7
    loop.tracker.commit()
    assert loop.committed == []


@pytest.mark.parametrize("fixed", [None, 32])
def test_samples_per_step_overrides_the_batches(fixed):
    committed: list = []
    tracker = StepTracker(0, lambda step: None, committed.append, optimizer=G, samples_per_step=fixed)
    tracker.count_batches()
    tracker.batch(3)
    tracker.batch(None)  # a batch of unknown size: the step's samples are unknown
    tracker.backward(1.0)
    tracker.optimizer_pre(G)
    tracker.optimizer_post(G)
    tracker.commit()
    assert committed[0].samples == fixed
