"""Compare two precision dumps op by op, and name the first op where they diverge.

Pairing (:mod:`.pairing`): ops by name (API and call count), reflected operators by call order within their
family, ``fuzzy=True`` by call order for every API; arguments by the parameter they fill, an argument one dump does
not record against the default it stands for. So a builtin dump and a msprobe dump of the same run pair slot for
slot though the engines record some calls differently.

How two tensors differ (msprobe's metrics) and msprobe's verdicts: :mod:`.differences` and :mod:`.msprobe_rules`; the
CSV and JSON written: :mod:`.table`.

**First divergence**: :mod:`.divergence`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import numpy as np

from ...errors import InputError
from . import calls, differences, msprobe_rules, pairing, tolerance
from .differences import StatsDiff, TensorMetrics
from .divergence import Closest, FirstDivergence, Uncertain, first_divergence, walk
from .model import Dump, Leaf, Stats
from .pairing import OpPair, match_key, match_ops

__all__ = ["Closest", "CompareRow", "DumpComparison", "FirstDivergence", "OpPair", "Uncertain", "compare_dumps",
           "first_divergence", "match_key", "match_ops", "walk"]


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
    parameter: Optional[str] = None  # the parameter an argument fills (eps), when the API's signature is known
    stand_in: Optional[str] = None  # "BASE" / "TARGET": that side did not record the argument; its default stands in
    note: str = ""  # what else the comparison found (a view-only shape change, a default compared)
    base_slot: Optional[str] = None  # BASE's slot when BASE recorded it (may differ: input.4 vs input.eps)

    @property
    def role(self) -> str:
        return (self.target or self.base).role  # type: ignore[union-attr]


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
    base_engine: str = "msprobe"  # which tool wrote each dump (Dump.engine)
    target_engine: str = "msprobe"
    uncertain: tuple = ()  # Uncertain: ops beyond tolerance whose inputs' differences may explain it
    closest: Optional[Closest] = None  # with no divergence: the output row nearest its tolerance

    def count(self, result: str) -> int:
        return sum(1 for r in self.rows if r.result == result)

    @property
    def only_target(self) -> int:
        return sum(1 for p in self.pairs if p.base is None)

    @property
    def only_base(self) -> int:
        return sum(1 for p in self.pairs if p.target is None)

    def closeness(self) -> str:
        """How close runs that do not diverge came (one line): the output nearest its tolerance, and the ops left
        uncertain."""
        closest = self.closest
        line = (f"aligned, worst op {closest.op} ({closest.slot}) at {closest.ratio:.2g} of its tolerance" if closest
                else "aligned, every compared output equal")
        mixed = self.mixed_precision()
        if mixed:
            line += (f"; TARGET computes in {mixed[1]} where BASE has {mixed[0]}: each op judged by {mixed[1]}'s "
                     "rounding and what its inputs carried, and each run's ops checked against their own inputs")
        if self.uncertain:
            first = self.uncertain[0]
            why = ("that divide or normalise, or run past a coarser dtype," if self.mixed_precision()
                   else "that divide or normalise")
            decide = ("; dump with task='tensor' to decide them" if self.mode == "statistics"
                      else " (not evaluated again from their inputs: backward ops, or ops the evaluation skips)")
            line += (f"; {len(self.uncertain)} op(s) {why} differ beyond tolerance where their inputs already "
                     f"differed (uncertain: first {first.op}, {first.error:.3g} against {first.tolerance:.3g}, its "
                     f"inputs carried {first.carried:.3g}){decide}")
        return line

    def mixed_precision(self) -> Optional[tuple]:
        """``(BASE's dtype, TARGET's dtype)`` most rows pair when the runs compute in different floating dtypes
        (``("float32", "bfloat16")`` for an autocast port), else None."""
        pairs: dict = {}
        for r in self.rows:
            t, b = r.target, r.base
            if t is not None and b is not None and t.kind == b.kind == "tensor" and t.dtype != b.dtype and \
                    tolerance.is_float(t.dtype) and tolerance.is_float(b.dtype):
                key = (tolerance.dtype_name(b.dtype), tolerance.dtype_name(t.dtype))
                pairs[key] = pairs.get(key, 0) + 1
        return max(pairs, key=pairs.get) if pairs else None

    @property
    def errors_judged(self) -> int:
        """Rows msprobe's rules call an error only by a value rule (NormRelativeErr, One Thousandth) or for their
        dtypes, two floating ones (an autocast, a cast): this compare judges those values itself, by the dtypes'
        rounding and what the op's inputs carried (:func:`_judged_by_value`)."""
        return sum(1 for r in self.rows if r.result == "error" and _judged_by_value(r))

    @property
    def passed(self) -> bool:
        """No op diverges beyond tolerance and no row is an error by msprobe's rules, but for the errors this compare
        judged by value (:attr:`errors_judged`: every matched op was judged when no op diverges).

        msprobe's warnings are counted, not failed: its rule "the output's norm relative error is 10x the input's"
        fires on reduction noise alone (3e-6 against 3e-7) when two engines dumped one run."""
        return self.first is None and not any(r.result == "error" and not _judged_by_value(r) for r in self.rows)


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
    first, uncertain, closest = walk(pairs, rows, target, base, tensors=mode == "tensor")
    return DumpComparison(base.label, target.label, mode, fuzzy, tuple(pairs), tuple(rows), first, rtol, base.engine,
                          target.engine, uncertain, closest)


