"""Compare two precision dumps op by op, and name the first op where they diverge.

Matching: an op of TARGET pairs with the BASE op of the same name, the name carrying the call count
(``Functional.linear.1.forward``); ``fuzzy=True`` drops the count and pairs the k-th call of an API in one run
with its k-th call in the other (for runs whose extra calls shift the counts). Arguments pair by slot.

Metrics and msprobe's verdicts: :mod:`.metrics` and :mod:`.verdicts`; the CSV and JSON written: :mod:`.table`.

**First divergence** (:func:`first_divergence`): walking TARGET's ops in execution order, the first op whose
output disagrees beyond the tolerance of its dtype while its inputs agree (dtype and shape count: a cast to
bfloat16 is a divergence). When the first disagreement is in an op's *inputs* instead, the difference came from
somewhere the dump cannot compare: an op that only one run has (named, e.g. an extra ``x * 1.01``), or code the
dump does not record (construct.json's unrecorded ops in between are listed); that op is named with the reason.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Optional

import numpy as np

from ...errors import InputError
from . import metrics, verdicts
from .metrics import StatsDiff, TensorMetrics
from .model import Dump, Leaf, Op, Stats

_API_COUNT = re.compile(r"^(?P<head>.*)\.\d+\.(?P<dir>forward|backward)$")
_MODULE_COUNT = re.compile(r"^(?P<head>Module\..*)\.(?P<dir>forward|backward|parameters_grad)\.\d+$")
_PTDBG_API = re.compile(r"^(?P<kind>Functional|Tensor|Torch|NPU|Distributed|VF|Aten)_(?P<api>.+)_(?P<n>\d+)_"
                        r"(?P<dir>forward|backward)$")


@dataclass(frozen=True)
class OpPair:
    """A TARGET op and its BASE match (either may be None: the op ran in one run only)."""

    target: Optional[Op]
    base: Optional[Op]

    @property
    def name(self) -> str:
        return (self.target or self.base).name  # type: ignore[union-attr]

    @property
    def matched(self) -> bool:
        return self.target is not None and self.base is not None


@dataclass(frozen=True)
class CompareRow:
    """One compared argument or result: its metrics, whether it agrees, and msprobe's verdict."""

    pair: int  # index into DumpComparison.pairs
    slot: str
    target: Optional[Leaf]
    base: Optional[Leaf]
    stats: Optional[StatsDiff]  # both statistics known: their differences and relative errors
    tensor: Optional[TensorMetrics]  # tensor mode, both tensors saved
    error: float
    tolerance: float
    agree: bool
    reason: str
    result: str  # pass / warning / error
    messages: tuple

    @property
    def role(self) -> str:
        return (self.target or self.base).role  # type: ignore[union-attr]


@dataclass(frozen=True)
class FirstDivergence:
    """Where two runs first part (see the module docstring)."""

    op: str
    kind: str  # "output", "argument", "only in TARGET", "only in BASE" or "inputs"
    reason: str
    row: Optional[str]
    error: float
    tolerance: float
    parent: Optional[str]
    stack: tuple  # user frames
    next_op: Optional[str]  # for an op only one run has: the next op, whose inputs already differ
    unrecorded: tuple  # ops construct.json lists between the last agreeing op and this one, with no data


@dataclass(frozen=True, eq=False)
class DumpComparison:
    """Two dumps compared."""

    base: str
    target: str
    mode: str  # "statistics" or "tensor"
    fuzzy: bool
    pairs: tuple
    rows: tuple
    first: Optional[FirstDivergence]
    tolerance_override: Optional[float]

    def count(self, result: str) -> int:
        return sum(1 for r in self.rows if r.result == result)

    @property
    def only_target(self) -> int:
        return sum(1 for p in self.pairs if p.base is None)

    @property
    def only_base(self) -> int:
        return sum(1 for p in self.pairs if p.target is None)

    @property
    def passed(self) -> bool:
        """Every row passes msprobe's rules and no op diverges beyond tolerance."""
        return self.first is None and all(r.result == "pass" for r in self.rows)


def compare_dumps(
    base: Dump, target: Dump, mode: str = "auto", fuzzy: bool = False, rtol: Optional[float] = None
) -> DumpComparison:
    """Compare ``target`` against ``base`` (the reference run).

    Parameters:
        base: the reference dump (GPU / CPU).
        target: the dump being checked (NPU).
        mode: ``"statistics"`` (from dump.json), ``"tensor"`` (from the saved tensors; both dumps need them) or
            ``"auto"`` (tensor when both dumps hold tensors).
        fuzzy: pair ops by API and call order, ignoring the call count in the name.
        rtol: one agreement tolerance for every float dtype instead of the per-dtype table.
    """
    if mode not in ("auto", "statistics", "tensor"):
        raise InputError(f"mode must be auto, statistics or tensor, got {mode!r}")
    if mode == "tensor" and not (base.has_tensors and target.has_tensors):
        lacking = base.label if not base.has_tensors else target.label
        raise InputError(f"{lacking} holds no saved tensors; compare with --mode statistics or dump with task=tensor")
    if mode == "auto":
        mode = "tensor" if base.has_tensors and target.has_tensors else "statistics"
    pairs = match_ops(base, target, fuzzy)
    rows = _rows(pairs, base, target, mode == "tensor", rtol)
    return DumpComparison(
        base.label, target.label, mode, fuzzy, tuple(pairs), tuple(rows),
        first_divergence(pairs, rows, target), rtol,
    )


