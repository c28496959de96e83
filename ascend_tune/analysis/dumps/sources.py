"""Where a precision dump's files are: a folder, a single index file, or a verified archive, and the dumps in it.

A *location* holds one or more dumps. Each dump is found by its index file:

- ``dump.json`` for msprobe and ascend_tune's built-in engine (``dump_path/step{N}/rank{R}/dump.json``; msprobe
  writes ``proc{PID}`` instead of ``rank{R}`` when not distributed, 8.x wrote ``rank``);
- ``dump.journal`` for a built-in step whose process died before the step ended (read only when the folder has
  no ``dump.json``);
- a ``*.pkl`` for old ptdbg_ascend (``[step{N}/]ptdbg_dump_{version}/rank{R}/{mode}_dump.pkl``, JSON lines despite
  its name, never unpickled).

The rank is read from the index's folder, the step from the nearest ``step{N}`` folder above it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional

from ...errors import InputError
from ...formats.dump_layout import TENSOR_DIR, is_rank_dir_name, rank_of_dump_dir, step_of_dir
from .archive import VerifiedArchive, is_archive
from .layouts import index_kind, what_dumps

_STEP_DEPTH = 3  # folders above an index searched for its step{N}: rank folder, ptdbg_dump_<version>, step{N}


@dataclass(frozen=True)
class DumpRef:
    """One dump inside a location: its index file and what its path says about step and rank."""

    index: str  # POSIX path of dump.json / dump.journal / *.pkl relative to the location's root
    layout: str  # "msprobe" (also ascend_tune's built-in engine) or "ptdbg"
    step: Optional[int]
    rank: Optional[int]
    location: str = ""  # the folder (or archive) the index path is relative to

    @property
    def folder(self) -> str:
        """The index's folder, relative to the location."""
        return self.index.rpartition("/")[0]

    @property
    def path(self) -> str:
        """The index's folder with the location in front (a real folder unless the location is an archive)."""
        return os.path.join(self.location, *self.folder.split("/")) if self.folder else self.location

    def describe(self) -> str:
        """The folder, or ``.`` for the location itself."""
        return self.folder or "."


class DumpFiles:
    """Read access to the files of a location, by POSIX path relative to its root."""

    def __init__(self, label: str, root: Optional[str] = None, archive: Optional[VerifiedArchive] = None):
        self.label = label
        self.root = root
        self._archive = archive

    @property
    def on_disk(self) -> bool:
        """True for a folder, False for an archive read in place."""
        return self._archive is None

    def names(self) -> list:
        """Every file's path (the tensor folders' contents left out), sorted."""
        if self._archive is not None:
            return self._archive.names()
        out = []
        for dirpath, dirnames, filenames in os.walk(self.root):  # type: ignore[type-var]
            dirnames[:] = sorted(d for d in dirnames if d != TENSOR_DIR)
            rel = os.path.relpath(dirpath, self.root)  # type: ignore[arg-type]
            for name in sorted(filenames):
                out.append(name if rel == "." else f"{rel.replace(os.sep, '/')}/{name}")
        return out

    def read(self, name: str) -> bytes:
        """One file's bytes."""
        if self._archive is not None:
            return self._archive.read(name)
        path = os.path.join(self.root, *name.split("/"))  # type: ignore[arg-type]
        try:
            with open(path, "rb") as fh:
                return fh.read()
        except OSError as exc:
            raise InputError(f"cannot read {path} ({exc.strerror or exc})") from None

    def exists(self, name: str) -> bool:
        """Whether the location holds the file ``name``."""
        if self._archive is not None:
            return name in self._archive.names()
        return os.path.isfile(os.path.join(self.root, *name.split("/")))  # type: ignore[arg-type]

    def close(self) -> None:
        """Close the archive (nothing to do for a folder)."""
        if self._archive is not None:
            self._archive.close()


