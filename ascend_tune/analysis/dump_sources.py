"""Where a precision dump's files are: a folder, a single index file, or a verified archive.

A *location* holds one or more dumps. Each dump is found by its index file: ``dump.json`` for msprobe and
ascend_tune's built-in engine (``dump_path/step{N}/rank{R}/dump.json``; msprobe writes ``proc{PID}`` instead of
``rank{R}`` when not distributed, 8.x wrote ``rank``), or a ``*.pkl`` for old ptdbg_ascend
(``[step{N}/]ptdbg_dump_{version}/rank{R}/{mode}_dump.pkl``, JSON lines despite its name, never unpickled).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Optional

from ..errors import InputError
from .archive import VerifiedArchive, is_archive

INDEX_NAMES = ("dump.json",)
_STEP = re.compile(r"^step(\d+)$")
_RANK = re.compile(r"^rank(\d+)$")
_SKIP_DIRS = ("dump_tensor_data",)


@dataclass(frozen=True)
class DumpRef:
    """One dump inside a location: its index file and what its path says about step and rank."""

    index: str  # POSIX path of dump.json / *.pkl relative to the location's root
    layout: str  # "msprobe" (also ascend_tune's built-in engine) or "ptdbg"
    step: Optional[int]
    rank: Optional[int]

    @property
    def folder(self) -> str:
        return self.index.rpartition("/")[0]

    def describe(self) -> str:
        return self.folder or "."


class DumpFiles:
    """Read access to the files of a location, by POSIX path relative to its root."""

    def __init__(self, label: str, root: Optional[str] = None, archive: Optional[VerifiedArchive] = None):
        self.label = label
        self._root = root
        self._archive = archive

    def names(self) -> list:
        if self._archive is not None:
            return self._archive.names()
        out = []
        for dirpath, dirnames, filenames in os.walk(self._root):  # type: ignore[type-var]
            dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS)
            rel = os.path.relpath(dirpath, self._root)  # type: ignore[arg-type]
            for name in sorted(filenames):
                out.append(name if rel == "." else f"{rel.replace(os.sep, '/')}/{name}")
        return out

    def read(self, name: str) -> bytes:
        if self._archive is not None:
            return self._archive.read(name)
        path = os.path.join(self._root, *name.split("/"))  # type: ignore[arg-type]
        try:
            with open(path, "rb") as fh:
                return fh.read()
        except OSError as exc:
            raise InputError(f"cannot read {path} ({exc.strerror or exc})") from None

    def exists(self, name: str) -> bool:
        if self._archive is not None:
            return name in self._archive.names()
        return os.path.isfile(os.path.join(self._root, *name.split("/")))  # type: ignore[arg-type]

    def close(self) -> None:
        if self._archive is not None:
            self._archive.close()


def open_location(path: str) -> tuple:
    """(DumpFiles, list of DumpRef) for a dump folder, a ``dump.json``, a ptdbg ``.pkl`` or a packed archive."""
    if not os.path.exists(path):
        raise InputError(f"{path} does not exist; pass a dump folder, a dump.json, a ptdbg .pkl or an archive")
    if os.path.isdir(path):
        files = DumpFiles(path, root=path)
        refs = find_dumps(files.names())
    elif is_archive(path):
        files = DumpFiles(path, archive=VerifiedArchive(path))
        refs = find_dumps(files.names())
    elif path.endswith(".json") or path.endswith(".pkl"):
        folder = os.path.dirname(os.path.abspath(path))
        files = DumpFiles(path, root=folder)
        refs = find_dumps([os.path.basename(path)], any_json=True)
    else:
        raise InputError(f"{path} is not a dump: pass a dump folder, a dump.json, a ptdbg .pkl or an archive")
    if not refs:
        files.close()
        raise InputError(
            f"{path} holds no dump (no dump.json from msprobe / ascend_tune, no ptdbg .pkl); "
            "pass the dump_path of the run or a step/rank folder inside it"
        )
    return files, refs


def find_dumps(names: list, any_json: bool = False) -> list:
    """The dumps among ``names`` (POSIX paths): their index files, with step and rank read from the path."""
    refs = []
    for name in names:
        base = name.rpartition("/")[2]
        if base in INDEX_NAMES or (any_json and base.endswith(".json")):
            layout = "msprobe"
        elif base.endswith(".pkl"):
            layout = "ptdbg"
        else:
            continue
        step = rank = None
        for part in name.split("/")[:-1]:
            if _STEP.match(part):
                step = int(_STEP.match(part).group(1))  # type: ignore[union-attr]
            elif _RANK.match(part):
                rank = int(_RANK.match(part).group(1))  # type: ignore[union-attr]
        refs.append(DumpRef(name, layout, step, rank))
    return refs


def select_dump(refs: list, label: str, step: Optional[int] = None, rank: Optional[int] = None) -> DumpRef:
    """The one dump of a location that ``step`` / ``rank`` select (each may be left out when only one fits; a dump
    whose path names no step or rank fits any)."""
    chosen = [r for r in refs if step in (None, r.step) or r.step is None]
    chosen = [r for r in chosen if rank in (None, r.rank) or r.rank is None]
    if len(chosen) == 1:
        return chosen[0]
    if not chosen:
        have = ", ".join(r.describe() for r in refs[:6])
        raise InputError(f"{label} has no dump for step={step} rank={rank}; it has: {have}")
    have = ", ".join(r.describe() for r in chosen[:6]) + (" ..." if len(chosen) > 6 else "")
    raise InputError(
        f"{label} holds {len(chosen)} dumps ({have}); pick one with --step / --rank or pass its folder"
    )
