"""Two runs' config.json compared (read by :mod:`.read`): the differences that change numbers first (``error``),
then those that may (``warning``), then the natural ones of two devices (``info``).

Keys are dotted paths (``optimizer.param_groups.0.lr``); a list of numbers (Adam's betas) is one value. Each key's
severity is the first rule of :data:`RULES` whose prefix it starts with. The initial weights and the first
batches are compared as one difference each, however many parameters or tensors differ (a seed changes them all),
within :data:`STATISTICS_RTOL` (two devices compute their statistics in other orders). An environment variable
with a counterpart on the other device (:data:`COUNTERPARTS`: ``NCCL_DETERMINISTIC`` and ``HCCL_DETERMINISTIC``)
is compared by meaning: the same value under the two names is the same setting (``info``), set on one side only a
difference. A run of several ranks is compared rank by rank: rank 0 first, then each other rank's differences that
rank 0 does not already show, as ``ranks.R.<key>`` (a seed or a variable set on one node only). Against another
engine's file (msprobe's config_check pack, :mod:`.msprobe_pack`) only what both record is compared, the rest
named once (``sections``, info). Standard library
only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional

from .msprobe_pack import from_pack
from .read import RANKS, run_config

SEVERITIES = ("error", "warning", "info")
STATISTICS_RTOL = 1e-3  # initial weights / batch statistics: two devices' reductions, one seed
GROUPED = ("weights", "data.first_forwards")  # compared as one difference each
LISTED = ("schedulers",)  # lists of objects: of other lengths, one difference naming each side's classes
RULES = (  # (key prefix, severity): the first match wins
    ("optimizer.param_groups.*.foreach", "warning"), ("optimizer.param_groups.*.fused", "warning"),
    ("optimizer.param_groups.*.capturable", "info"), ("optimizer.param_groups.*.differentiable", "info"),
    # a scheduler's trace of the base lr: the schedulers' base_lrs compare it (and a schedule on one side only shows)
    ("optimizer.param_groups.*.initial_lr", "info"), ("optimizers.*.param_groups.*.initial_lr", "info"),
    ("optimizers.*.param_groups.*.foreach", "warning"), ("optimizers.*.param_groups.*.fused", "warning"),
    ("optimizer", "error"), ("optimizers", "error"), ("clipping", "error"), ("grad_scaler", "error"),
    ("precision.cudnn_benchmark", "warning"), ("precision", "error"),
    ("model", "error"), ("weights", "error"), ("schedulers", "error"), ("accumulation", "error"),
    # numpy's / Python's state: another seed, or none (an unseeded process draws its own), so never counted
    ("randomness.torch_initial_seed", "error"), ("randomness", "info"),
    ("data.num_workers", "warning"), ("data.class", "warning"), ("data", "error"),
    ("environment.variables", "warning"), ("environment.versions.torch_npu", "info"),
    ("environment.versions", "warning"), ("environment.python", "warning"),
    ("device", "info"), ("written_by", "info"), ("rank", "info"), ("world_size", "error"),
)
COUNTERPARTS = {  # one meaning, one name per device
    "NCCL_DETERMINISTIC": "deterministic collectives", "HCCL_DETERMINISTIC": "deterministic collectives",
    "CUDA_LAUNCH_BLOCKING": "blocking launches", "ASCEND_LAUNCH_BLOCKING": "blocking launches",
    "PYTORCH_CUDA_ALLOC_CONF": "allocator settings", "PYTORCH_NPU_ALLOC_CONF": "allocator settings",
    "NCCL_ALGO": "collective algorithm", "HCCL_ALGO": "collective algorithm",
    "CUDA_VISIBLE_DEVICES": "visible devices", "ASCEND_RT_VISIBLE_DEVICES": "visible devices",
}
_STATE = "another seed, or none (an unseeded process draws its own): it matters where the run draws from it"
NOTES = {"randomness.numpy_random_state": "numpy's global random state: " + _STATE,
         "randomness.python_random_state": "Python's random state: " + _STATE}
SAME_MEANING = ("visible devices",)  # which devices a run sees never changes its numbers
_ENV = "environment.variables."
_VERSIONS = "environment.versions."
PORT_PRECISION = "precision.autocast"


@dataclass(frozen=True)
class Difference:
    """One setting the two runs differ in."""

    key: str
    base: Any
    target: Any
    severity: str
    note: str = ""

    def as_dict(self) -> dict:
        return {"key": self.key, "base": self.base, "target": self.target, "severity": self.severity,
                "note": self.note}


@dataclass(frozen=True)
class ConfigComparison:
    """The differences of two config.json, most material first."""

    base: str
    target: str
    differences: tuple

    def of(self, severity: str) -> list:
        return [d for d in self.differences if d.severity == severity]

    @property
    def same_experiment(self) -> bool:
        """No difference that changes numbers."""
        return not self.of("error")

    def beyond_precision(self) -> list:
        """The ``error`` differences but autocast's: what an AMP port's page counts as another experiment (the
        dtype a port computes in is the port, judged by the dumps and the loss at that precision)."""
        return [d for d in self.of("error") if not d.key.startswith(PORT_PRECISION)]

    def as_dict(self) -> dict:
        return {"base": self.base, "target": self.target, "same_experiment": self.same_experiment,
                "differences": [d.as_dict() for d in self.differences]}


def compare_configs(base: dict, target: dict, base_label: str = "BASE", target_label: str = "TARGET") -> \
        ConfigComparison:
    """Every difference of ``target`` from ``base`` (see the module docstring)."""
    found = []
    cross = from_pack(base) or from_pack(target)
    if cross:  # another engine's: the sections both record, the rest named once
        both = set(base) & set(target)
        for side, config, label in (("base", base, base_label), ("target", target, target_label)):
            alone = sorted(k for k in set(config) - both if k != RANKS)
            if alone:
                found.append(Difference("sections", None, None, "info",
                                        f"recorded in the {side} ({label}) only, not compared: {', '.join(alone)}"))
        base, target = _common_forwards({k: v for k, v in base.items() if k in both},
                                        {k: v for k, v in target.items() if k in both})
    found += _differences(base, target, cross)
    ranks_b, ranks_t = base.get(RANKS) or {}, target.get(RANKS) or {}
    shown = {d.key for d in found}
    for rank in sorted(set(ranks_b) & set(ranks_t), key=int):
        found += [Difference(f"{RANKS}.{rank}.{d.key}", d.base, d.target, d.severity, d.note)
                  for d in _differences(ranks_b[rank], ranks_t[rank], cross) if d.key not in shown and d.key != "rank"]
    found.sort(key=lambda d: (SEVERITIES.index(d.severity), d.key))
    return ConfigComparison(base_label, target_label, tuple(found))


def _common_forwards(base: dict, target: dict) -> tuple:
    """Both configs with as many first forwards as both record (msprobe packs the first forwards of the run, this
    package those of the first step)."""
    lists = [(c.get("data") or {}).get("first_forwards") for c in (base, target)]
    if not all(isinstance(f, list) for f in lists):
        return base, target
    n = min(len(f) for f in lists)
    return tuple(dict(c, data=dict(c["data"], first_forwards=f[:n])) for c, f in zip((base, target), lists))


def _differences(base: dict, target: dict, both_only: bool = False) -> list:
    """The differences of one rank's two configs (unsorted); ``both_only`` (two engines' files): a setting one
    side did not record (missing or None) is not compared."""
    found = []
    for key in LISTED:  # one scheduler more or less is one difference, not one per setting of it
        b, t = base.get(key), target.get(key)
        if isinstance(b, list) and isinstance(t, list) and len(b) != len(t):
            found.append(Difference(key, [_name(x) for x in b], [_name(x) for x in t], severity(key)))
            base, target = {k: v for k, v in base.items() if k != key}, {k: v for k, v in target.items() if k != key}
    flat_b = _flatten({k: v for k, v in base.items() if k != RANKS})
    flat_t = _flatten({k: v for k, v in target.items() if k != RANKS})
    for group in GROUPED:
        found += _grouped(group, flat_b, flat_t)
    found += _environment(flat_b, flat_t)
    for key in sorted(set(flat_b) | set(flat_t)):
        if key.startswith(_ENV) or any(_under(key, g) for g in GROUPED):
            continue
        b, t = flat_b.get(key, _MISSING), flat_t.get(key, _MISSING)
        if both_only and any(v is _MISSING or v is None for v in (b, t)):
            continue
        if not _same(b, t):
            if _same_release(key, b, t):  # 2.1.0+cu121 against 2.1.0+cpu: each device's build of one release
                found.append(Difference(key, b, t, "info", "one release, each device's own build"))
                continue
            found.append(Difference(key, _shown(b), _shown(t), severity(key), NOTES.get(key, "")))
    return found


def _same_release(key: str, b: Any, t: Any) -> bool:
    """A library version that differs only in its local part (``+cu121``, ``+cpu``)."""
    return key.startswith(_VERSIONS) and isinstance(b, str) and isinstance(t, str) and \
        b.split("+", 1)[0] == t.split("+", 1)[0]


def severity(key: str) -> str:
    """The severity of a difference at ``key`` (:data:`RULES`; ``*`` matches one path part; ``ranks.R.`` is the
    rank's own key)."""
    parts = key.split(".")
    if parts[0] == RANKS and len(parts) > 2:
        parts = parts[2:]
    for prefix, level in RULES:
        wanted = prefix.split(".")
        if len(parts) >= len(wanted) and all(w in ("*", p) for w, p in zip(wanted, parts)):
            return level
    return "warning"


class _Missing:
    def __repr__(self) -> str:
        return "(not recorded)"


_MISSING = _Missing()


def _flatten(value: Any, prefix: str = "") -> dict:
    """``{dotted key: value}``; a list of scalars stays one value."""
    if isinstance(value, dict):
        out: dict = {}
        for k, v in value.items():
            out.update(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    if isinstance(value, list) and any(isinstance(v, (dict, list)) for v in value):
        out = {}
        for i, v in enumerate(value):
            out.update(_flatten(v, f"{prefix}.{i}" if prefix else str(i)))
        return out
    return {prefix: value}


def _under(key: str, group: str) -> bool:
    return key == group or key.startswith(group + ".")


def _same(b: Any, t: Any, rtol: float = 0.0) -> bool:
    if isinstance(b, bool) or isinstance(t, bool):
        return b is t
    if isinstance(b, (int, float)) and isinstance(t, (int, float)):
        if math.isnan(b) or math.isnan(t):
            return math.isnan(b) and math.isnan(t)
        return b == t or abs(b - t) <= rtol * max(abs(b), abs(t))
    if isinstance(b, list) and isinstance(t, list) and len(b) == len(t):
        return all(_same(x, y, rtol) for x, y in zip(b, t))
    return b == t


def _name(entry: Any) -> Any:
    return entry.get("class", entry) if isinstance(entry, dict) else entry


def _shown(value: Any) -> Any:
    return None if value is _MISSING else value


def _grouped(group: str, flat_b: dict, flat_t: dict) -> list:
    """One difference for the entries under ``group`` (a parameter, a forward's argument) that differ: a statistic
    both record beyond :data:`STATISTICS_RTOL`, or an entry one side lacks (another engine's statistics that this
    one does not record are not compared)."""
    keys_b, keys_t = {k for k in flat_b if _under(k, group)}, {k for k in flat_t if _under(k, group)}
    if not keys_b and not keys_t:
        return []
    # an entry: what a statistic describes (a parameter, an argument), not the group's own total (weights.sum)
    entries_b, entries_t = ({k.rsplit(".", 1)[0] for k in keys} - {group} for keys in (keys_b, keys_t))
    common = sorted(keys_b & keys_t)
    if not common and keys_b and keys_t:
        return [Difference(group, None, None, "info", "no statistic recorded on both sides: not compared")]
    differ = sorted(entries_b ^ entries_t) + [k for k in common
                                              if not _same(flat_b[k], flat_t[k], STATISTICS_RTOL)]
    if not differ:
        return []
    first = differ[0]
    if first in entries_b ^ entries_t:
        what = f"recorded in the {'base' if first in entries_b else 'target'} only"
    else:
        what = f"{_shown(flat_b[first])} vs {_shown(flat_t[first])}"
    note = f"{len(differ)} entries or statistics differ beyond {STATISTICS_RTOL:g} (first {first}: {what})"
    return [Difference(group, None, None, severity(group), note)]


def _environment(flat_b: dict, flat_t: dict) -> list:
    """The allow-listed variables, a counterpart pair compared by its meaning."""
    env_b = {k[len(_ENV):]: v for k, v in flat_b.items() if k.startswith(_ENV)}
    env_t = {k[len(_ENV):]: v for k, v in flat_t.items() if k.startswith(_ENV)}
    found, done = [], set()
    for name in sorted(set(env_b) | set(env_t)):
        meaning = COUNTERPARTS.get(name)
        if meaning is None:
            if env_b.get(name) != env_t.get(name):
                found.append(Difference(_ENV + name, env_b.get(name), env_t.get(name), "warning"))
            continue
        if meaning in done:
            continue
        done.add(meaning)
        names = sorted(n for n, m in COUNTERPARTS.items() if m == meaning)
        b = {n: env_b[n] for n in names if n in env_b}
        t = {n: env_t[n] for n in names if n in env_t}
        if set(b.values()) == set(t.values()) and len(set(b.values())) <= 1:
            if b != t:  # the same value under the other device's name: the same setting
                found.append(Difference(_ENV + "/".join(names), b, t, "info",
                                        f"{meaning}: the same value under each device's name"))
            continue
        level = "info" if meaning in SAME_MEANING else "warning"
        found.append(Difference(_ENV + "/".join(names), b or None, t or None, level, meaning))
    return found


def compare_runs(base: str, target: str) -> Optional[ConfigComparison]:
    """Two runs' settings compared, or None when either has no readable config.json."""
    configs = [run_config(path) for path in (base, target)]
    if None in configs:
        return None
    return compare_configs(*configs, base_label=base, target_label=target)
