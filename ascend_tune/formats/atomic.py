"""Files written whole or not at all, and the one fail-soft write path of a monitored run.

- :func:`write_atomic` / :func:`write_json_atomic` / :func:`open_atomic`: a temporary file beside the target, then
  ``os.replace``. One error type for every failure (:class:`~ascend_tune.errors.OutputError`, an ``OSError`` too,
  keeping the OS's ``errno``), and the temporary file is removed whatever went wrong, so a full disk or a vanished
  folder leaves no ``*.tmp<pid>`` behind.
- :class:`Outputs`: what a run writes goes through it (the monitor's logs and summary, every feature's files). An
  ``OSError`` costs that output, never the run: one warning naming the file and the errno, the output written no
  more (nothing is retried when space comes back), and the loss recorded for summary.json's ``outputs_failed``.
"""

from __future__ import annotations

import contextlib
import errno as errnos
import json
import logging
import os
from collections.abc import Iterable, Iterator
from typing import Any, Callable, Optional, Union

from ..errors import OutputError

logger = logging.getLogger("ascend_tune")


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


class Outputs:
    """The outputs of one run, each allowed to fail on its own (see the module docstring).

    An output is named by its file (``log.txt``'s path) or, for one made of many files, by its folder (a dump root,
    a trace folder): the warning names the file that failed. ``with outputs:`` marks a write in progress; work
    handed to :meth:`defer` meanwhile (the SIGTERM handler) runs when the outermost such block ends, so a signal
    never cuts a record or a trace in half.

    Parameters:
        warn: where the one warning per failed output goes (default: the ``ascend_tune`` logger).
    """

    def __init__(self, warn: Optional[Callable[[str], None]] = None):
        self._warn = warn or (lambda message: logger.warning("ascend_tune: %s", message))
        self.failed: dict = {}  # output -> its summary.json entry
        self.busy = 0
        self._deferred: list = []

    def ok(self, output: Union[str, os.PathLike]) -> bool:
        """Whether ``output`` is still written (it has not failed in this run)."""
        return os.fspath(output) not in self.failed

    def fail(self, output: Union[str, os.PathLike], exc: BaseException, path: Optional[str] = None,
             what: Optional[str] = None) -> None:
        """Record that ``output`` failed with ``exc`` (at file ``path``, default the output itself); warn once.

        ``what`` names the output in the warning (e.g. "the precision dump"); the default is its path.
        """
        output = os.fspath(output)
        if output in self.failed:
            return
        meant = getattr(exc, "path", None)  # what an atomic write was writing
        if isinstance(exc, OutputError) and isinstance(exc.__cause__, OSError):
            exc = exc.__cause__  # the OS's own words, not our message around them
        path = path or meant or getattr(exc, "filename", None) or output
        code = getattr(exc, "errno", None)
        name = errnos.errorcode.get(code, "") if isinstance(code, int) else ""
        reason = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
        self.failed[output] = {"output": output, "path": os.fspath(path), "errno": code, "error": name or None,
                               "reason": reason}
        errno_text = f"[Errno {code}] {name}: " if name else ""
        then = f"{what} stops for the rest of the run" if what else "it is not written again in this run"
        self._warn(f"cannot write {path} ({errno_text}{reason}); {then}, training goes on")

    def summary(self) -> list:
        """summary.json's ``outputs_failed``: one entry per output lost (output, path, errno, error, reason)."""
        return list(self.failed.values())

    def write(self, path: Union[str, os.PathLike], data: Union[bytes, str], output: Optional[str] = None) -> bool:
        """:func:`write_atomic` for ``output`` (default: the file itself); False when it failed or had failed."""
        return self._atomic(write_atomic, path, data, output)

    def write_json(self, path: Union[str, os.PathLike], payload: Any, output: Optional[str] = None) -> bool:
        """:func:`write_json_atomic` for ``output`` (default: the file itself); False when it failed or had failed."""
        return self._atomic(write_json_atomic, path, payload, output)

    def _atomic(self, writer: Callable, path: Union[str, os.PathLike], data: Any, output: Optional[str]) -> bool:
        output = os.fspath(output if output is not None else path)
        if output in self.failed:
            return False
        with self:
            try:
                writer(path, data)
            except OSError as exc:
                self.fail(output, exc, os.fspath(path))
                return False
        return True

    # --- a write in progress is never cut short ----------------------------------------------------------------

    def __enter__(self) -> Outputs:
        self.busy += 1
        return self

    def __exit__(self, *exc: Any) -> None:
        self.busy -= 1
        if self._deferred and not self.busy:
            self.run_deferred()

    def defer(self, action: Callable[[], None]) -> bool:
        """Run ``action`` once no write is in progress; False (nothing kept) when none is: run it now yourself."""
        if not self.busy:
            return False
        self._deferred.append(action)
        return True

    def run_deferred(self) -> None:
        """Run what :meth:`defer` kept (the outermost ``with outputs:`` block calls this when it ends)."""
        actions, self._deferred = self._deferred, []
        for action in actions:
            action()


class LineFile:
    """A file that receives whole lines: each :meth:`write` is one ``os.write`` on an ``O_APPEND`` descriptor.

    A killed process leaves whole lines (the OS has every line written before the kill; nothing waits in a Python
    buffer), so a SIGKILL loses at most the line being made. A write the disk cuts short is taken back off the file
    (``ftruncate``) so no torn line stays. Then, with ``outputs``, the file fails soft (:meth:`Outputs.fail`, later
    writes are dropped); without, the ``OSError`` is raised to the caller.

    Parameters:
        path: the file; created, or truncated unless ``append``.
        append: keep what the file holds and add to it (a resumed run).
        outputs: the run's :class:`Outputs` (None: raise).
        output: the output the file belongs to in ``outputs`` (default: the file).
    """

    __slots__ = ("path", "_fd", "_outputs", "_output")

    def __init__(self, path: Union[str, os.PathLike], append: bool = False, outputs: Optional[Outputs] = None,
                 output: Optional[str] = None):
        self.path = os.fspath(path)
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | (0 if append else os.O_TRUNC)
        self._fd: Optional[int] = os.open(self.path, flags, 0o644)
        self._outputs = outputs
        self._output = output or self.path

    def write(self, data: bytes) -> None:
        """Append ``data`` (one or more whole lines) in one system call."""
        fd = self._fd
        if fd is None:
            return
        try:
            written = os.write(fd, data)
            if written != len(data):  # the disk filled inside this line: take the torn part back
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, os.fstat(fd).st_size - written)
                raise OSError(errnos.ENOSPC, os.strerror(errnos.ENOSPC))
        except OSError as exc:
            if self._outputs is None:
                if exc.filename is None:
                    exc.filename = self.path
                raise
            self._fail(exc)

    def close(self) -> None:
        """Close the file; one removed while it was written (its folder deleted) counts as a failed output."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            removed = os.fstat(fd).st_nlink == 0
        except OSError:
            removed = False
        with contextlib.suppress(OSError):
            os.close(fd)
        if removed and self._outputs is not None:
            self._outputs.fail(self._output, OSError(errnos.ENOENT, "the file was deleted while the run wrote it"),
                               self.path)

    def _fail(self, exc: OSError) -> None:
        fd, self._fd = self._fd, None
        with contextlib.suppress(OSError):
            os.close(fd)  # type: ignore[arg-type]
        self._outputs.fail(self._output, exc, self.path)  # type: ignore[union-attr]


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
