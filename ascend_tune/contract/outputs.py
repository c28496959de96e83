"""The one fail-soft write path of a monitored run: :class:`Outputs`, and :class:`LineFile` for files of lines.

What a run writes goes through :class:`Outputs` (the monitor's logs and summary, every feature's files). An
``OSError`` costs that output, never the run: one warning naming the file and the errno, the output written no more
(nothing is retried when space comes back), and the loss recorded for summary.json's ``outputs_failed``. A write in
progress (``with outputs:``) holds back a SIGTERM's close (:meth:`Outputs.defer`) until it is whole.

Whole files are written atomically (:mod:`~ascend_tune.formats.writing`); a file of lines is a :class:`LineFile`,
one ``os.write`` per line.
"""

from __future__ import annotations

import contextlib
import errno as errnos
import logging
import os
from typing import Any, Callable, Optional, Union

from ..errors import OutputError
from ..formats.writing import write_atomic, write_json_atomic

logger = logging.getLogger("ascend_tune")


class Outputs:
    """The outputs of one run, each allowed to fail on its own (see the module docstring).

    An output is named by its file (``log.txt``'s path) or, for one made of many files, by its folder (a dump root,
    a trace folder): the warning names the file that failed. ``with outputs:`` marks a write in progress; work
    handed to :meth:`defer` meanwhile (the SIGTERM handler) runs when the outermost such block ends, so a signal
    never cuts a record or a trace in half.

    Parameters:
        warn: where the one warning per failed output goes (default: the ``ascend_tune`` logger).
    """

    __slots__ = ("_warn", "failed", "busy", "_deferred")  # slots: the step path reads ``busy`` where it lies

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
