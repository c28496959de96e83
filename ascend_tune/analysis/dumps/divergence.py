"""The first op where two runs part, walking TARGET's compared ops in execution order; how close runs that agree came.

**First divergence** (:func:`first_divergence`): walking TARGET's ops in execution order, the first op whose
output disagrees beyond the tolerance of its dtype (and, for Mean and Norm, of its element count) while its inputs
agree (dtype and shape count: a cast to bfloat16 is a divergence; a backward gradient whose shape differs only by a
view, the same elements, is compared by its statistics). A differing string, bool or number argument makes the op
the divergence. When the first disagreement is in an op's *inputs* instead, the difference came from somewhere the
dump cannot compare: an op that only one run has (named, e.g. an extra ``x * 1.01``), or code the dump does not
record (construct.json's unrecorded ops in between are listed); that op is named with the reason.

An op whose inputs already differ (an earlier op's right-but-different kernel) is judged against what those
differences carry (:mod:`.tolerance`): within it, the walk goes on (an op that divides or normalises beyond it is
*uncertain*, listed, not a divergence); beyond it, the op is the divergence. Where both dumps saved tensors, such an
op is evaluated again from its own inputs in each run instead (:mod:`.evaluate`): its output within its kernel
tolerance of what they give passes, beyond it is the divergence.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Optional

from . import calls, evaluate, tolerance
from .model import Dump, Op


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


@dataclass(frozen=True)
class Uncertain:
    """An op whose output differs beyond its kernel's tolerance while its inputs already differed, by an op family
    that amplifies without a bound the dump's statistics can give (see :mod:`.tolerance`)."""

    op: str
    row: str
    error: float
    tolerance: float
    carried: float  # the largest error its inputs carried


@dataclass(frozen=True)
class Closest:
    """The output that came nearest its tolerance in two runs that agree: ``error / tolerance`` (0.3: at 30%)."""

    op: str
    slot: str
    ratio: float


def first_divergence(pairs: list, rows: list, target: Dump) -> Optional[FirstDivergence]:
    """The first op where TARGET parts from BASE (see the module docstring), or None when they agree."""
    return walk(pairs, rows, target)[0]


def walk(pairs: list, rows: list, target: Dump, base: Optional[Dump] = None) -> tuple:
    """``(first divergence or None, uncertain ops, closest row or None)``, walking TARGET's ops in execution order
    (see the module docstring); with ``base`` and tensors saved in both dumps, an op whose inputs differ is evaluated
    again from them (:mod:`.evaluate`)."""
    evaluated = None
    if base is not None and base.has_tensors and target.has_tensors:
        ops = {pair.name: pair for pair in pairs if pair.matched}

        def evaluated(name: str) -> Optional[tuple]:
            pair = ops.get(name)
            errors = (evaluate.own_error(target, pair.target), evaluate.own_error(base, pair.base)) if pair else None
            return errors if errors and None not in errors else None

    by_pair: dict = {}
    for row in rows:
        by_pair.setdefault(row.pair, []).append(row)
    unmatched: list = []
    last_agreeing: Optional[str] = None
    drift = 0.0  # the largest output error of the earlier ops that passed (within tolerance, or explained)
    uncertain: list = []
    closest: Optional[Closest] = None
    for k, pair in enumerate(pairs):
        if not pair.matched:
            unmatched.append(pair)
            continue
        own = by_pair.get(k, [])
        bad_inputs = [r for r in own if r.role == "input" and not r.agree]
        bad_outputs = [r for r in own if r.role == "output" and not r.agree]
        closest = _closer(closest, pair.name, own)
        if not bad_inputs and not bad_outputs:
            unmatched, last_agreeing = [], pair.name
            drift = _drift_after(drift, own)
            continue
        bad_tensors = [r for r in bad_inputs if (r.target or r.base).kind == "tensor"]  # type: ignore[union-attr]
        skipped = _unrecorded_between(target, last_agreeing, pair.name)
        if len(bad_tensors) == len(bad_inputs) and all(_carries(r, drift) for r in bad_tensors):
            # no argument differs, and a tensor input that differs carries an earlier op's drift
            verdict = _explain(pair.name, own, bad_outputs, evaluated)
            if isinstance(verdict, str):
                worst = max(bad_outputs, key=lambda r: r.error)
                return _named(pair.target, "output", verdict, worst, None, skipped), tuple(uncertain), None
            if isinstance(verdict, Uncertain):
                uncertain.append(verdict)
            drift = _drift_after(drift, own)
            unmatched = []
            continue
        if not bad_tensors:  # an argument differs
            worst = max(bad_inputs, key=lambda r: r.error)
            why = f"its tensor inputs agree but {worst.slot} does not: {worst.reason}"
            return _named(pair.target, "argument", why, worst, None, skipped), tuple(uncertain), None
        worst = max(bad_tensors, key=lambda r: r.error)
        if unmatched:
            first = unmatched[0]
            side = "TARGET" if first.base is None else "BASE"
            op = first.target or first.base
            why = (f"it ran only in {side}, and the next op both runs have, {pair.name}, already gets different "
                   f"inputs ({worst.slot}: {worst.reason})")
            return _named(op, f"only in {side}", why, None, pair.name, skipped), tuple(uncertain), None
        why = (f"its input {worst.slot} already differs ({worst.reason}), yet no earlier op both dumps hold "
               "disagrees: the difference arose in code the dump does not record")
        if skipped:
            why += f" ({', '.join(skipped[:5])} ran in between without data)"
        return _named(pair.target, "inputs", why, worst, None, skipped), tuple(uncertain), None
    return None, tuple(uncertain), closest


