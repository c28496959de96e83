"""What the launcher tests share: run ``ascend-tune run`` as a user would, and read what it wrote."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
THIRDPARTY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "thirdparty")


def env(**extra: str) -> dict:
    """The environment of a launched command: this checkout importable, one thread, no rank of the test's own."""
    out = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT") and not k.startswith("ASCEND_TUNE_")}
    out.update(PYTHONPATH=os.pathsep.join(p for p in (ROOT, out.get("PYTHONPATH", "")) if p), OMP_NUM_THREADS="1")
    out.update(extra)
    return out


def launch(options: list, command: list, cwd, timeout: int = 600, **extra: str) -> subprocess.CompletedProcess:
    """``python -m ascend_tune run OPTIONS -- COMMAND`` in ``cwd``."""
    return subprocess.run([sys.executable, "-m", "ascend_tune", "run", *options, "--", *command], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout, env=env(**extra))


def bare(command: list, cwd, timeout: int = 600, **extra: str) -> subprocess.CompletedProcess:
    """``COMMAND`` alone, in the same environment."""
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env(**extra))


def copy_thirdparty(name: str, dest) -> str:
    """A fresh copy of ``tests/thirdparty/<name>`` under ``dest``; returns its path."""
    path = os.path.join(str(dest), name)
    shutil.copytree(os.path.join(THIRDPARTY, name), path)
    return path


def our_lines(stderr: str) -> list:
    """The launcher's own messages in a stderr."""
    return [line for line in stderr.splitlines() if line.startswith("ascend-tune run: ")]
