"""Which TARGET op and argument each BASE op and argument is compared with, across engines.

**Ops** pair by name, which carries the API and its call count (``Functional.linear.1.forward``), as msprobe pairs
them; reflected operators (``Tensor.__rmul__`` in one engine, ``Tensor.__mul__`` in the other) pair by their call
order within one family (:func:`.calls.family`). ``fuzzy`` drops the count everywhere and pairs the k-th call of an
API in one run with its k-th call in the other (for runs whose extra calls shift the counts).

**Arguments** pair by role (:func:`.calls.argument`): a positional slot and a keyword slot filling the same
parameter are one argument (``input.4`` and ``input.eps`` of ``F.layer_norm``); an argument one dump does not
record is compared with the default it stands for, when the parameter has one (:class:`Argument`.stand_in).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Optional

from . import calls
from .model import NO_STATS, Leaf, Op, Stats

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
class Argument:
    """One argument or result of an op pair: the two leaves, the parameter it fills, and which side's leaf is the
    parameter's default standing in for an argument that dump did not record (None: both recorded)."""

    key: str
    target: Optional[Leaf]
    base: Optional[Leaf]
    parameter: Optional[str]
    stand_in: Optional[str]  # "TARGET" or "BASE"


def match_key(name: str, fuzzy: bool) -> str:
    """The name ops are paired by: ptdbg API names in msprobe's spelling, without the call count when fuzzy."""
    m = _PTDBG_API.match(name)
    if m:
        name = f"{m['kind']}.{m['api']}.{m['n']}.{m['dir']}"
    if fuzzy:
        m = _MODULE_COUNT.match(name) if name.startswith("Module.") else None
        if m:
            return f"{m['head']}.{m['dir']}"
        m = _API_COUNT.match(name)
        if m:
            return f"{calls.family(m['head'])}.{m['dir']}"
    else:
        m = _API_COUNT.match(name)
        if m and m["head"] in calls.FOLDED:
            return f"{calls.family(m['head'])}.{m['dir']}"  # paired by order within the family
    return name


def match_ops(base: Any, target: Any, fuzzy: bool = False) -> list:
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


def arguments(pair: OpPair) -> list:
    """The :class:`Argument` rows of an op pair: TARGET's in its order, then those only BASE has."""
    api = calls.api_of((pair.target or pair.base).name)  # type: ignore[union-attr]
    if pair.target is not None and pair.base is not None and calls.family(calls.api_of(pair.base.name) or "") != \
            calls.family(api or ""):
        api = None  # two different APIs paired (ptdbg names, a data mapping): compare slots as recorded
    t_side = _keyed(pair.target, api)
    b_side = _keyed(pair.base, api)
    rows = []
    for key in list(t_side) + [k for k in b_side if k not in t_side]:
        t, t_param = t_side.get(key, (None, None))
        b, b_param = b_side.get(key, (None, None))
        param = t_param or b_param
        stand_in = None
        if pair.matched and (t is None) != (b is None):
            value = calls.default(param, key)
            if calls.has(value):
                stand_in = "TARGET" if t is None else "BASE"
                leaf = default_leaf(f"input.{param.name}", value, like=t or b)
                t, b = (leaf, b) if t is None else (t, leaf)
        rows.append(Argument(key, t, b, param.name if param else None, stand_in))
    return rows


def _keyed(op: Optional[Op], api: Optional[str]) -> dict:
    out: dict = {}
    if op is None:
        return out
    for leaf in op.leaves:
        key, param = calls.argument(api, leaf.slot) if leaf.role == "input" else (leaf.slot, None)
        if key in out:  # two slots claim one parameter (a malformed call): keep both, as recorded
            key = leaf.slot
        out[key] = (leaf, param)
    return out


def default_leaf(slot: str, value: Any, like: Optional[Leaf] = None) -> Leaf:
    """A leaf holding a parameter's default, as a reader would have read it from a dump (a number equal to the
    recorded one, ``like``, takes its type: ``norm_type=2`` passed as an int is the default 2.0)."""
    if value is None:
        return Leaf(slot, "input", "none", "N/A", None, NO_STATS)
    dtype = f"<class '{type(value).__name__}'>"
    if like is not None and like.kind == "scalar" and not isinstance(value, bool) and isinstance(value, (int, float)) \
            and float(like.value) == float(value):
        dtype, value = like.dtype, like.value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return Leaf(slot, "input", "scalar", dtype, (), Stats(*(float(value),) * 4), value=value)
    return Leaf(slot, "input", "other", dtype, (), NO_STATS, value=value)