def _rows(pairs: list, base: Dump, target: Dump, tensor_mode: bool, rtol: Optional[float]) -> list:
    raw = []  # (pair index, Argument)
    for k, pair in enumerate(pairs):
        raw.extend((k, arg) for arg in pairing.arguments(pair))

    numeric = [i for i, (_, a) in enumerate(raw) if _numeric(a.target) and _numeric(a.base)]
    t_stats = np.array([raw[i][1].target.stats for i in numeric], dtype=np.float64).reshape(-1, len(Stats._fields))
    b_stats = np.array([raw[i][1].base.stats for i in numeric], dtype=np.float64).reshape(-1, len(Stats._fields))
    diffs = differences.statistics_diffs(t_stats, b_stats)
    stat_error = differences.statistics_error(t_stats, b_stats)
    by_row = {i: n for n, i in enumerate(numeric)}
    engines = _engines(base, target)
    regrouped = {k for k, pair in enumerate(pairs) if _regrouped(pair)}
    # the builtin engine records a module input's gradient summed over all its uses (a residual's skip path too),
    # msprobe's full backward hook only the module's own share: across the two, those rows are not the same tensor
    summed = {k for k, pair in enumerate(pairs)
              if pair.name.startswith("Module.") and ".backward." in pair.name and _one_builtin(base, target)}
    stale = _stale_inputs(base, target)

    rows = []
    for i, (k, arg) in enumerate(raw):
        n = by_row.get(i)
        t, b = arg.target, arg.base
        tol = tolerance.tolerance(t.dtype if t else "", b.dtype if b else "", rtol)
        if (t or b).role == "output":  # type: ignore[union-attr]
            tol = tolerance.kernel_tolerance(calls.api_of(pairs[k].name, backward=True), tol,
                                             (t or b).dtype, _reduction_length(pairs[k], t or b), rtol)  # type: ignore
        tensor = None
        note = ""
        uncompared = k in regrouped and (t or b).role == "output"  # type: ignore[union-attr]
        if stale and _mutated_scalar(pairs[k], t, b, arg.key):
            uncompared, error, reason = True, 0.0, ""
            note = (f"{stale} recorded this 0-d argument after the op wrote into it (call model 2 or older): "
                    "not compared (the op's output is)")
        elif k in summed and (t or b).role == "output":  # type: ignore[union-attr]
            uncompared, error, reason = True, 0.0, ""
            note = ("the builtin engine records a module input's gradient summed over all its uses, msprobe the "
                    "module's own share: not compared across the two engines (the API calls inside are)")
        elif uncompared:
            error, reason = 0.0, ""
            note = (f"BASE's backward recorded {len(pairs[k].base.outputs)} gradient(s), TARGET's "
                    f"{len(pairs[k].target.outputs)} of the same elements: different autograd nodes (a fused "
                    "kernel and a decomposition ending in a view), not compared")
        elif t is not None and b is not None and t.kind == b.kind == "tensor":
            view = pairs[k].name.endswith(".backward") and _view_of(t.shape, b.shape)
            error, tol, reason, note = _tensor_error(t, b, stat_error[n] if n is not None else None, tol, rtol,
                                                     view, engines)
            if tensor_mode:
                tensor, error, reason = _tensor_compare(target, base, t, b, error, reason, tol, view)
        else:
            error, reason = differences.leaf_error(t, b, arg.parameter)
            if arg.stand_in:
                note = f"{arg.stand_in} does not record {arg.parameter}: its default is compared"
        rows.append(dict(
            pair=k, slot=(b if arg.stand_in == "TARGET" or t is None else t).slot, target=t, base=b,
            stats=diffs[n] if n is not None else None,
            tensor=tensor, error=float(error), tolerance=tol, agree=not reason, reason=reason,
            parameter=arg.parameter, stand_in=arg.stand_in, note=note,
            base_slot=b.slot if b is not None and arg.stand_in != "BASE" else None,
            _uncompared=uncompared,
        ))
    _judge(pairs, rows, tensor_mode)
    return [CompareRow(**{key: v for key, v in row.items() if not key.startswith("_")}) for row in rows]


