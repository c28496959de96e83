"""The pytest plugin, used by a pretend downstream repository through pytester."""

from __future__ import annotations

DOWNSTREAM_TESTS = '''
import pytest
import torch
import torch.nn.functional as F

from ascend_tune.testing import assert_loss_aligned as direct_assert


def train(make_monitor, lr, **options):
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    x = torch.randn(64, 8)
    y = (x[:, 0] > 0).long()
    mon = make_monitor(model, optimizer, warmup_steps=0, **options)
    with mon:
        for i in range(0, 64, 8):
            loss = F.cross_entropy(model(x[i:i + 8]), y[i:i + 8])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return mon.log_dir


def test_same_seed_runs_are_aligned(training_monitor, loss_log, assert_loss_aligned):
    base, target = train(training_monitor, 0.1), train(training_monitor, 0.1)
    assert base != target
    log = loss_log(base)
    assert log.lines == 8 and list(log.steps) == list(range(8))
    result = assert_loss_aligned(base, target)
    assert result.mean_rel_gap == 0.0


def test_a_changed_lr_fails_naming_the_worst_step(training_monitor):
    base, target = train(training_monitor, 0.1), train(training_monitor, 3.0)
    with pytest.raises(AssertionError, match=r"worst step \\d+: base .*, target "):
        direct_assert(base, target, threshold=0.01)


def test_fake_npu_is_detected(fake_npu):
    from ascend_tune import detect_device

    assert detect_device(refresh=True).kind == "npu"


def test_the_device_option_reached_detection(request):
    import os

    assert os.environ.get("ASCEND_TUNE_DEVICE") == request.config.getoption("--ascend-tune-device")


@pytest.mark.npu
def test_only_on_an_npu():
    raise AssertionError("must be skipped on a CPU machine")


@pytest.mark.cuda
def test_only_on_cuda():
    raise AssertionError("must be skipped on a CPU machine")
'''


def test_a_downstream_suite_uses_every_fixture_and_marker(pytester, monkeypatch):
    monkeypatch.delenv("ASCEND_TUNE_DEVICE", raising=False)
    pytester.makepyfile(test_downstream=DOWNSTREAM_TESTS)
    result = pytester.runpytest_subprocess("--ascend-tune-device=cpu", "-rs")
    result.assert_outcomes(passed=4, skipped=2)
    result.stdout.fnmatch_lines(["*needs a npu device; ascend_tune detected cpu*"])


def test_the_failure_message_names_the_worst_step(pytester):
    pytester.makepyfile(
        test_fails='''
import torch
import torch.nn.functional as F


def run(make, lr):
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    x, y = torch.randn(40, 4), torch.randint(0, 2, (40,))
    with make(model, optimizer, warmup_steps=0) as mon:
        for i in range(0, 40, 4):
            loss = F.cross_entropy(model(x[i:i + 4]), y[i:i + 4])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return mon.log_dir


def test_diverging(training_monitor, assert_loss_aligned):
    assert_loss_aligned(run(training_monitor, 0.01), run(training_monitor, 20.0), threshold=0.02)
'''
    )
    result = pytester.runpytest_subprocess()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*loss curves not aligned: mean relative gap*", "*worst step *: base *, target *"])
