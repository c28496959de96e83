"""The first op where two runs part, walking TARGET's compared ops in execution order; how close runs that agree came.

**First divergence** (:func:`first_divergence`): walking TARGET's ops in execution order, the first op whose
output disagrees beyond the tolerance of its dtype (and, for Mean and Norm, of its element count) while its inputs
agree (a shape counts, but for a backward gradient whose shape differs only by a view, the same elements; a dtype
counts unless both are floating: a bfloat16 autocast against fp32 compares within bfloat16's precision). A
differing string, bool or number argument makes the op the divergence. When the first disagreement is in an op's
*inputs* instead, the difference came from somewhere the dump cannot compare: an op that only one run has (named,
e.g. an extra ``x * 1.01``), or code the dump does not record (construct.json's unrecorded ops in between are
listed); that op is named with the reason.

An op whose inputs already differ (an earlier op's right-but-different kernel, a coarser dtype) is judged against
what those differences carry (:mod:`.tolerance`; once one run computes coarser, every element carries at least a
rounding of that dtype, :func:`_mixed_rounding`): within it, the walk goes on (an op that divides or normalises
beyond it is *uncertain*, listed, not a divergence); beyond it, the op is the divergence.

**Each run against its own inputs**: an op the cross-run check passes may still be wrong in TARGET's own terms (a
kernel 2% off inside bfloat16's rounding of an fp32 reference). With saved tensors each run's op is evaluated again
from its own inputs (:mod:`.evaluate`), else a monotone op's output ends are checked against its input's
(:mod:`.monotone`); TARGET's beyond what a correct op of its dtype may be, BASE's within, names the op.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Optional

from . import calls, evaluate, monotone, tolerance
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


def walk(pairs: list, rows: list, target: Dump, base: Optional[Dump] = None, tensors: bool = False) -> tuple:
    """``(first divergence or None, uncertain ops, closest row or None)``, walking TARGET's ops in execution order
    (see the module docstring); with ``base``, each run's op is checked against its own inputs: evaluated again
    from the saved tensors with ``tensors`` (:mod:`.evaluate`), else from the statistics (:mod:`.monotone`)."""
    evaluated = None
    if base is not None:
        ops = {pair.name: pair for pair in pairs if pair.matched}
        check = evaluate.own_error if tensors else monotone.own_ends
        cache: dict = {}

        def evaluated(name: str) -> Optional[tuple]:
            """(TARGET's, BASE's) :class:`.evaluate.OwnError` of the op, or None where either is not known."""
            if name not in cache:
                pair = ops.get(name)
                errors = (check(target, pair.target), check(base, pair.base)) if pair else None
                cache[name] = errors if errors and None not in errors else None
            return cache[name]

    by_pair: dict = {}
    for row in rows:
        by_pair.setdefault(row.pair, []).append(row)
    unmatched: list = []
    last_agreeing: Optional[str] = None
    drift = 0.0  # the largest output error of the earlier ops that passed (within tolerance, or explained)
    floor = 0.0  # once a tensor of one run is coarser than the other's: a rounding of that dtype, per element
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
        floor = max(floor, _mixed_rounding(own))
        drift = max(drift, floor)
        if not bad_inputs and not bad_outputs:
            wrong = _own_wrong(pair.name, own, evaluated)
            if wrong is not None:
                return _named(pair.target, "output", wrong[0], wrong[1], None, ()), tuple(uncertain), None
            unmatched, last_agreeing = [], pair.name
            drift = _drift_after(drift, own)
            continue
        bad_tensors = [r for r in bad_inputs if (r.target or r.base).kind == "tensor"]  # type: ignore[union-attr]
        skipped = _unrecorded_between(target, last_agreeing, pair.name)
        if len(bad_tensors) == len(bad_inputs) and all(_carries(r, drift) for r in bad_tensors):
            # no argument differs, and a tensor input that differs carries an earlier op's drift
            # a module's output is its recorded calls' (level mix): it carries what they passed on
            inside = drift if pair.name.startswith("Module.") else 0.0
            verdict = _explain(pair.name, own, bad_outputs, evaluated, inside, floor)
            if isinstance(verdict, str):
                worst = max(bad_outputs, key=lambda r: r.error)
                return _named(pair.target, "output", verdict, worst, None, skipped), tuple(uncertain), None
            wrong = _own_wrong(pair.name, own, evaluated)
            if wrong is not None:
                return _named(pair.target, "output", wrong[0], wrong[1], None, skipped), tuple(uncertain), None
            if isinstance(verdict, Uncertain):
                uncertain.append(verdict)
            drift = _drift_after(drift, own)
            unmatched = []
            continue
        if not bad_tensors or all(_carries(r, drift) for r in bad_tensors):  # an argument differs
            worst = max((r for r in bad_inputs if r not in bad_tensors), key=lambda r: r.error)
            carried = " (but for what earlier ops carried)" if bad_tensors else ""
            why = f"its tensor inputs agree{carried} but {worst.slot} does not: {worst.reason}"
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


def _explain(name: str, own: list, bad_outputs: list, evaluated: Optional[Callable] = None,
             inside: float = 0.0, floor: float = 0.0) -> Any:
    """None when every output of an op is within its kernel tolerance plus what its inputs carried; an
    :class:`Uncertain` when an amplifying op's is not; else the reason its output diverges (one line).

    ``evaluated(name)``: (TARGET's, BASE's) own error of the op evaluated again from its saved inputs, or None
    (:mod:`.evaluate`); where it answers, it decides. ``inside``: the drift a module's recorded calls passed on (a
    module's output is theirs); ``floor``: the rounding each element carries once one run computes coarser
    (:func:`_mixed_rounding`), the least an input that differs carries."""
    if not bad_outputs:
        return None
    worst = max(bad_outputs, key=lambda r: r.error)
    if not all(_drift(r) for r in bad_outputs):
        return f"its inputs agree but {worst.slot} does not: {worst.reason}"
    inputs = [(tolerance.unseen(r.error, r.target.dtype, worst.target.dtype), _magnitude(r))
              for r in own if r.role == "input" and _drift(r, numeric_only=True)]
    backward = name.endswith(".backward")
    shapes = [r.target.shape for r in own if r.role == "input" and r.target is not None
              and r.target.kind == "tensor" and r.target.shape is not None]
    first = next((r.target for r in own if r.slot == "input.0" and r.target is not None), None)
    api = calls.api_of(name, backward=True)
    terms = 0  # a sum of one input's terms (a reduction, a weight's or a bias's gradient) carries all their errors
    if backward or tolerance.is_reduction(api):
        terms = tolerance.summed_terms(api, backward, shapes, worst.target.shape if worst.target.kind == "tensor"
                                       else None, first.shape if first is not None and first.kind == "tensor" else None)
    carried = max(tolerance.carried(inputs, _magnitude(worst), terms), inside)
    carried = max(carried, floor) if carried else 0.0
    if not carried:
        return f"its inputs agree but {worst.slot} does not: {worst.reason}"
    unexplained = [r for r in bad_outputs if not tolerance.explained(r.error, r.tolerance, carried)]
    if not unexplained:
        return None
    worst = max(unexplained, key=lambda r: r.error)
    own_errors = evaluated(name) if evaluated is not None else None
    if own_errors is not None and not own_errors[0].beyond:
        return None  # each run's output is what its own inputs give: the difference is what they carried
    if own_errors is not None and not own_errors[1].beyond:
        return _own_reason(worst.slot, *own_errors)
    if tolerance.amplifies(calls.api_of(name, backward=True), backward) or floor:
        # past a coarser dtype, each element's error grows with the ops it went through, which statistics do not
        # show: beyond one rounding is not proof of a fault (each run's own-input checks are)
        return Uncertain(name, f"{name}.{worst.slot}", worst.error, worst.tolerance, carried)
    return (f"{worst.slot} differs beyond what its inputs' differences explain: {worst.reason}; its inputs carried "
            f"{carried:.3g}, which it may amplify {tolerance.GAIN:g}x")


def _own_wrong(name: str, own: list, evaluated: Optional[Callable]) -> Optional[tuple]:
    """``(reason, output row)`` when TARGET's op is not what its own inputs give while BASE's is (an op both runs
    judge alike across runs can still be wrong in TARGET's own terms: a kernel 2% off inside bfloat16's rounding
    of an fp32 reference); None when it is, or when that is not known. Where BASE's is beyond too, the evaluation
    does not model the op: it decides nothing."""
    errors = evaluated(name) if evaluated is not None else None
    if errors is None or not errors[0].beyond or errors[1].beyond:
        return None
    row = next((r for r in own if r.role == "output" and r.slot in ("output.0", "output")), None)
    return _own_reason(row.slot if row else "output.0", *errors), row


def _own_reason(slot: str, target: Any, base: Any) -> str:
    how = ("evaluated again in float64 from the saved tensors" if target.how == "tensors"
           else f"{target.how} from each run's own input statistics")
    return (f"{slot} is not what its own inputs give: off by {target.error:.3g} of its magnitude in TARGET, where a "
            f"correct {target.dtype} op is within {target.allowed:.3g} (BASE's: {base.error:.3g}); {how}")


def _mixed_rounding(own: list) -> float:
    """The unit roundoff of the coarser dtype of any row of ``own`` whose two tensors are floating dtypes that
    differ (0 when none): from there on every element may carry that rounding, which statistics under-read (a
    tensor's Max moves by less than its elements do)."""
    found = [tolerance.UNIT_ROUNDOFF.get(tolerance.coarser(r.target.dtype, r.base.dtype), 0.0) for r in own
             if r.target is not None and r.base is not None and r.target.kind == r.base.kind == "tensor"
             and r.target.dtype != r.base.dtype and tolerance.is_float(r.target.dtype)
             and tolerance.is_float(r.base.dtype)]
    return max(found, default=0.0)


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
    if t is None or b is None or t.kind != "tensor" or b.kind != "tensor":
        return False
    if t.dtype != b.dtype and not (tolerance.is_float(t.dtype) and tolerance.is_float(b.dtype)):
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
