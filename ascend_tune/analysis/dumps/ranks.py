"""Every rank at once: a whole multi-rank dump location compared (or checked for inf/NaN) rank by rank, in parallel
worker processes, and the one place where the run went wrong first.

Per ``(step, rank)`` a worker reads only that dump, runs the single-dump verdict on it (:func:`.compare.compare_dumps`
and its first divergence, or THE overflow rule of :mod:`.overflow`) and returns a small summary: the op, its place in
execution order, and how many collectives (``Distributed.*`` calls) that rank had run before it.

**Across ranks.** The k-th collective of every rank is one point in time (all ranks meet there), so a rank's
finding made before its first collective is its own, and one made after collective k happened between k and k+1.
Steps come first: a divergence at step 1 on every rank is the consequence of one at step 0 on one rank. The run's
first finding is the smallest ``(step, collectives before it, arrived through a collective, position, rank)``; a
finding *arrived through a collective* when it is a collective's own output or an op that received the difference
after one (kind ``inputs`` for a divergence, received inf/NaN for an overflow). Anchors: msprobe's ``-da`` first-diff
analysis (each rank walked to its communication ops, ranks linked through them) and its multi-rank ``nan_analyze``.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from typing import Optional

from ...errors import InputError
from ..parallel import map_ranks
from .model import Dump, call_parts
from .sources import DumpFiles, DumpRef, open_location

ONLY_BASE, ONLY_TARGET, UNREADABLE = "only in BASE", "only in TARGET", "unreadable"


@dataclass(frozen=True)
class RankFinding:
    """One dump's verdict, as small as a worker returns it: ``status`` is ``agree`` / ``diverge`` (compare),
    ``clean`` / ``overflow`` (overflow check), or ``only in BASE`` / ``only in TARGET`` / ``unreadable``."""

    step: Optional[int]
    rank: Optional[int]
    status: str
    op: Optional[str] = None
    kind: str = ""  # compare: output / argument / inputs / only in ...; overflow: produced / received
    reason: str = ""
    position: int = -1  # the op's index in the dump's execution order
    collectives_before: int = 0
    through_collective: bool = False
    ops: int = 0
    stack: tuple = ()  # user frames of the op
    message: str = ""  # why a dump could not be read

    @property
    def found(self) -> bool:
        return self.status in ("diverge", "overflow")

    def order(self) -> tuple:
        """The cross-rank order of findings (see the module docstring)."""
        return (-1 if self.step is None else self.step, self.collectives_before, self.through_collective,
                self.position, -1 if self.rank is None else self.rank)


@dataclass(frozen=True)
class RunFindings:
    """Every rank of a location (or a pair of locations) checked: the per-rank findings and the run's first."""

    task: str  # "compare" or "overflow"
    locations: tuple
    ranks: tuple  # RankFinding, by step then rank
    jobs: int

    @property
    def first(self) -> Optional[RankFinding]:
        """The run's first divergence / overflow (see the module docstring), or None."""
        found = [r for r in self.ranks if r.found]
        return min(found, key=RankFinding.order) if found else None

    @property
    def readable(self) -> int:
        return sum(1 for r in self.ranks if r.status != UNREADABLE)

    @property
    def passed(self) -> bool:
        return self.first is None

    def as_dict(self) -> dict:
        """JSON-ready (``--json``, compare_summary.json of a whole run)."""
        first = self.first
        return {"task": self.task, "locations": list(self.locations), "jobs": self.jobs,
                "first": None if first is None else asdict(first), "ranks": [asdict(r) for r in self.ranks]}


def holds_several(path: str) -> bool:
    """Whether ``path`` holds the dumps of several ranks: the whole-run verdicts apply (all its steps, step by step).
    A one-rank location with several steps keeps asking for ``--step``, as it always did."""
    try:
        files, refs = open_location(path)
    except InputError:
        return False
    files.close()
    return len({ref.rank for ref in refs}) > 1