def match_key(name: str, fuzzy: bool) -> str:
    """The name ops are paired by: ptdbg API names in msprobe's spelling, without the call count when fuzzy."""
    m = _PTDBG_API.match(name)
    if m:
        name = f"{m['kind']}.{m['api']}.{m['n']}.{m['dir']}"
    if fuzzy:
        for pattern in (_API_COUNT, _MODULE_COUNT):
            m = pattern.match(name)
            if m:
                return f"{m['head']}.{m['dir']}"
    return name


def match_ops(base: Dump, target: Dump, fuzzy: bool = False) -> list:
    """TARGET's ops in execution order with their BASE matches; BASE-only ops are placed where they ran."""
    queues: dict = {}
    for j, op in enumerate(base.ops):
        queues.setdefault(match_key(op.name, fuzzy), []).append(j)
    heads = {key: 0 for key in queues}
    partner: list = []
    for op in target.ops:
        key = match_key(op.name, fuzzy)
        at = heads.get(key, 0)
        if key in queues and at < len(queues[key]):
            partner.append(queues[key][at])
            heads[key] = at + 1
        else:
            partner.append(None)
    used = {j for j in partner if j is not None}
    pairs, next_base = [], 0
    for op, j in zip(target.ops, partner):
        if j is not None:
            while next_base < j:
                if next_base not in used:
                    pairs.append(OpPair(None, base.ops[next_base]))
                next_base += 1
            next_base = max(next_base, j + 1)
        pairs.append(OpPair(op, base.ops[j] if j is not None else None))
    pairs.extend(OpPair(None, base.ops[j]) for j in range(next_base, len(base.ops)) if j not in used)
    return pairs


def _rows(pairs: list, base: Dump, target: Dump, tensor_mode: bool, rtol: Optional[float]) -> list:
    raw = []  # (pair index, slot, target leaf, base leaf)
    for k, pair in enumerate(pairs):
        t_leaves = {leaf.slot: leaf for leaf in pair.target.leaves} if pair.target else {}
        b_leaves = {leaf.slot: leaf for leaf in pair.base.leaves} if pair.base else {}
        slots = list(t_leaves) + [s for s in b_leaves if s not in t_leaves]
        raw.extend((k, s, t_leaves.get(s), b_leaves.get(s)) for s in slots)

    numeric = [i for i, (_, _, t, b) in enumerate(raw) if _numeric(t) and _numeric(b)]
    t_stats = np.array([raw[i][2].stats for i in numeric], dtype=np.float64).reshape(-1, len(Stats._fields))
    b_stats = np.array([raw[i][3].stats for i in numeric], dtype=np.float64).reshape(-1, len(Stats._fields))
    diffs = metrics.statistics_diffs(t_stats, b_stats)
    stat_error = metrics.statistics_error(t_stats, b_stats)
    by_row = {i: n for n, i in enumerate(numeric)}

    rows = []
    for i, (k, slot, t, b) in enumerate(raw):
        n = by_row.get(i)
        tol = metrics.tolerance(t.dtype if t else "", b.dtype if b else "", rtol)
        tensor = None
        if t is not None and b is not None and t.kind == b.kind == "tensor":
            error, reason = _tensor_error(t, b, stat_error[n] if n is not None else None, tol)
            if tensor_mode:
                tensor, error, reason = _tensor_compare(target, base, t, b, error, reason, tol)
        else:
            error, reason = metrics.leaf_error(t, b)
        rows.append(dict(
            pair=k, slot=slot, target=t, base=b,
            stats=diffs[n] if n is not None else None,
            tensor=tensor, error=float(error), tolerance=tol, agree=not reason, reason=reason,
        ))
    _judge(pairs, rows, tensor_mode)
    return [CompareRow(**row) for row in rows]


def _numeric(leaf: Optional[Leaf]) -> bool:
    return leaf is not None and (leaf.kind == "scalar" or leaf.kind == "tensor" and leaf.has_stats)


def _tensor_error(t: Leaf, b: Leaf, stat_error: Optional[float], tol: float) -> tuple:
    if t.dtype != b.dtype:
        return math.inf, f"dtype {b.dtype} in BASE, {t.dtype} in TARGET"
    if t.shape != b.shape:
        return math.inf, f"shape {list(b.shape or [])} in BASE, {list(t.shape or [])} in TARGET"
    if t.md5 is not None and b.md5 is not None and t.md5 == b.md5:
        return 0.0, ""
    if stat_error is None:  # no statistics: only a checksum can tell
        if t.md5 is not None and b.md5 is not None:
            return math.inf, "checksums differ"
        return 0.0, ""
    if stat_error > tol:
        return stat_error, f"statistics differ by {stat_error:.3g} of the tensor's magnitude (tolerance {tol:g})"
    return stat_error, ""


