"""Where one trace's steps spend their time, at three levels: module, op and kind (:data:`.vocabulary.KINDS`).

One pass over the trace labels every host event (ops, annotations, Python frames, runtime calls) with its module,
its op and its kind, inherited from the enclosing event where it has none of its own; a step is then the sum of
its events' self times (duration minus their children's) per label. What no event covers is the step's
"outside" row, so at each level the rows of a step add up to its wall time.

- **module**: the innermost module scope: the monitor's ``ascend_tune.module#<path>`` ranges
  (``formats.trace_names``), else torch.profiler's ``with_modules`` frames (``nn.Module: Linear_0``, joined into a
  path). A backward op belongs to the module of the forward op with the same ``Sequence number``.
- **op**: the innermost op (``aten::addmm``; an autograd node such as ``AddmmBackward0`` is its own op; ranges
  such as ``ProfilerStep#N`` or ``Optimizer.step#...``, which torch_npu also writes as ``cpu_op``, are not ops).
- **kind**: a context kind of an enclosing event (host sync, data loading, optimizer) or the op's compute kind. On
  a trace with a device timeline the kinds are measured on the device instead (:func:`_device_kinds`).
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from dataclasses import dataclass

from ...formats.trace_names import module_scope_path
from .model import Step, Trace, is_op_name
from .vocabulary import COMPUTE_KINDS, DATA, HOST_SYNC, IDLE, OPTIMIZER, OUTSIDE, compute_kind, context_kind

LEVELS = ("module", "op", "kind")
OUTSIDE_LABEL = {"module": "(outside any module)", "op": "(outside any op)", "kind": OUTSIDE}
_CONTEXT_RANK = {None: 0, OPTIMIZER: 1, DATA: 2, HOST_SYNC: 3}  # the higher wins over an enclosing context
_TORCH_MODULE_FRAME = "nn.Module: "
_BACKWARD_WRAPPER = "autograd::engine::evaluate_function: "
_AUTOGRAD_NODE = re.compile(r"^(autograd::engine::evaluate_function: )?\w+Backward\d*$")  # AddmmBackward0


@dataclass(frozen=True)
class Labels:
    """Each event's self time (µs) and its label at every level; ``scopes`` says where module labels came from."""

    self_us: tuple
    module: tuple
    op: tuple
    kind: tuple
    scopes: str  # "monitor" | "with_modules" | "none"


def label_events(trace: Trace) -> Labels:
    """Self time and module / op / kind labels of every host-side event of ``trace`` (device tasks get None)."""
    events, parents = trace.events, trace.parents
    n = len(events)
    self_us = [0.0] * n
    module: list = [None] * n
    op: list = [None] * n
    context: list = [None] * n
    kinds: list = [None] * n
    scopes = "none"
    forward_module: dict = {}
    # a parent comes before its children (events are sorted by start), so its own duration is in place before they
    # take theirs off it
    for index, event in enumerate(events):
        role = event.role
        if role == "device":
            continue
        self_us[index] = event.dur
        parent = parents[index]
        if parent >= 0:
            self_us[parent] -= event.dur
            inherited_module, inherited_op, inherited_context = module[parent], op[parent], context[parent]
        else:
            inherited_module = inherited_op = inherited_context = None
        name = event.name
        path, frame, own_context, own_op, backward_wrapper = _name_says(name, role)
        if path is not None:
            scopes = "monitor"
        elif frame is not None:
            path = frame if inherited_module is None else f"{inherited_module}.{frame}"
            scopes = "monitor" if scopes == "monitor" else "with_modules"
        if _CONTEXT_RANK[own_context] < _CONTEXT_RANK[inherited_context]:
            own_context = inherited_context
        context[index] = own_context
        op[index] = own_op if own_op is not None else inherited_op
        sequence = event.args.get("Sequence number")
        if path is None and inherited_module is None and sequence is not None and backward_wrapper:
            path = forward_module.get(sequence)
        module[index] = path if path is not None else inherited_module
        if sequence is not None and not backward_wrapper and module[index] is not None:
            forward_module.setdefault(sequence, module[index])
        if own_context is not None:
            kinds[index] = own_context
        elif op[index] is not None:
            kinds[index] = compute_kind(op[index])
        else:
            kinds[index] = OUTSIDE
    return Labels(tuple(max(s, 0.0) for s in self_us), tuple(module), tuple(op), tuple(kinds), scopes)


