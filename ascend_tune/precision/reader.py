"""Read a dump folder: the built-in engine's, msprobe's (same layout), or a step rebuilt from its journal.

Layout (msprobe's, which the built-in engine writes too): ``<dump_path>/step<N>/<rank folder>/`` holding
``dump.json``, ``stack.json``, ``construct.json`` and, in tensor mode, ``dump_tensor_data/*.pt``. The rank folder
is ``rank<R>``; msprobe 26 names it ``proc<PID>`` when torch.distributed is not initialised, 8.x names it ``rank``.
A step whose process died before the step ended has ``dump.journal`` instead of ``dump.json``; it is read back from
the journal (``complete=False``; names, dtypes and shapes, no statistics).

Pure Python (no torch), so analysis tools and the CLI can read dumps cheaply.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from typing import Optional

from ..errors import InputError
from .journal import CONSTRUCT_JSON, DUMP_JSON, JOURNAL, STACK_JSON

_STEP = re.compile(r"^step(\d+)$")
_RANK = re.compile(r"^(?:rank(\d*)|proc\d+)$")
_FRAME = re.compile(r"^File (.*), line (\d+), in (.*?), \n ?(.*)$", re.DOTALL)


@dataclass(frozen=True)
class Frame:
    """One frame of a call stack: where an op was called from."""

    file: str
    line: int
    function: str
    code: str


@dataclass(frozen=True)
class DumpLocation:
    """A rank folder inside a dump: its step (None if not under ``step<N>``) and rank (None for ``proc<PID>``)."""

    path: str
    step: Optional[int]
    rank: Optional[int]


@dataclass(frozen=True)
class Dump:
    """One step of one rank.

    data: entry name -> ``{input_args, input_kwargs, output[, parameters]}`` or ``{input, output}``, in execution
    order; stacks: entry name -> frames (innermost first; forward entries only, as in msprobe); construct: entry ->
    parent module (empty at L1); complete: False when rebuilt from the journal of a step that never ended.
    """

    path: str
    step: Optional[int]
    rank: Optional[int]
    task: Optional[str]
    level: Optional[str]
    framework: Optional[str]
    dump_data_dir: Optional[str]
    data: dict = field(repr=False)
    stacks: dict = field(repr=False)
    construct: dict = field(repr=False)
    complete: bool = True
    source: str = DUMP_JSON

    @property
    def names(self) -> list:
        """Entry names in execution order."""
        return list(self.data)

    def stack_of(self, name: str) -> tuple:
        """The frames of ``name``; a backward entry gets its forward's (msprobe keeps stacks for forward only)."""
        frames = self.stacks.get(name)
        if frames is None:
            frames = self.stacks.get(forward_name(name), ())
        return frames


def forward_name(name: str) -> str:
    """``Functional.linear.0.backward`` -> ``...forward``; ``Module.fc.Linear.backward.0`` -> ``...forward.0``."""
    if name.startswith("Module.") and ".backward." in name:
        head, _, tail = name.rpartition(".backward.")
        return f"{head}.forward.{tail}"
    if name.endswith(".backward"):
        return name[: -len("backward")] + "forward"
    return name


def parse_frame(text: str) -> Frame:
    """A stack.json frame string (``File f, line n, in fn, \\n code``) as a :class:`Frame`."""
    match = _FRAME.match(text)
    if match is None:
        return Frame(file="", line=0, function="", code=text.strip())
    file, line, function, code = match.groups()
    return Frame(file=file, line=int(line), function=function, code=code.strip())


def find_dumps(path: str) -> list:
    """Every rank folder under ``path`` (a dump root, a ``step<N>`` folder or a rank folder), by step then rank."""
    path = os.fspath(path)
    if not os.path.isdir(path):
        raise InputError(f"{path!r} is not a folder; pass a dump folder (the dump_path or one of its step<N> folders)")
    if _is_rank_dir(path):
        return [_location(path)]
    found = []
    for name in sorted(os.listdir(path)):
        sub = os.path.join(path, name)
        if _STEP.match(name) and os.path.isdir(sub):
            ranks = [os.path.join(sub, r) for r in sorted(os.listdir(sub))]
            found.extend(_location(r) for r in ranks if _is_rank_dir(r))
        elif _RANK.match(name) and _is_rank_dir(sub):
            found.append(_location(sub))
    found.sort(key=lambda loc: (loc.step if loc.step is not None else -1, loc.rank if loc.rank is not None else -1))
    return found


