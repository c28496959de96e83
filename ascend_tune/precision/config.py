"""PrecisionConfig: which steps, ranks and ops a precision dump or overflow check covers, and how.

The option names follow msprobe's ``config.json`` (``task``, ``level``, ``step``, ``rank``, ``scope``, ``list``,
``data_mode``, ``summary_mode``, ``overflow_nums``) so a config moves between the two tools unchanged. No torch here:
the CLI and the readers import this module too.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any, Optional

from ..config import FeatureConfig
from ..errors import ConfigError

ENV_DUMP = "ASCEND_TUNE_DUMP"
TASKS = ("statistics", "tensor", "overflow_check", "replay")
LEVELS = ("L0", "L1", "mix")
DATA_MODES = ("all", "forward", "backward", "input", "output")
SUMMARY_MODES = ("statistics", "md5")
BACKENDS = ("auto", "ptdbg_ascend", "msprobe", "builtin")

_RANGE = re.compile(r"^\s*(\d+)\s*-\s*(\d+)\s*$")


@dataclass(frozen=True)
class PrecisionConfig(FeatureConfig):
    """What to dump, at which steps, through which backend.

    task: ``statistics`` (Max/Min/Mean/Norm of every tensor), ``tensor`` (also the tensors, as ``.pt`` files),
        ``overflow_check`` (the first ops whose outputs hold inf/nan, in ``overflow.json``) or ``replay`` (each API
        call recomputed on the CPU in float64 and compared, in ``replay.csv`` / ``replay.json``; builtin engine,
        level L1; ``data_mode`` ``forward`` / ``backward`` chooses the directions replayed).
    level: ``L0`` (nn.Module calls), ``L1`` (torch API calls) or ``mix`` (both).
    steps: step numbers or ``"a-b"`` ranges; None = the block's first step, ``[]`` = every step.
    ranks: global ranks that dump; None or ``[]`` = every rank.
    scope: ``[first, last]`` op names: dump only from ``first`` to ``last`` in execution order.
    list: op names or substrings (``"relu"``); at ``mix`` a listed module also selects the APIs inside it.
    data_mode: any of ``all``, ``forward``, ``backward``, ``input``, ``output``.
    summary_mode: ``statistics`` or ``md5`` (adds a CRC-32 of each tensor's bytes, as msprobe does; syncs per tensor).
    overflow_nums: how many overflowing ops to report before the check ends; -1 = unlimited.
    dump_path: the dump root; None = ``<log_dir>/dump``.
    backend: ``auto``, ``ptdbg_ascend``, ``msprobe`` or ``builtin`` (see :func:`ascend_tune.precision.backends.choose`).

    ``ASCEND_TUNE_DUMP`` (:meth:`~ascend_tune.config.FeatureConfig.from_text`) takes the same keys as
    ``key=value`` items; an item without ``=`` continues the list before it: ``steps=0,2,5-7,level=mix``.
    """

    OPTION = "precision"
    ENV = ENV_DUMP
    EXAMPLE = "task=statistics,level=L1,steps=0-2"
    # each flag one task; several together run side by side (``;`` between them in ENV)
    RUN_FLAGS = {
        "dump": "statistics dump (SPEC: e.g. steps=0,5,level=mix)",
        "overflow": "overflow check: the first ops whose outputs hold inf/nan (SPEC: e.g. steps=0-9)",
        "replay": "each API call of a step recomputed in float64 on the CPU and compared (SPEC: e.g. steps=3)",
    }
    RUN_TASKS = {"dump": "statistics", "overflow": "overflow_check", "replay": "replay"}

    @classmethod
    def run_text(cls, flags: Mapping) -> Optional[str]:
        """``ASCEND_TUNE_DUMP``'s text for ``--dump`` / ``--overflow`` / ``--replay`` (``;`` between tasks), or None
        when none of them is given. A flag without SPEC (``"1"``) takes its task's defaults."""
        parts = []
        for flag, task in cls.RUN_TASKS.items():
            spec = flags.get(flag)
            if spec is None:
                continue
            spec = spec.strip()
            parts.append(f"task={task}" + (f",{spec}" if spec and spec.lower() not in ("1", "on", "true", "yes")
                                           else ""))
        return ";".join(parts) if parts else None

    @classmethod
    def check_text(cls, text: str, source: str) -> None:
        """Raise ConfigError when a process would refuse ``ASCEND_TUNE_DUMP=text`` (each ``;``-separated part)."""
        precision_configs(text)

    task: str = "statistics"
    level: str = "L1"
    steps: Optional[tuple] = None
    ranks: Optional[tuple] = None
    scope: tuple = ()
    list: tuple = ()
    data_mode: tuple = ("all",)
    summary_mode: str = "statistics"
    overflow_nums: int = 1
    dump_path: Optional[str] = None
    backend: str = "auto"

    def __post_init__(self) -> None:
        self.check_choice("task", TASKS)
        self.check_choice("level", LEVELS)
        self.check_choice("summary_mode", SUMMARY_MODES)
        self.check_choice("backend", BACKENDS)
        if self.task == "replay":
            self._check_replay()
        object.__setattr__(self, "steps", _selection("steps", self.steps))
        object.__setattr__(self, "ranks", _selection("ranks", self.ranks))
        object.__setattr__(self, "scope", _names("scope", self.scope))
        if len(self.scope) not in (0, 2):
            raise ConfigError(
                f"scope must be empty or [first, last] (two op names), got {list(self.scope)!r}; "
                "e.g. scope=['Functional.linear.0.forward', 'Functional.linear.1.forward']"
            )
        object.__setattr__(self, "list", _names("list", self.list))
        object.__setattr__(self, "data_mode", _names("data_mode", self.data_mode) or ("all",))
        self.check_choice("data_mode", DATA_MODES, items=True)
        nums = self.overflow_nums
        if isinstance(nums, bool) or not isinstance(nums, int) or (nums < 1 and nums != -1):
            raise ConfigError(f"overflow_nums must be a positive integer or -1 (unlimited), got {nums!r}")
        if self.dump_path is not None:
            if not isinstance(self.dump_path, (str, os.PathLike)) or not str(self.dump_path):
                raise ConfigError(f"dump_path must be a folder path, got {self.dump_path!r}")
            object.__setattr__(self, "dump_path", os.fspath(self.dump_path))

    def _check_replay(self) -> None:
        if self.backend not in ("auto", "builtin"):
            raise ConfigError(
                f"precision task='replay' runs in the builtin engine; backend={self.backend!r} has no replay "
                "(msprobe's run_ut / acc_check is a separate offline tool): use backend='builtin' or 'auto'"
            )
        if self.level != "L1":
            raise ConfigError(
                f"precision task='replay' replays torch API calls (level 'L1'), got level={self.level!r}; "
                "drop level or pass level='L1'"
            )

    def with_first_step(self, first_step: int) -> PrecisionConfig:
        """This config with ``steps=None`` made concrete: the block's first step."""
        return self if self.steps is not None else replace(self, steps=(first_step,))

    def selects_step(self, step: int) -> bool:
        """Whether step ``step`` is dumped (``steps=[]`` = every step)."""
        return _selects(self.steps, step)

    def selects_rank(self, rank: int) -> bool:
        """Whether rank ``rank`` dumps."""
        return _selects(self.ranks, rank)

    def last_step(self) -> Optional[int]:
        """The last step selected, or None when every step is."""
        if not self.steps:
            return None
        return max(hi for _, hi in _ranges(self.steps))

    def as_dict(self) -> dict:
        """A JSON-ready dict (for summary.json)."""
        out = asdict(self)
        for name in ("steps", "ranks", "scope", "list", "data_mode"):
            if out[name] is not None:
                out[name] = list(out[name])
        return out


def precision_configs(value: Any) -> list:
    """The configs ``precision=`` asks for (none when it is off): one, given as
    :meth:`~ascend_tune.config.FeatureConfig.from_option` takes it (``None``: ``ASCEND_TUNE_DUMP``'s), or several: a
    list or tuple of them, or text whose configs are separated by ``;``
    (``task=statistics,level=mix,steps=0;task=replay,steps=0``)."""
    source = PrecisionConfig.OPTION
    if value is None:
        value, source = os.environ.get(ENV_DUMP, ""), ENV_DUMP
    if isinstance(value, str):
        parts = [part for part in value.split(";") if part.strip()] or [value]
        configs = [PrecisionConfig.from_text(part, source=source) for part in parts]
    elif isinstance(value, (list, tuple)):
        configs = [_item(i, item) for i, item in enumerate(value)]
    else:
        configs = [PrecisionConfig.from_any(value)]
    return [config for config in configs if config is not None]


def _item(i: int, item: Any) -> Optional[PrecisionConfig]:
    if item is None or isinstance(item, (list, tuple)):
        raise ConfigError(f"precision item {i} must be a dict of options, a key=value string or a PrecisionConfig, "
                          f"got {type(item).__name__}")
    try:
        return PrecisionConfig.from_any(item)
    except ConfigError as exc:
        raise ConfigError(f"precision item {i}: {exc}") from None


def first_common_step(a: PrecisionConfig, b: PrecisionConfig, start: int = 0) -> Optional[int]:
    """The first step both configs select (``steps=[]``: every step from ``start``, the block's first), or None."""
    if not a.steps or not b.steps:
        other = a.steps or b.steps
        return min(lo for lo, _ in _ranges(other)) if other else start
    common = [max(lo_a, lo_b) for lo_a, hi_a in _ranges(a.steps) for lo_b, hi_b in _ranges(b.steps)
              if max(lo_a, lo_b) <= min(hi_a, hi_b)]
    return min(common) if common else None


def _names(name: str, value: Any) -> tuple:
    if value is None:
        return ()
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) and v for v in value):
        raise ConfigError(f"precision {name} must be a list of names, got {value!r}")
    return tuple(value)


