"""The recording layer's subscriber API: several subscribers share one function mode, each sees a call as a mode
stacked below the other would have (same function, API name and caller), and the undo takes the mode off."""

from __future__ import annotations

import contextlib
import sys

import torch
import torch.nn.functional as F

from ascend_tune.recording import subscribe as recording
from ascend_tune.recording.frames import internal, on_behalf


class Seen:
    """A subscriber that keeps (api, caller line, its place in the chain) and runs the call."""

    def __init__(self, log: list, name: str):
        self.recording = True
        self.log = log
        self.name = name

    @on_behalf  # with one mode per subscriber, the mode below looks past this frame to the call's maker
    def call_api(self, func, api, args, kwargs, caller, run):  # noqa: ANN001, ANN201 - the Subscriber protocol
        self.log.append((self.name, api, caller.f_lineno if caller is not None else None))
        with internal():
            torch.zeros(1).sum()  # a subscriber's own tensor work: no other subscriber sees it
        return run(*args, **kwargs)


def depth() -> int:
    return torch._C._len_torch_function_stack()


def test_subscribers_share_one_mode_and_see_each_call_in_order_with_the_same_caller():
    log: list = []
    base = depth()
    x = torch.randn(3, requires_grad=True)
    with contextlib.ExitStack() as undo:
        recording.subscribe(undo, Seen(log, "first"))
        recording.subscribe(undo, Seen(log, "second"))
        assert depth() == base + 1
        line = sys._getframe().f_lineno + 1
        y = F.gelu(x) + 1
    assert depth() == base
    assert [(name, api) for name, api, _ in log] == [
        ("second", ("Functional", "gelu")), ("first", ("Functional", "gelu")),
        ("second", ("Tensor", "add")), ("first", ("Tensor", "add"))]  # catalog.base_name says __add__
    assert {at for _, _, at in log} == {line}
    y.sum().backward()  # nothing is seen once the block's undo ran
    assert len(log) == 4


def test_one_mode_per_subscriber_when_not_shared_sees_the_same(monkeypatch):
    shared, stacked = [], []
    for log, share in ((shared, True), (stacked, False)):
        monkeypatch.setattr(recording, "SHARED", share)
        base = depth()
        with contextlib.ExitStack() as undo:
            recording.subscribe(undo, Seen(log, "first"))
            recording.subscribe(undo, Seen(log, "second"))
            assert depth() == base + (1 if share else 2)
            torch.relu(torch.ones(2)) * 2
        assert depth() == base
    assert shared == stacked


def test_a_subscriber_that_stops_recording_passes_calls_to_the_next():
    log: list = []
    with contextlib.ExitStack() as undo:
        first, second = Seen(log, "first"), Seen(log, "second")
        recording.subscribe(undo, first)
        recording.subscribe(undo, second)
        second.recording = False
        torch.relu(torch.ones(2))
    assert [name for name, _, _ in log] == ["first"]


def test_the_demo_and_the_test_models_are_the_users_code_the_machinery_is_not():
    import ascend_tune
    from ascend_tune.demo import pair
    from ascend_tune.recording.stacks import LIBRARY, USER, file_kind
    from ascend_tune.runtime import monitor
    from ascend_tune.testing import models

    assert file_kind(pair.__file__) == USER and file_kind(models.__file__) == USER  # the demo's loop, its models
    assert file_kind(monitor.__file__) == LIBRARY and file_kind(ascend_tune.__file__) == LIBRARY