def _judged_by_value(row: CompareRow) -> bool:
    """Whether msprobe's errors on ``row`` are only its value rules, or a dtype difference between two floating
    dtypes: judgements of values this compare makes itself, calibrated to the dtypes and the op's inputs."""
    errors = [m for m in row.messages if m.startswith("error")]
    floats = (row.target is not None and row.base is not None and tolerance.is_float(row.target.dtype)
              and tolerance.is_float(row.base.dtype))
    return bool(errors) and all(m in (msprobe_rules.NORM_ERR, msprobe_rules.THOUSANDTH)
                                or (m == msprobe_rules.DTYPE and floats) for m in errors)


def _reduction_length(pair: OpPair, output: Leaf) -> int:
    """:func:`.tolerance.summed_terms` of one output of a pair's op."""
    op = pair.target or pair.base
    shapes = [leaf.shape for leaf in op.leaves  # type: ignore[union-attr]
              if leaf.role == "input" and leaf.kind == "tensor" and leaf.shape is not None]
    first = next((leaf for leaf in op.leaves if leaf.slot == "input.0"), None)  # type: ignore[union-attr]
    api = calls.api_of(pair.name) if not pair.name.endswith(".backward") else calls.api_of(pair.name, backward=True)
    return tolerance.summed_terms(api, pair.name.endswith(".backward"), shapes,
                                  output.shape if output.kind == "tensor" else None,
                                  first.shape if first is not None and first.kind == "tensor" else None)


def _stale_inputs(base: Dump, target: Dump) -> str:
    """Which dump recorded a 0-d argument an op writes into after the op ran ("" when both recorded it as received;
    see :attr:`Dump.inputs_as_received`)."""
    return " and ".join(f"{side} ({dump.engine})" for side, dump in (("BASE", base), ("TARGET", target))
                        if not dump.inputs_as_received)


def _mutated_scalar(pair: OpPair, t: Optional[Leaf], b: Optional[Leaf], key: str) -> bool:
    """Whether an argument row is a 0-d tensor the op writes into (AdamW's ``step_t += 1``)."""
    leaf = t or b
    return (leaf is not None and leaf.role == "input" and leaf.kind == "tensor" and not leaf.shape
            and calls.mutates(calls.api_of(pair.name), leaf.slot))


def _numeric(leaf: Optional[Leaf]) -> bool:
    return leaf is not None and (leaf.kind == "scalar" or leaf.kind == "tensor" and leaf.has_stats)


def _one_builtin(base: Dump, target: Dump) -> bool:
    """Whether exactly one of the two dumps was written by the builtin engine."""
    return ("builtin engine" in base.engine) != ("builtin engine" in target.engine)


def _engines(base: Dump, target: Dump) -> str:
    """How the two dumps' statistics were computed, when two different engines made them ("" when one did)."""
    if base.engine == target.engine:
        return ""
    return f"BASE's statistics by {base.engine}, TARGET's by {target.engine}, which sum in different orders"


def _regrouped(pair: OpPair) -> bool:
    """Whether the two backward entries recorded different autograd nodes of one op: a different number of
    gradients, each pair of them equal in shape or a view of the other. SDPA's math path (a decomposition whose
    last node is a view) gives one ``[B*H, T, D]`` gradient where the fused kernel gives dq, dk, dv ``[B, H, T, D]``;
    the grad_fn hook of either engine sees only the last node."""
    if not pair.matched or not pair.name.endswith(".backward"):
        return False
    t_out, b_out = pair.target.outputs, pair.base.outputs  # type: ignore[union-attr]
    if len(t_out) == len(b_out):
        return False
    return all(t.kind == b.kind == "tensor" and (t.shape == b.shape or _view_of(t.shape, b.shape))
               for t, b in zip(t_out, b_out))


