"""A finding of the trace advisor, and the per-step bookkeeping its rules share."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Optional

from ..traces.model import Trace

SEVERITIES = ("info", "warning", "critical")  # warning and above make `ascend-tune advise` exit 1


@dataclass(frozen=True)
class Finding:
    """One piece of advice: what was seen (with numbers and the step) and the change that addresses it."""

    rule: str
    severity: str  # one of SEVERITIES
    title: str
    evidence: str
    fix: str  # code
    trace: str = ""
    step: Optional[int] = None
    where: tuple = ()  # Python frames or enclosing events, innermost first
    saving_ms: Optional[float] = None  # estimated time saved per step


def step_windows(trace: Trace):
    """Each profiled step with the range of event indices that start inside it."""
    for step in trace.steps:
        yield step, trace.in_step(step)


def median(values) -> float:
    """The median, 0.0 for no values."""
    values = list(values)
    return statistics.median(values) if values else 0.0


def step_label(number: Optional[int]) -> str:
    return "the whole trace" if number is None else f"step #{number}"