@functools.lru_cache(maxsize=4096)  # a trace has a few hundred distinct names, each on ~1e3 events
def _name_says(name: str, role: str) -> tuple:
    """What an event's name alone says: (its module scope's path, a ``with_modules`` frame's module, the context
    kind it opens, the op it is, whether it wraps a backward op), each None / False where it says nothing."""
    path = module_scope_path(name) if role == "host" else None
    frame = name[len(_TORCH_MODULE_FRAME):] if (
        path is None and role == "python" and name.startswith(_TORCH_MODULE_FRAME)) else None
    own_context = context_kind(name) if role in ("host", "runtime") else None
    own_op = None
    if role == "host" and (is_op_name(name) or _AUTOGRAD_NODE.match(name)):
        own_op = name[len(_BACKWARD_WRAPPER):] if name.startswith(_BACKWARD_WRAPPER) else name
    return path, frame, own_context, own_op, name.startswith(_BACKWARD_WRAPPER)


def step_rows(trace: Trace, labels: Labels, step: Step) -> dict:
    """``{level: Counter(label -> µs)}`` for one step; each level's values add up to the step's wall time."""
    out = {level: Counter() for level in LEVELS}
    counted = 0.0
    columns = [(out[level], getattr(labels, level), OUTSIDE_LABEL[level]) for level in LEVELS]
    events, self_us = trace.events, labels.self_us
    for index in trace.in_step(step):
        if events[index].role == "device":
            continue
        spent = self_us[index]  # the ProfilerStep range's own self time is the step's outside time
        counted += spent
        for rows, label_of, outside in columns:
            label = label_of[index]
            rows[label if label is not None else outside] += spent
    rest = step.dur - counted
    for level in LEVELS:
        out[level][OUTSIDE_LABEL[level]] += rest
    loop = _read_back_loop_us(trace, labels, step)
    out["kind"][OUTSIDE] -= loop
    out["kind"][HOST_SYNC] += loop
    if trace.has_device_timeline:
        out["kind"] = _device_kinds(trace, labels, step)
    return out


def _read_back_loop_us(trace: Trace, labels: Labels, step: Step) -> float:
    """The host's time between two consecutive top-level host syncs with no other op between them: the Python of
    a read-back loop (``[x.item() for x in t]``), host-sync time rather than time outside any op."""
    loop, previous = 0.0, {}
    events, parents, op, kind = trace.events, trace.parents, labels.op, labels.kind
    for index in trace.in_step(step):
        event = events[index]
        parent = parents[index]
        if event.role != "host" or op[index] is None or (parent >= 0 and op[parent] is not None):
            continue  # not a top-level op
        before = previous.get(event.tid)
        if before is not None and kind[index] == HOST_SYNC and kind[before] == HOST_SYNC:
            loop += max(event.ts - events[before].end, 0.0)
        previous[event.tid] = index
    return loop


def _device_kinds(trace: Trace, labels: Labels, step: Step) -> Counter:
    """The step's instants by kind: the device task running (its compute kind), else what the host was doing."""
    priority = {kind.name: rank for rank, kind in enumerate(COMPUTE_KINDS)}
    priority[OPTIMIZER] = -1
    edges = []
    for index in trace.in_step(step):
        event = trace.events[index]
        if event.role == "device":
            kind = compute_kind(event.name)
            label = (0, priority.get(kind, len(priority)), kind)
        elif event.role == "host" and event.tid == step.tid and labels.op[index] is not None:
            kind = labels.kind[index] if labels.kind[index] in (HOST_SYNC, DATA, OPTIMIZER) else IDLE
            label = (1, 0 if kind != IDLE else 1, kind)
        else:
            continue
        start, end = max(event.ts, step.ts), min(event.end, step.end)
        if end > start:
            edges.append((start, 1, label))
            edges.append((end, -1, label))
    edges.sort(key=lambda e: (e[0], e[1]))
    out: Counter = Counter()
    active: Counter = Counter()
    last = step.ts
    for time, delta, label in edges:
        running = [key for key, count in active.items() if count > 0]
        out[min(running)[2] if running else OUTSIDE] += time - last
        active[label] += delta
        last = time
    out[OUTSIDE] += step.end - last
    return out
