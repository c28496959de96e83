"""The per-rank trace model of a multi-rank run, and the slow rank it shows (msprof-analyze's ``slow_rank`` and
``cluster_step_trace_time`` recipes, on torch.profiler and torch_npu traces of CPU, CUDA and NPU runs alike).

Per rank (a worker reads only that rank's traces, :func:`rank_trace`): per profiled step, the time spent computing,
in communication, both at once, and free (nothing running), on the device when the trace has a device timeline,
else on the host; and each collective in order with its duration. A collective is a device kernel / task whose
name says so (``nccl*``, ``hcom_*``, ``HCCL``...) or, without a device timeline, the host annotation that spans
its wait (``gloo:all_reduce``, ``nccl:all_reduce``; torch's ``record_param_comms``).

Across ranks (:func:`slow_rank`): the k-th collective of a name in step N is one meeting of every rank; the rank
whose call was *shortest* arrived last and made the others wait. Per rank, the communication time summed over the
steps: the slow rank's is a low outlier (Dixon's Q at 99.5% up to 100 ranks, 3 sigma beyond, :mod:`..stats`) or
its count of last arrivals is one that equal ranks reach with a chance under 0.5%, and it arrived last at most
meetings. HTA's ``get_potential_stragglers`` looks for the latest-starting NCCL kernel
instead, which breaks on renamed kernels (HTA #360) and on traces without CUDA (HTA #219).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional

import numpy as np

from ...errors import InputError
from ...formats.run_dir import PROFILE_DIR
from ..parallel import map_ranks
from ..stats import CONFIDENCE, most_extreme, tally_chance
from .find import find_traces, trace_rank
from .vocabulary import COLLECTIVE, HOST_COLLECTIVE


@dataclass(frozen=True)
class StepSplit:
    """One profiled step of one rank, in microseconds."""

    number: Optional[int]
    total: float
    compute: float  # computing, communication not running
    communication: float  # communication not overlapped by compute
    overlapped: float
    free: float


@dataclass(frozen=True)
class RankTrace:
    """What one rank's traces say (a worker's summary)."""

    rank: int
    traces: int
    timeline: str  # "device" or "host"
    steps: tuple  # StepSplit
    collectives: tuple  # (step number, name, k-th of that name in the step, duration us)
    error: str = ""

    def total(self, field: str) -> float:
        return float(sum(getattr(s, field) for s in self.steps))


@dataclass(frozen=True)
class SlowRank:
    """The trace analysis of every rank: per-rank splits, who arrived last, the test."""

    location: str
    ranks: tuple  # RankTrace, by rank
    meetings: int  # collectives seen on every rank
    last: dict  # rank -> meetings at which it arrived last
    slow: Optional[int]
    test: str
    imbalance: dict  # field -> (max - min) / mean over the ranks, msprof-analyze's "more than 5%" check

    def as_dict(self) -> dict:
        """JSON-ready (perf --json's ``traces`` of one run)."""
        return {"slow_rank": self.slow, "answer": self.answer(), "meetings": self.meetings, "test": self.test,
                "arrived_last": {str(r): n for r, n in self.last.items()}, "imbalance": self.imbalance,
                "ranks": [{"rank": r.rank, "traces": r.traces, "timeline": r.timeline, "steps": len(r.steps),
                           "error": r.error or None,
                           **{f"{f}_us": r.total(f) for f in ("compute", "communication", "overlapped", "free")}}
                          for r in self.ranks]}

    def answer(self) -> str:
        """The one line a user acts on."""
        readable = [r for r in self.ranks if not r.error]
        if len(readable) < 2:
            return f"{self.location}: traces of fewer than two ranks; profile every rank (profile= on all ranks)"
        tally = ", ".join(f"rank {r}: {n}" for r, n in sorted(self.last.items())) or "none"
        if self.slow is None:
            return (f"traces: no slow rank: none arrived last at most of {self.meetings} collective(s) by more than "
                    f"chance or with a communication time set apart ({self.test}; arrived last: {tally})")
        return (f"traces: rank {self.slow} is the slow rank: it arrived last at {self.last[self.slow]} of "
                f"{self.meetings} collective(s) (the shortest wait; {self.test}); the others wait for it")


def rank_traces(path: str) -> dict:
    """``{rank: [trace files]}`` of a run folder, its ``profile`` folder, or a folder of ``rank{R}`` folders."""
    root = os.fspath(path)
    if os.path.isdir(os.path.join(root, PROFILE_DIR)):
        root = os.path.join(root, PROFILE_DIR)
    if not os.path.isdir(root):
        return {}
    out: dict = {}
    for trace in find_traces(root):
        rank = trace_rank(trace, within=root)
        if rank is not None:
            out.setdefault(rank, []).append(trace)
    return out


def rank_trace(task: tuple) -> RankTrace:
    """One rank's :class:`RankTrace` from its trace files (run in a worker)."""
    from .read import read_trace

    rank, paths = task
    steps, collectives, timeline = [], [], "host"
    try:
        for path in paths:
            trace = read_trace(path)
            timeline = "device" if trace.has_device_timeline else "host"
            for step in trace.steps:
                split, comms = _split(trace, step, timeline)
                steps.append(split)
                collectives.extend(comms)
    except (InputError, OSError, ValueError) as exc:
        return RankTrace(rank, len(paths), timeline, (), (), str(exc))
    return RankTrace(rank, len(paths), timeline, tuple(steps), tuple(collectives))


def _split(trace, step, timeline: str) -> tuple:
    compute, comm, comms, seen = [], [], [], {}
    for index in trace.in_step(step):
        event = trace.events[index]  # an event that starts in the step belongs to it (a gloo call ends late)
        if timeline == "device":
            if event.role != "device":
                continue
            is_comm = bool(COLLECTIVE.search(event.name))
        else:
            is_comm = event.role == "host" and bool(HOST_COLLECTIVE.match(event.name))
            if not is_comm and not (event.role == "host" and event.tid == step.tid and event.cat == "cpu_op"):
                continue
        (comm if is_comm else compute).append((event.ts, min(event.end, step.end)))
        if is_comm:
            k = seen.get(event.name, 0)
            seen[event.name] = k + 1
            comms.append((step.number, event.name, k, event.dur))
    busy_compute, busy_comm = _union(compute), _union(comm)
    both = _union(compute + comm)
    overlapped = busy_compute + busy_comm - both
    split = StepSplit(step.number, step.dur, busy_compute - overlapped, busy_comm - overlapped, overlapped,
                      max(0.0, step.dur - both))
    return split, comms


def _union(intervals: list) -> float:
    total, end = 0.0, -np.inf
    for start, stop in sorted(intervals):
        if stop <= end:
            continue
        total += stop - max(start, end)
        end = stop
    return total


def slow_rank(path: str, jobs: Optional[int] = None) -> Optional[SlowRank]:
    """The slow rank of a multi-rank run from the traces of every rank (see the module docstring); None when the
    location holds traces of fewer than two ranks."""
    found = rank_traces(path)
    if len(found) < 2:
        return None
    ranks = tuple(map_ranks(rank_trace, sorted(found.items()), jobs))
    readable = [r for r in ranks if not r.error]
    meetings: dict = {}
    for r in readable:
        for step, name, k, dur in r.collectives:
            meetings.setdefault((step, name, k), {})[r.rank] = dur
    everyone = [m for m in meetings.values() if len(m) == len(readable)]
    last: dict = {}
    for meeting in everyone:
        rank = min(meeting, key=meeting.get)
        last[rank] = last.get(rank, 0) + 1
    comm = [r.total("communication") + r.total("overlapped") for r in readable]
    low = most_extreme(comm, high=False)
    if low is not None:
        candidate, test = readable[low.index].rank, low.text()
    else:
        candidate, test = (readable[int(np.argmin(comm))].rank if comm else None), "two ranks: no test"
    chance = tally_chance(last.get(candidate, 0), len(everyone), len(readable))
    test += f"; arriving last at {last.get(candidate, 0)} of {len(everyone)} by chance: p = {chance:.2g}"
    sure = (low is not None and low.significant) or chance < 1 - CONFIDENCE
    named = candidate is not None and sure and last.get(candidate, 0) * 2 > len(everyone)
    imbalance = {}
    for field in ("compute", "communication", "free"):
        values = np.array([r.total(field) for r in readable])
        mean = values.mean() if values.size else 0.0
        imbalance[field] = float((values.max() - values.min()) / mean) if mean else 0.0
    return SlowRank(path, ranks, len(everyone), last, candidate if named else None, test, imbalance)