def read_dump(path: str) -> Dump:
    """Read one step of one rank: ``path`` is a rank folder, a ``step<N>`` folder holding one, or a dump.json."""
    path = os.fspath(path)
    if os.path.isfile(path) and os.path.basename(path) == DUMP_JSON:
        path = os.path.dirname(path)
    if not os.path.isdir(path):
        raise InputError(f"{path!r} does not exist; pass a dump's step<N> folder or the rank folder inside it")
    if not _is_rank_dir(path):
        inside = [loc for loc in find_dumps(path) if os.path.dirname(loc.path) == path]
        if len(inside) != 1:
            what = ", ".join(os.path.basename(loc.path) for loc in inside) or "none"
            raise InputError(
                f"{path!r} holds {len(inside)} rank folders ({what}); pass the one to read, e.g. {path}/rank0"
            )
        path = inside[0].path
    location = _location(path)
    if os.path.exists(os.path.join(path, DUMP_JSON)):
        return _read_json(location)
    return _read_journal(location)


def _is_rank_dir(path: str) -> bool:
    return os.path.isfile(os.path.join(path, DUMP_JSON)) or os.path.isfile(os.path.join(path, JOURNAL))


def _location(path: str) -> DumpLocation:
    step_match = _STEP.match(os.path.basename(os.path.dirname(os.path.abspath(path))))
    rank_match = _RANK.match(os.path.basename(path))
    rank = int(rank_match.group(1)) if rank_match and rank_match.group(1) else None
    return DumpLocation(path=path, step=int(step_match.group(1)) if step_match else None, rank=rank)


def _load(path: str) -> object:
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot read {path}: {exc}") from None


def _read_json(loc: DumpLocation) -> Dump:
    dump = _load(os.path.join(loc.path, DUMP_JSON))
    if not isinstance(dump, dict) or not isinstance(dump.get("data"), dict):
        raise InputError(f"{loc.path}/{DUMP_JSON} is not a dump.json (no 'data' object)")
    stack_path = os.path.join(loc.path, STACK_JSON)
    stacks = _stacks(_load(stack_path)) if os.path.exists(stack_path) else {}
    construct_path = os.path.join(loc.path, CONSTRUCT_JSON)
    construct = _load(construct_path) if os.path.exists(construct_path) else {}
    return Dump(
        path=loc.path, step=loc.step, rank=loc.rank, task=dump.get("task"), level=dump.get("level"),
        framework=dump.get("framework"), dump_data_dir=dump.get("dump_data_dir"), data=dump["data"],
        stacks=stacks, construct=construct if isinstance(construct, dict) else {},
    )


def _stacks(raw: object) -> dict:
    """stack.json -> name: frames. Newer msprobe groups names by stack (``{"0": [[names], [frames]]}``)."""
    out: dict = {}
    if not isinstance(raw, dict):
        return out
    for key, value in raw.items():
        if key.isdigit() and isinstance(value, list) and len(value) == 2 and isinstance(value[0], list):
            frames = tuple(parse_frame(f) for f in value[1] if isinstance(f, str))
            for name in value[0]:
                out[name] = frames
        elif isinstance(value, list):
            out[key] = tuple(parse_frame(f) for f in value if isinstance(f, str))
    return out


def _read_journal(loc: DumpLocation) -> Dump:
    header: dict = {}
    data: dict = {}
    stacks: dict = {}
    frames_by_id: dict = {}
    construct: dict = {}
    with open(os.path.join(loc.path, JOURNAL), encoding="utf-8") as fh:
        for line in fh:
            try:
                record = json.loads(line)
            except ValueError:  # the line being written when the process died
                continue
            if "header" in record:
                header = record["header"]
            elif "frames" in record:
                frames_by_id[record["stack"]] = tuple(parse_frame(f) for f in record["frames"])
            elif "name" in record:
                name = record["name"]
                entry = data.setdefault(name, {})  # a bare name: the op was running when the process died
                if "data" in record:
                    entry.update(record["data"])
                if "stack" in record:
                    stacks[name] = frames_by_id.get(record["stack"], ())
                if "parent" in record:
                    construct[name] = record["parent"]
    return Dump(
        path=loc.path, step=loc.step, rank=loc.rank, task=header.get("task"), level=header.get("level"),
        framework=header.get("framework"), dump_data_dir=header.get("dump_data_dir"), data=data, stacks=stacks,
        construct=construct if header.get("level") != "L1" else {}, complete=False, source=JOURNAL,
    )
