"""Where the verdict tools write: files that never overwrite a user's file silently, written whole or not at all."""

from __future__ import annotations

import os
from collections.abc import Iterable

from ..errors import OutputError


def refuse_existing(paths: Iterable, force: bool) -> None:
    """Raise unless every path is free (or ``force`` allows replacing what is there)."""
    taken = [p for p in paths if os.path.lexists(p)]
    if taken and not force:
        shown = ", ".join(taken[:3]) + (" ..." if len(taken) > 3 else "")
        raise OutputError(f"{shown} already exist(s); choose another output or pass --force to replace")
    for p in taken:
        if os.path.isdir(p) and not os.path.islink(p):
            raise OutputError(f"{p} is a folder; choose another output path")


def make_folder(path: str) -> None:
    """Create an output folder (and its parents) or say why it cannot be."""
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"cannot create {path} ({exc.strerror or exc}); pass a writable folder") from None
    if not os.path.isdir(path):
        raise OutputError(f"{path} exists and is not a folder; pass a folder for the outputs")


def write_atomic(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file beside it, so a reader never sees half a file."""
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except OSError as exc:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise OutputError(f"cannot write {path} ({exc.strerror or exc}); pass a writable output") from None
