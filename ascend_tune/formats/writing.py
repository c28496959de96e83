"""Files written whole or not at all: a temporary file beside the target, then ``os.replace``.

- :func:`write_atomic` / :func:`write_json_atomic` / :func:`open_atomic`: one error type for every failure
  (:class:`~ascend_tune.errors.OutputError`, an ``OSError`` too, keeping the OS's ``errno``), and the temporary file
  is removed whatever went wrong, so a full disk or a vanished folder leaves no ``*.tmp<pid>`` behind.
- :func:`make_folder` / :func:`make_below` / :func:`refuse_existing`: the folders and the refusals around them.

A monitored run writes through :class:`ascend_tune.contract.outputs.Outputs`, which turns these errors into a lost
output.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterable, Iterator
from typing import Any, Union

from ..errors import OutputError


def write_atomic(path: Union[str, os.PathLike], data: Union[bytes, str]) -> None:
    """Write ``data`` (bytes, or text as UTF-8) to ``path`` through a temporary file beside it.

    Raises :class:`OutputError` (with the OS reason) when the file cannot be written; nothing is left behind.
    """
    payload = data.encode("utf-8") if isinstance(data, str) else data
    with open_atomic(path) as fh:
        fh.write(payload)


@contextlib.contextmanager
def open_atomic(path: Union[str, os.PathLike]) -> Iterator[Any]:
    """``with open_atomic(path) as fh``: a binary file that replaces ``path`` when the block ends without error.

    For writers that stream (an archive); the same guarantees as :func:`write_atomic`: on any failure the
    temporary file is removed and ``path`` is untouched; an ``OSError`` becomes :class:`OutputError`.
    """
    path = os.fspath(path)
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with open(tmp, "wb") as fh:
            yield fh
        os.replace(tmp, path)
    except OSError as exc:
        _remove_quietly(tmp)
        if isinstance(exc, OutputError):
            raise
        error = OutputError(f"cannot write {path} ({exc.strerror or exc}); pass a writable output")
        error.errno = exc.errno  # the OS's reason travels; str() stays the message above
        error.path = path  # type: ignore[attr-defined]  # the file meant, not its temporary name
        raise error from exc
    except BaseException:
        _remove_quietly(tmp)
        raise


def write_json_atomic(path: Union[str, os.PathLike], payload: Any) -> None:
    """Write ``payload`` as JSON to ``path`` atomically (see :func:`write_atomic`).

    One line per key of the top object, and per entry of a ``data`` object (dump.json): readable and greppable,
    and each line is encoded by json's C encoder (``json.dump`` with ``indent`` runs the pure-Python one, which
    costs more than the step it describes). Non-finite numbers are written as bare ``NaN`` / ``Infinity``, as
    msprobe writes them (Python's json reads them back).
    """
    text = _lines(payload) if isinstance(payload, dict) else _encode(payload)
    write_atomic(path, text + "\n")


def make_below(root: Union[str, os.PathLike], *parts: str) -> str:
    """Create ``root/part/...`` one level at a time below an existing ``root`` and return it; ``root`` itself is
    never created, so a run folder deleted under a running job stays deleted (``FileNotFoundError``)."""
    path = os.fspath(root)
    for part in parts:
        path = os.path.join(path, part)
        with contextlib.suppress(FileExistsError):
            os.mkdir(path)
    return path


def make_folder(path: Union[str, os.PathLike]) -> None:
    """Create an output folder (and its parents) or raise :class:`OutputError` saying why it cannot be."""
    path = os.fspath(path)
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"cannot create {path} ({exc.strerror or exc}); pass a writable folder") from None
    if not os.path.isdir(path):
        raise OutputError(f"{path} exists and is not a folder; pass a folder for the outputs")


def refuse_existing(paths: Iterable, force: bool) -> None:
    """Raise unless every path is free (or ``force`` allows replacing what is there); folders are never replaced."""
    taken = [p for p in paths if os.path.lexists(p)]
    if taken and not force:
        shown = ", ".join(taken[:3]) + (" ..." if len(taken) > 3 else "")
        raise OutputError(f"{shown} already exist(s); choose another output or pass --force to replace")
    for p in taken:
        if os.path.isdir(p) and not os.path.islink(p):
            raise OutputError(f"{p} is a folder; choose another output path")


def _remove_quietly(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass


def _encode(value: Any) -> str:
    return json.dumps(value, allow_nan=True, default=str)


def _lines(obj: dict) -> str:
    if not obj:
        return "{}"
    parts = []
    for key, value in obj.items():
        if key == "data" and isinstance(value, dict) and value:
            inner = ",\n".join(f"  {_encode(k)}: {_encode(v)}" for k, v in value.items())
            parts.append(f" {_encode(key)}: {{\n{inner}\n }}")
        else:
            parts.append(f" {_encode(key)}: {_encode(value)}")
    return "{\n" + ",\n".join(parts) + "\n}"