def compare_runs(base: str, target: str, mode: str = "auto", fuzzy: bool = False, rtol: Optional[float] = None,
                 jobs: Optional[int] = None, out: Optional[str] = None) -> RunFindings:
    """Compare every ``(step, rank)`` dump of ``target`` with ``base``'s, each pair in a worker.

    Parameters:
        base / target: whole dump locations (a ``dump_path`` with ``step{N}/rank{R}`` folders, or a packed archive).
        mode / fuzzy / rtol: as :func:`.compare.compare_dumps`.
        jobs: worker processes (None: the CPU count).
        out: a folder for each pair's ``step{N}/rank{R}/compare_result.csv`` and ``compare_summary.json``.
    """
    base_refs, target_refs = _refs(base), _refs(target)
    keys = sorted(set(base_refs) | set(target_refs), key=_key_order)
    tasks, ranks = [], {}
    for key in keys:
        if key not in target_refs:
            ranks[key] = RankFinding(*key, ONLY_BASE, message=f"{target} has no dump for {_where(key)}")
        elif key not in base_refs:
            ranks[key] = RankFinding(*key, ONLY_TARGET, message=f"{base} has no dump for {_where(key)}")
        else:
            sub = None if out is None else os.path.join(out, *_folders(key))
            tasks.append((key, base, base_refs[key], target, target_refs[key], mode, fuzzy, rtol, sub))
    try:
        for finding in map_ranks(_compare_task, tasks, jobs):
            ranks[(finding.step, finding.rank)] = finding
    finally:
        close_archives()
    return RunFindings("compare", (base, target), tuple(ranks[k] for k in keys), _jobs(jobs, tasks))


def overflow_runs(path: str, jobs: Optional[int] = None) -> RunFindings:
    """THE overflow rule on every ``(step, rank)`` dump at ``path``, each in a worker; the run's first overflow is
    the rank that produced it, not the ranks it reached through a collective."""
    refs = _refs(path)
    keys = sorted(refs, key=_key_order)
    try:
        found = map_ranks(_overflow_task, [(key, path, refs[key]) for key in keys], jobs)
    finally:
        close_archives()
    return RunFindings("overflow", (path,), tuple(found), _jobs(jobs, keys))


def recorded_runs(path: str) -> Optional[RunFindings]:
    """The overflow.json of every rank (``rank{R}/overflow.json``, what an ``overflow_check`` run records) as the
    run's findings; None when ``path`` does not hold two or more. Those files keep no execution order: the ranks
    are ordered by step, then a produced inf/NaN before a received one."""
    from ...formats.run_dir import OVERFLOW_JSON, rank_of_dir
    from .overflow import read_overflow_json

    if not os.path.isdir(path):
        return None
    files = {rank_of_dir(n): os.path.join(path, n, OVERFLOW_JSON) for n in sorted(os.listdir(path))}
    files = {r: f for r, f in files.items() if r is not None and os.path.isfile(f)}
    if len(files) < 2:
        return None
    found = []
    for rank, file in sorted(files.items()):
        try:
            report = read_overflow_json(file)
        except InputError as exc:
            found.append(RankFinding(None, rank, UNREADABLE, message=str(exc)))
            continue
        first = report.first
        if first is None:
            found.append(RankFinding(None, rank, "clean"))
        else:
            found.append(RankFinding(first.step, rank, "overflow", first.name,
                                     "produced" if first.produced_here else "received",
                                     f"{first.tensor} max={first.max} min={first.min}",
                                     through_collective=not first.produced_here, stack=tuple(first.stack_text)))
    return RunFindings("overflow", (path,), tuple(found), 1)


def _refs(path: str) -> dict:
    files, refs = open_location(path)
    files.close()
    out: dict = {}
    for ref in refs:
        out.setdefault((ref.step, ref.rank), ref)  # dump.json before a journal of the same folder (sorted by path)
    return out


def _key_order(key: tuple) -> tuple:
    return tuple(-1 if v is None else v for v in key)


def _where(key: tuple) -> str:
    step, rank = key
    return " ".join(p for p in ("" if step is None else f"step {step}", "" if rank is None else f"rank {rank}") if p)