def open_location(path: str) -> tuple:
    """(DumpFiles, list of DumpRef) for a dump folder, a ``dump.json``, a ptdbg ``.pkl`` or a packed archive."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise InputError(f"{path} does not exist; pass a dump folder, a dump.json, a ptdbg .pkl or an archive")
    if os.path.isdir(path):
        files = DumpFiles(path, root=path)
        refs = find_refs(files.names(), location=path)
    elif is_archive(path):
        files = DumpFiles(path, archive=VerifiedArchive(path))
        refs = find_refs(files.names(), location=path)
    elif index_kind(os.path.basename(path), named=True) is not None:
        folder = os.path.dirname(os.path.abspath(path))
        files = DumpFiles(path, root=folder)
        refs = find_refs([os.path.basename(path)], any_json=True, location=folder)
    else:
        raise InputError(f"{path} is not a dump: pass a dump folder, {what_dumps()} or an archive")
    if not refs:
        files.close()
        raise InputError(
            f"{path} holds no dump (none of {what_dumps()}); "
            "pass the dump_path of the run or a step/rank folder inside it"
        )
    return files, refs


def find_refs(names: list, any_json: bool = False, location: str = "") -> list:
    """The dumps among ``names`` (POSIX paths below ``location``), by step, rank and path.

    ``any_json``: a ``*.json`` of any name counts as a dump.json (a single file the user named).
    """
    refs, kinds, present = [], {}, set()
    above = [p for p in os.path.abspath(location).split(os.sep) if p] if location and os.path.isdir(location) else []
    for name in names:
        folder, _, base = name.rpartition("/")
        present.add((folder, base))
        kind = index_kind(base, named=any_json)
        if kind is None:
            continue
        step, rank = _step_and_rank(above + [p for p in folder.split("/") if p])
        refs.append(DumpRef(name, kind.layout, step, rank, location))
        kinds[name] = kind
    refs = [r for r in refs if not (kinds[r.index].yields_to and (r.folder, kinds[r.index].yields_to) in present)]
    refs.sort(key=lambda r: (-1 if r.step is None else r.step, -1 if r.rank is None else r.rank, r.index))
    return refs


def find_dumps(path: str) -> list:
    """Every dump under ``path`` (a dump root, a ``step<N>`` folder or a rank folder), by step then rank.

    Returns :class:`DumpRef` objects; ``ref.path`` is the rank folder, ``ref.step`` / ``ref.rank`` its numbers.
    """
    path = os.fspath(path)
    if not os.path.isdir(path):
        raise InputError(f"{path!r} is not a folder; pass a dump folder (the dump_path or one of its step<N> folders)")
    return find_refs(DumpFiles(path, root=path).names(), location=path)


def select_dump(refs: list, label: str, step: Optional[int] = None, rank: Optional[int] = None,
                how: str = "--step / --rank") -> DumpRef:
    """The one dump of a location that ``step`` / ``rank`` select (each may be left out when only one fits; a dump
    whose path names no step or rank fits any). ``how`` names the selectors in the error message."""
    chosen = [r for r in refs if step in (None, r.step) or r.step is None]
    chosen = [r for r in chosen if rank in (None, r.rank) or r.rank is None]
    if len(chosen) == 1:
        return chosen[0]
    if not chosen:
        have = ", ".join(r.describe() for r in refs[:6])
        raise InputError(f"{label} has no dump for step={step} rank={rank}; it has: {have}")
    what = "rank folders" if len({r.step for r in chosen}) == 1 else "dumps"
    have = ", ".join(r.describe() for r in chosen[:6]) + (" ..." if len(chosen) > 6 else "")
    raise InputError(f"{label} holds {len(chosen)} {what} ({have}); pick one with {how} or pass its folder")


def _step_and_rank(parts: list) -> tuple:
    """(step, rank) of an index whose folder is ``parts``: the rank folder holds it, a step folder is above."""
    rank = rank_of_dump_dir(parts[-1]) if parts and is_rank_dir_name(parts[-1]) else None
    for part in reversed(parts[-_STEP_DEPTH:]):
        if step_of_dir(part) is not None:
            return step_of_dir(part), rank
    return None, rank
