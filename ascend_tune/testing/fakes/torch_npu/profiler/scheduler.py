"""Fake ``torch_npu.profiler.scheduler``: the profiler's own action enum and its step schedule.

Note the differences from torch.profiler: ``ProfilerAction`` is a separate enum (not torch's), and ``Schedule`` takes
``(wait, active, warmup=0, repeat=0, skip_first=0, skip_first_wait=0)``, positionally, where torch's ``schedule`` is
keyword-only with ``warmup`` second.
"""

from __future__ import annotations

from enum import Enum

from torch_npu._fake_release import API_2_1, narrowed
from torch_npu.utils._error_code import ErrCode, prof_error

from ._constant import print_warn_msg

__all__ = ["ProfilerAction", "Schedule"]


class ProfilerAction(Enum):
    """What the profiler does during a step."""

    NONE = 0
    WARMUP = 1
    RECORD = 2
    RECORD_AND_SAVE = 3


class Schedule:
    """Skip ``skip_first`` steps, then cycle: ``wait`` idle, ``warmup``, ``active`` recorded; ``repeat`` cycles.

    ``repeat=0`` cycles until the profiler stops.

    A non-zero ``skip_first_wait`` drops the first cycle's wait. Invalid values are reset with a warning.
    """

    def __init__(
        self, wait: int, active: int, warmup: int = 0, repeat: int = 0, skip_first: int = 0, skip_first_wait: int = 0
    ) -> None:
        self.wait = wait
        self.active = active
        self.warmup = warmup
        self.repeat = repeat
        self.skip_first = skip_first
        self.skip_first_wait = skip_first_wait
        self._check_params()

    def __call__(self, step: int) -> ProfilerAction:
        """The action for profiler step ``step`` (counted from 0)."""
        if step < 0:
            raise ValueError("Invalid parameter step, which must be not less than 0." + prof_error(ErrCode.VALUE))
        if step < self.skip_first:
            return ProfilerAction.NONE
        step -= self.skip_first
        if self.skip_first_wait != 0:
            step += self.wait
        cycle = self.wait + self.warmup + self.active
        if self.repeat > 0 and step / cycle >= self.repeat:
            return ProfilerAction.NONE
        position = step % cycle
        if position < self.wait:
            return ProfilerAction.NONE
        if position < self.wait + self.warmup:
            return ProfilerAction.WARMUP
        return ProfilerAction.RECORD if position < cycle - 1 else ProfilerAction.RECORD_AND_SAVE

    def _check_params(self) -> None:
        for name, minimum, default in (
            ("wait", 0, 0),
            ("warmup", 0, 0),
            ("active", 1, 1),
            ("repeat", 0, 0),
            ("skip_first", 0, 0),
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or value < minimum:
                print_warn_msg(f"Invalid parameter {name}, reset it to {default}.")
                setattr(self, name, default)
        if not isinstance(self.skip_first_wait, int):
            print_warn_msg("Invalid parameter skip_first_wait, reset it to 0.")
            self.skip_first_wait = 0
        if self.warmup == 0:
            print_warn_msg("Profiler won't be using warmup, this can skew profiler results")


def _default_schedule_fn(_: int) -> ProfilerAction:
    """Without a schedule the profiler records from start() to stop()."""
    return ProfilerAction.RECORD


if API_2_1:  # torch-npu 2.1.0.post8 has no skip_first_wait
    Schedule.__init__ = narrowed(  # type: ignore[method-assign]
        Schedule.__init__, ("self", "wait", "active", "warmup", "repeat", "skip_first")
    )
