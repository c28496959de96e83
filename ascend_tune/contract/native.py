"""C compiled on the user's machine: where it is kept, what the CPU is, and the build that writes it into place.

The package ships no compiled code. Its two pieces of C (a replay's measure, :mod:`..precision.measure_kernel`, and
the step path, :mod:`..runtime.compiled`) are compiled once per machine by the system's C compiler (``$CC``, else
``cc`` / ``gcc``) into :func:`cache_folder`, under names keyed by what they were built from, each written beside
its place and renamed into it (ranks compiling at once each write their own). ``ASCEND_TUNE_NO_COMPILE=1`` keeps
both in Python / torch.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import subprocess
import tempfile
import threading
from typing import Any, Callable


def cache_folder() -> str:
    """Where compiled libraries are kept: ``$ASCEND_TUNE_CACHE``, else ``$XDG_CACHE_HOME/ascend_tune``, else
    ``~/.cache/ascend_tune``."""
    folder = os.environ.get("ASCEND_TUNE_CACHE")
    if not folder:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        folder = os.path.join(base, "ascend_tune")
    return folder


def cpu() -> str:
    """The CPU's model and feature flags (Linux's /proc/cpuinfo, the first processor), empty where unknown: a cache
    shared by hosts of several kinds keeps one library for each."""
    described = []
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                field = line.split(":", 1)[0].strip()
                if field in ("model name", "flags", "Features", "CPU implementer", "CPU part"):
                    described.append(line.strip())
                elif not line.strip() and described:  # the first processor's block is enough
                    break
    except OSError:
        pass
    return "\n".join(described)


def build(path: str, name: str, source: str, tries: tuple, libraries: tuple = ()) -> None:
    """Compile ``source`` (a file ``name`` to the compiler) into ``path`` with the first of ``tries`` (argument
    lists) the compiler takes; OSError when none does or no compiler is found."""
    compiler = shlex.split(os.environ.get("CC", "")) or [shutil.which("cc") or shutil.which("gcc") or ""]
    if not compiler[0]:
        raise OSError("no C compiler (cc, gcc or $CC)")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with tempfile.TemporaryDirectory() as work:
        written = os.path.join(work, name)
        with open(written, "w") as fh:
            fh.write(source)
        built = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
        try:
            for flags in tries:  # e.g. a compiler that knows no -march=native builds for the machine
                done = subprocess.run([*compiler, *flags, "-o", built, written, *libraries], capture_output=True,
                                      text=True, timeout=120, stdin=subprocess.DEVNULL)
                if done.returncode == 0:
                    break
            else:
                raise OSError(f"{' '.join(compiler)} failed: {done.stderr.strip()[-300:]}")
            os.replace(built, path)
        finally:
            if os.path.exists(built):
                os.remove(built)


def load_built(stem: str, suffix: str, name: str, source: str, tries: tuple, key: tuple, load: Callable[[str], Any],
               libraries: tuple = ()) -> Any:
    """``load(path)`` of the library built from ``source``, kept in :func:`cache_folder` as ``<stem>-<hash of the
    source and key><suffix>``; built with :func:`build` where it is not there yet, or where the one there does not
    load (a file cut short)."""
    digest = hashlib.sha256("\0".join((source, *key)).encode()).hexdigest()[:16]
    path = os.path.join(cache_folder(), f"{stem}-{digest}{suffix}")
    if os.path.exists(path):
        try:
            return load(path)
        except (OSError, ImportError):  # built again below
            pass
    build(path, name, source, tries, libraries)
    return load(path)
