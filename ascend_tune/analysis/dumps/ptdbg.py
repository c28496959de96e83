"""Read ptdbg_ascend's dumps: ``*.pkl`` files that are JSON lines despite their name (never unpickled).

Lines: ``[name_input.0, step, [], dtype, shape, [max, min, mean(, norm)]]`` for each argument or result, and
``[name_stack_info, [[file, line, func, code], ...]]`` for an op's stack; tensors in ``<pkl stem>/<name>.npy``.
Op names keep ptdbg's spelling (``Functional_linear_0_forward``); the compare pairs them with msprobe's.
"""

from __future__ import annotations

import json
import re

from ...errors import InputError
from .layouts import PTDBG
from .model import NO_STATS, Dump, Leaf, Op, Stats, as_float
from .sources import DumpFiles, DumpRef
from .stacks import frames_of

_PTDBG_DATA = re.compile(r"^(?P<op>.+)_(?P<dir>input|output)(?P<sub>(?:\.[^.]+)*)$")
_STACK_SUFFIX = "_stack_info"


def read_ptdbg(files: DumpFiles, ref: DumpRef, label: str) -> Dump:
    """Read the ptdbg ``.pkl`` ``ref`` of an opened location."""
    raw = files.read(ref.index)
    if b"\x00" in raw[:4096]:
        raise InputError(f"{label}: {ref.index} is binary; a ptdbg .pkl is JSON lines (it is never unpickled)")
    by_op: dict = {}
    stacks: dict = {}
    malformed = lines = 0
    for line in raw.decode("utf-8", errors="replace").splitlines():
        if not line.strip():
            continue
        lines += 1
        try:
            item = json.loads(line)
        except ValueError:
            malformed += 1
            continue
        if isinstance(item, list) and len(item) == 2 and isinstance(item[0], str) and item[0].endswith(_STACK_SUFFIX):
            stacks[item[0][: -len(_STACK_SUFFIX)]] = frames_of(item[1] or [])
            continue
        match = _PTDBG_DATA.match(item[0]) if isinstance(item, list) and len(item) >= 6 and isinstance(
            item[0], str) else None
        if match is None:
            malformed += 1
            continue
        role = match.group("dir")
        by_op.setdefault(match.group("op"), []).append(_leaf(item, role + match.group("sub"), role))
    if not by_op:
        raise InputError(
            f"{label}: {ref.index} holds no ptdbg records ({lines} line(s), {malformed} unreadable); "
            "pass a ptdbg_ascend *_dump.pkl"
        )
    ops = tuple(Op(name, tuple(leaves), None, stacks.get(name, ())) for name, leaves in by_op.items())
    stem = ref.index[: -len(".pkl")]
    has_data = any(files.exists(f"{stem}/{leaf.data_name}") for leaf in ops[0].leaves if leaf.data_name)
    return Dump(label, PTDBG, "tensor" if has_data else "statistics", None, ops, (), malformed, files=files,
                data_folder=stem if has_data else None, step=ref.step, rank=ref.rank, source=ref.index)


def _leaf(item: list, slot: str, role: str) -> Leaf:
    name, _, _, dtype, shape, summary = item[:6]
    given = list(summary or [])[:4]
    values = [as_float(v) if not isinstance(v, list) else NO_STATS.max for v in given]
    stats = Stats(*(values + [NO_STATS.max] * (4 - len(values))))
    has_stats = len(given) >= 2 and not any(isinstance(v, list) for v in given[:2])
    dtype = str(dtype)
    if dtype.startswith("<class"):
        value = summary[0] if summary else None
        kind = "scalar" if isinstance(value, (int, float)) and not isinstance(value, bool) else "other"
        return Leaf(slot, role, kind, dtype, (), stats, value=value)
    return Leaf(slot, role, "tensor", dtype, tuple(shape) if isinstance(shape, list) else None, stats,
                data_name=f"{name}.npy", has_stats=has_stats)