def _folders(key: tuple) -> list:
    step, rank = key
    return [p for p in ("" if step is None else f"step{step}", "" if rank is None else f"rank{rank}") if p]


def _jobs(jobs: Optional[int], tasks: list) -> int:
    from ..parallel import default_jobs

    return max(1, min(default_jobs() if jobs is None else jobs, len(tasks) or 1))


_archives: dict = {}  # a packed location opened (and verified) once per process, closed by close_archives


def _read(location: str, ref: DumpRef) -> tuple:
    """(files, dump) of one dump: a folder location is read in place (no walk of the other ranks' folders)."""
    from .read import read_index

    if not os.path.isdir(location):
        if location not in _archives:
            _archives[location] = open_location(location)[0]
        return _Kept(_archives[location]), read_index(_archives[location], ref)
    files = DumpFiles(location, root=location)
    try:
        return files, read_index(files, ref)
    except BaseException:
        files.close()
        raise


class _Kept:
    """An opened archive handed to a task: the task's close leaves it open for the next rank."""

    def __init__(self, files: DumpFiles):
        self.files = files

    def close(self) -> None:
        pass


def close_archives() -> None:
    """Close the archives this process opened for per-rank work."""
    while _archives:
        _archives.popitem()[1].close()


def _compare_task(task: tuple) -> RankFinding:
    from ...formats.writing import make_folder, write_atomic
    from . import compare, table

    key, base_loc, base_ref, target_loc, target_ref, mode, fuzzy, rtol, out = task
    opened = []
    try:
        for loc, ref in ((base_loc, base_ref), (target_loc, target_ref)):
            opened.append(_read(loc, ref))
        result = compare.compare_dumps(opened[0][1], opened[1][1], mode, fuzzy, rtol)
        if out is not None:
            make_folder(out)
            write_atomic(os.path.join(out, "compare_result.csv"), table.compare_csv(result))
            write_atomic(os.path.join(out, "compare_summary.json"), table.summary_json(result))
    except (InputError, OSError, ValueError) as exc:
        return RankFinding(*key, UNREADABLE, message=str(exc))
    finally:
        for files, _ in opened:
            files.close()
    target = opened[1][1]
    first = result.first
    if first is None:
        return RankFinding(*key, "agree", ops=len(target.ops))
    position, before = _place(target, first.op)
    through = _is_collective(first.op) or (first.kind == "inputs" and before > 0)
    return RankFinding(*key, "diverge", first.op, first.kind, first.reason, position, before, through,
                       len(target.ops), tuple(first.stack))


def _overflow_task(task: tuple) -> RankFinding:
    from .overflow import find_overflow

    key, location, ref = task
    try:
        files, dump = _read(location, ref)
    except (InputError, OSError, ValueError) as exc:
        return RankFinding(*key, UNREADABLE, message=str(exc))
    try:
        report = find_overflow(dump, first_only=True)
    finally:
        files.close()
    first = report.first
    if first is None:
        return RankFinding(*key, "clean", ops=report.ops or 0)
    position, before = _place(dump, first.name)
    kind = "produced" if first.produced_here else "received"
    why = (f"{first.tensor} max={first.max} min={first.min}" +
           ("" if first.produced_here else f"; inf/NaN already in {', '.join(first.inputs)}"))
    through = _is_collective(first.name) or (not first.produced_here and before > 0)
    return RankFinding(*key, "overflow", first.name, kind, why, position, before, through, report.ops or 0,
                       tuple(first.stack_text))


def _place(dump: Dump, name: str) -> tuple:
    """(index of ``name`` in execution order, collectives run before it)."""
    before = 0
    for index, op in enumerate(dump.ops):
        if op.name == name:
            return index, before
        if _is_collective(op.name):
            before += 1
    return -1, before


def _is_collective(name: str) -> bool:
    parts = call_parts(name)
    return parts is not None and parts[0].startswith("Distributed.") and parts[2] == "forward"


def summary_bytes(findings: RunFindings) -> bytes:
    """The whole run's summary as JSON bytes."""
    return (json.dumps(findings.as_dict(), indent=2, default=str) + "\n").encode()