def _view_of(a: Optional[tuple], b: Optional[tuple]) -> bool:
    """Whether two shapes hold the same elements in the same order, split or merged differently
    (``[8, 4, 64, 32]`` and ``[32, 64, 32]``): one is a reshaped view of the other."""
    if a is None or b is None or a == b:
        return False

    def suffixes(shape: tuple) -> set:
        out, size = set(), 1
        for dim in reversed([d for d in shape if d != 1]):
            size *= dim
            out.add(size)
        return out

    sa, sb = suffixes(a), suffixes(b)
    return max(sa | {1}) == max(sb | {1}) and (sa <= sb or sb <= sa)


def _tensor_error(t: Leaf, b: Leaf, errors: Optional[np.ndarray], tol: float, rtol: Optional[float], view: bool,
                  engines: str) -> tuple:
    """(error, its tolerance, reason, note) of two tensors from their statistics; reason "" = agree."""
    note = ""
    if t.dtype != b.dtype:
        if not (tolerance.is_float(t.dtype) and tolerance.is_float(b.dtype)):
            return math.inf, tol, f"dtype {b.dtype} in BASE, {t.dtype} in TARGET", ""
        # a precision difference (autocast, a model cast): the values compare within the coarser dtype's rounding
        note = (f"dtype {b.dtype} in BASE, {t.dtype} in TARGET: compared within "
                f"{tolerance.coarser(t.dtype, b.dtype)}'s precision")
    if t.shape != b.shape:
        if not view:
            return math.inf, tol, f"shape {list(b.shape or [])} in BASE, {list(t.shape or [])} in TARGET", ""
        note = "; ".join(filter(None, [note, f"shape {list(b.shape or [])} in BASE, {list(t.shape or [])} in TARGET: "
                                                   "the same elements (a view)"]))
    if t.md5 is not None and b.md5 is not None and t.md5 == b.md5:
        return 0.0, tol, "", note
    if errors is None:  # no statistics: only a checksum can tell
        if t.md5 is not None and b.md5 is not None:
            return math.inf, tol, "checksums differ", note
        return 0.0, tol, "", note
    numel = math.prod(t.shape) if t.shape is not None else 0
    reduction = tolerance.reduction_tolerance(tol, t.dtype, numel, rtol)
    limits = (tol, tol, reduction, reduction)
    worst = max(range(4), key=lambda i: errors[i] / limits[i] if limits[i] else (math.inf if errors[i] else 0.0))
    error, limit = float(errors[worst]), limits[worst]
    if error <= limit:
        return error, limit, "", note  # the statistic nearest its limit
    stat = Stats._fields[worst].capitalize()
    reason = f"{stat} differs by {error:.3g} of the tensor's magnitude (tolerance {limit:.3g}"
    if worst >= 2 and limit > tol:
        reason += f", {t.dtype.rpartition('.')[2]} summed over {numel} elements"
    reason += ")"
    if worst >= 2 and engines:
        reason += f"; {engines}"
    return error, limit, reason, note


def _tensor_compare(target: Dump, base: Dump, t: Leaf, b: Leaf, error: float, reason: str, tol: float,
                    view: bool) -> tuple:
    t_data, b_data = target.load_tensor(t), base.load_tensor(b)
    if t_data is None or b_data is None:
        return None, error, reason
    if view:
        t_data, b_data = t_data.reshape(-1), b_data.reshape(-1)
    values, data_error, note = differences.tensor_metrics(t_data, b_data)
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
            name=f"{pair.name}.{r['slot']}", target=None if r["_uncompared"] else r["target"], base=r["base"],
            norm_rel=r["stats"].norm_rel if r["stats"] and not r["_uncompared"] else None,
            cosine=r["tensor"].cosine if r["tensor"] and not r["_uncompared"] else None,
            thousandth=r["tensor"].one_thousandth if r["tensor"] and not r["_uncompared"] else None,
            same_elements="the same elements (a view)" in r["note"],
        ) for r in group]
        judged = (msprobe_rules.msprobe_results(pair.name, views, tensor_mode) if pair.matched
                  else [("pass", ())] * len(group))
        for r, (result, messages) in zip(group, judged):
            r["result"], r["messages"] = result, messages
        start = end