def _explain(name: str, own: list, bad_outputs: list, evaluated: Optional[Callable] = None) -> Any:
    """None when every output of an op is within its kernel tolerance plus what its inputs carried; an
    :class:`Uncertain` when an amplifying op's is not; else the reason its output diverges (one line).

    ``evaluated(name)``: (TARGET's, BASE's) own error of the op evaluated again from its saved inputs, or None
    (:mod:`.evaluate`); where it answers, it decides."""
    if not bad_outputs:
        return None
    worst = max(bad_outputs, key=lambda r: r.error)
    if not all(_drift(r) for r in bad_outputs):
        return f"its inputs agree but {worst.slot} does not: {worst.reason}"
    inputs = [(tolerance.unseen(r.error, r.target.dtype, worst.target.dtype), _magnitude(r))
              for r in own if r.role == "input" and _drift(r, numeric_only=True)]
    carried = tolerance.carried(inputs, _magnitude(worst))
    if not carried:
        return f"its inputs agree but {worst.slot} does not: {worst.reason}"
    unexplained = [r for r in bad_outputs if not tolerance.explained(r.error, r.tolerance, carried)]
    if not unexplained:
        return None
    worst = max(unexplained, key=lambda r: r.error)
    own_errors = evaluated(name) if evaluated is not None else None
    if own_errors is not None:  # tensor mode: each run's output against what its own inputs give
        t_err, b_err = own_errors
        if t_err <= worst.tolerance:
            return None
        return (f"{worst.slot} is not what its own inputs give: off by {t_err:.3g} of its magnitude in TARGET "
                f"(BASE's: {b_err:.3g}; tolerance {worst.tolerance:.3g}), evaluated again in float64 from the saved "
                "tensors")
    if tolerance.amplifies(calls.api_of(name, backward=True)):
        return Uncertain(name, f"{name}.{worst.slot}", worst.error, worst.tolerance, carried)
    return (f"{worst.slot} differs beyond what its inputs' differences explain: {worst.reason}; its inputs carried "
            f"{carried:.3g}, which it may amplify {tolerance.GAIN:g}x")


def _drift_after(drift: float, own: list) -> float:
    """The drift seen so far, with an op's outputs that passed (a matmul's may pass beyond its dtype's tolerance)."""
    return max([drift] + [r.error for r in own if r.role == "output" and _drift(r, numeric_only=True)])


def _carries(row: Any, drift: float) -> bool:
    """Whether an input that differs can be an earlier drift carried on: a numeric difference no larger than GAIN
    times the largest drift seen (an unrecorded ``x * 1.01`` after a 1e-6 drift is not)."""
    return _drift(row) and row.error <= tolerance.GAIN * drift + row.tolerance


def _drift(row: Any, numeric_only: bool = False) -> bool:
    """Whether a row is a finite numeric difference of two tensors of one dtype and shape (a drift a later op may
    carry on), rather than a differing dtype, shape, inf/NaN or argument."""
    t, b = row.target, row.base
    if t is None or b is None or t.kind != "tensor" or b.kind != "tensor" or t.dtype != b.dtype:
        return False
    return math.isfinite(row.error) and (numeric_only or not row.agree)


def _magnitude(row: Any) -> float:
    """The larger of a tensor row's |Max| and |Min| over both runs (NaN when unknown)."""
    ends = [abs(v) for leaf in (row.target, row.base) if leaf is not None and leaf.kind == "tensor" and leaf.has_stats
            for v in leaf.stats[:2] if math.isfinite(v)]
    return max(ends) if ends else math.nan


def _closer(closest: Optional[Closest], name: str, own: list) -> Optional[Closest]:
    """``closest`` or the output row of ``own`` nearer its tolerance."""
    for r in own:
        if r.role == "output" and r.agree and r.tolerance and math.isfinite(r.error) and r.error:
            ratio = r.error / r.tolerance
            if closest is None or ratio > closest.ratio:
                closest = Closest(name, r.slot, ratio)
    return closest


def _named(op: Op, kind: str, why: str, row: Any, next_op: Optional[str], skipped: tuple) -> \
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