def _tensor_compare(target: Dump, base: Dump, t: Leaf, b: Leaf, error: float, reason: str, tol: float) -> tuple:
    t_data, b_data = target.load_tensor(t), base.load_tensor(b)
    if t_data is None or b_data is None:
        return None, error, reason
    values, data_error, note = metrics.tensor_metrics(t_data, b_data)
    if reason.startswith(("dtype", "shape")):
        return values, error, reason
    if data_error > tol:
        return values, data_error, note or f"values differ by {data_error:.3g} of the tensor's magnitude " \
                                           f"(tolerance {tol:g})"
    return values, data_error, ""


def _judge(pairs: list, rows: list, tensor_mode: bool) -> None:
    """Fill in msprobe's result and messages, op by op."""
    start = 0
    while start < len(rows):
        end = start
        while end < len(rows) and rows[end]["pair"] == rows[start]["pair"]:
            end += 1
        pair = pairs[rows[start]["pair"]]
        group = rows[start:end]
        views = [dict(
            name=f"{pair.name}.{r['slot']}", target=r["target"], base=r["base"],
            norm_rel=r["stats"].norm_rel if r["stats"] else None,
            cosine=r["tensor"].cosine if r["tensor"] else None,
            thousandth=r["tensor"].one_thousandth if r["tensor"] else None,
        ) for r in group]
        judged = verdicts.judge(pair.name, views, tensor_mode) if pair.matched else [("pass", ())] * len(group)
        for r, (result, messages) in zip(group, judged):
            r["result"], r["messages"] = result, messages
        start = end


def first_divergence(pairs: list, rows: list, target: Dump) -> Optional[FirstDivergence]:
    """The first op where TARGET parts from BASE (see the module docstring), or None when they agree."""
    by_pair: dict = {}
    for row in rows:
        by_pair.setdefault(row.pair, []).append(row)
    unmatched: list = []
    last_agreeing: Optional[str] = None
    for k, pair in enumerate(pairs):
        if not pair.matched:
            unmatched.append(pair)
            continue
        own = by_pair.get(k, [])
        bad_inputs = [r for r in own if r.role == "input" and not r.agree]
        bad_outputs = [r for r in own if r.role == "output" and not r.agree]
        if not bad_inputs and not bad_outputs:
            unmatched, last_agreeing = [], pair.name
            continue
        bad_tensors = [r for r in bad_inputs if (r.target or r.base).kind == "tensor"]  # type: ignore[union-attr]
        skipped = _unrecorded_between(target, last_agreeing, pair.name)
        if not bad_tensors:
            worst = max(bad_inputs or bad_outputs, key=lambda r: r.error)
            kind = "argument" if bad_inputs else "output"
            why = (f"its inputs agree but {worst.slot} does not: {worst.reason}" if kind == "output"
                   else f"its tensor inputs agree but {worst.slot} does not: {worst.reason}")
            return _named(pair.target, kind, why, worst, None, skipped)
        worst = max(bad_tensors, key=lambda r: r.error)
        if unmatched:
            first = unmatched[0]
            side = "TARGET" if first.base is None else "BASE"
            op = first.target or first.base
            why = (f"it ran only in {side}, and the next op both runs have, {pair.name}, already gets different "
                   f"inputs ({worst.slot}: {worst.reason})")
            return _named(op, f"only in {side}", why, None, pair.name, skipped)
        why = (f"its input {worst.slot} already differs ({worst.reason}), yet no earlier op both dumps hold "
               "disagrees: the difference arose in code the dump does not record")
        if skipped:
            why += f" ({', '.join(skipped[:5])} ran in between without data)"
        return _named(pair.target, "inputs", why, worst, None, skipped)
    return None


def _named(op: Op, kind: str, why: str, row: Optional[CompareRow], next_op: Optional[str], skipped: tuple) -> \
        FirstDivergence:
    return FirstDivergence(
        op=op.name, kind=kind, reason=why, row=f"{op.name}.{row.slot}" if row else None,
        error=row.error if row else math.inf, tolerance=row.tolerance if row else math.nan,
        parent=op.parent, stack=op.user_frames(), next_op=next_op, unrecorded=skipped,
    )


def _unrecorded_between(dump: Dump, after: Optional[str], before: str) -> tuple:
    """Ops construct.json lists after ``after`` and before ``before`` that the dump holds no data for."""
    order = dump.sequence
    if before not in order:
        return ()
    stop = order.index(before)
    start = order.index(after) + 1 if after in order and order.index(after) < stop else 0
    recorded = {op.name for op in dump.ops}
    return tuple(n for n in order[start:stop] if n not in recorded and n != "optimizer" and not n.startswith("Module."))