def _selection(name: str, value: Any) -> Optional[tuple]:
    """Normalise steps / ranks to a tuple of ints and ``"a-b"`` strings (None stays None)."""
    if value is None:
        return None
    if isinstance(value, (int, str, range)) and not isinstance(value, bool):
        value = [value]
    if not isinstance(value, (list, tuple)):
        raise ConfigError(
            f"precision {name} must be a list of integers or 'a-b' ranges, got {value!r}; e.g. {name}=[0, '2-4']"
        )
    out: list = []
    for item in value:
        if isinstance(item, range) and item.step == 1 and len(item) > 0:
            item = f"{item.start}-{item.stop - 1}" if len(item) > 1 else item.start
        if isinstance(item, str):
            text = item.strip()
            match = _RANGE.match(text)
            if text.isdigit():
                item = int(text)
            elif match:
                item = f"{int(match.group(1))}-{int(match.group(2))}"
        if isinstance(item, bool) or not isinstance(item, (int, str)) or (isinstance(item, int) and item < 0):
            raise ConfigError(
                f"precision {name} must hold integers >= 0 or 'a-b' ranges with a <= b, got {item!r}; "
                f"e.g. {name}=[0, '2-4']"
            )
        match = _RANGE.match(item) if isinstance(item, str) else None
        if isinstance(item, str) and (match is None or int(match.group(1)) > int(match.group(2))):
            raise ConfigError(
                f"precision {name} must hold integers >= 0 or 'a-b' ranges with a <= b, got {item!r}; "
                f"e.g. {name}=[0, '2-4']"
            )
        out.append(item)
    return tuple(out)


def _ranges(selection: tuple) -> list:
    pairs = []
    for item in selection:
        if isinstance(item, int):
            pairs.append((item, item))
        else:
            lo, hi = _RANGE.match(item).groups()
            pairs.append((int(lo), int(hi)))
    return pairs


def _selects(selection: Optional[tuple], value: int) -> bool:
    if not selection:
        return True
    return any(lo <= value <= hi for lo, hi in _ranges(selection))


def expand_steps(selection: tuple) -> list:
    """The concrete step numbers of a non-empty selection, sorted."""
    steps: set = set()
    for lo, hi in _ranges(selection):
        steps.update(range(lo, hi + 1))
    return sorted(steps)
