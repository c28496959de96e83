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

import re
from collections import Counter
from dataclasses import dataclass

from ...formats.trace_names import module_scope_path
from .model import Step, Trace
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
    for index, event in enumerate(events):
        if event.role != "device":
            self_us[index] = event.dur
    scopes = "none"
    forward_module: dict = {}
    for index, event in enumerate(events):
        if event.role == "device":
            continue
        parent = parents[index]
        if parent >= 0:
            self_us[parent] -= event.dur
            inherited_module, inherited_op, inherited_context = module[parent], op[parent], context[parent]
        else:
            inherited_module = inherited_op = inherited_context = None
        name = event.name
        path = module_scope_path(name) if event.role == "host" else None
        if path is not None:
            scopes = "monitor"
        elif event.role == "python" and name.startswith(_TORCH_MODULE_FRAME):
            path = name[len(_TORCH_MODULE_FRAME):]
            path = path if inherited_module is None else f"{inherited_module}.{path}"
            scopes = "monitor" if scopes == "monitor" else "with_modules"
        own_context = context_kind(name) if event.role in ("host", "runtime") else None
        if _CONTEXT_RANK[own_context] < _CONTEXT_RANK[inherited_context]:
            own_context = inherited_context
        context[index] = own_context
        if event.role == "host" and (event.is_op or _AUTOGRAD_NODE.match(name)):
            op[index] = name[len(_BACKWARD_WRAPPER):] if name.startswith(_BACKWARD_WRAPPER) else name
        else:
            op[index] = inherited_op
        sequence = event.args.get("Sequence number")
        if path is None and inherited_module is None and sequence is not None and name.startswith(_BACKWARD_WRAPPER):
            path = forward_module.get(sequence)
        module[index] = path if path is not None else inherited_module
        if sequence is not None and not name.startswith(_BACKWARD_WRAPPER) and module[index] is not None:
            forward_module.setdefault(sequence, module[index])
    kinds: list = [None] * n
    for index, event in enumerate(events):
        if event.role == "device":
            continue
        if context[index] is not None:
            kinds[index] = context[index]
        elif op[index] is not None:
            kinds[index] = compute_kind(op[index])
        else:
            kinds[index] = OUTSIDE
    return Labels(tuple(max(s, 0.0) for s in self_us), tuple(module), tuple(op), tuple(kinds), scopes)


def step_rows(trace: Trace, labels: Labels, step: Step) -> dict:
    """``{level: Counter(label -> µs)}`` for one step; each level's values add up to the step's wall time."""
    out = {level: Counter() for level in LEVELS}
    counted = 0.0
    for index in trace.in_step(step):
        event = trace.events[index]
        if event.role == "device":
            continue
        spent = labels.self_us[index]  # the ProfilerStep range's own self time is the step's outside time
        counted += spent
        for level in ("module", "op", "kind"):
            label = getattr(labels, level)[index]
            out[level][label if label is not None else OUTSIDE_LABEL[level]] += spent
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
    for index in trace.in_step(step):
        event = trace.events[index]
        parent = trace.parents[index]
        if event.role != "host" or labels.op[index] is None or (parent >= 0 and labels.op[parent] is not None):
            continue  # not a top-level op
        before = previous.get(event.tid)
        if before is not None and labels.kind[index] == HOST_SYNC and labels.kind[before] == HOST_SYNC:
            loop += max(event.ts - trace.events[before].end, 0.0)
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
