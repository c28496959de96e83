"""What the launcher tests share: run ``ascend-tune run`` as a user would, and read what it wrote."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import ascend_tune

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# the public scripts run unmodified, read from a git checkout of their repository at a pinned commit
# (tests/test_launch_real.py says which): (repository, commit, files)
PUBLIC = {
    "nanogpt": ("karpathy/nanoGPT", "3adf61e154c3fe3fca428ad6bc3818b27a3b8291",
                ("train.py", "model.py", "configurator.py")),
    "dcgan": ("pytorch/examples", "77f55b912142e11fcfdf5b530231fb9c52f181e8", ("dcgan/main.py",)),
}


# the package under test: this checkout's (editable) or an installed wheel's (make test-wheel), which must work
# on its own, with nothing of the checkout on the path
CHECKOUT = os.path.dirname(os.path.dirname(os.path.abspath(ascend_tune.__file__))) == ROOT


def env(**extra: str) -> dict:
    """The environment of a launched command: the package under test importable (the checkout, when it is the one
    tested), one thread, no rank of the test's own."""
    out = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT") and not k.startswith("ASCEND_TUNE_")}
    path = (ROOT,) if CHECKOUT else ()
    out.update(PYTHONPATH=os.pathsep.join(p for p in (*path, out.get("PYTHONPATH", "")) if p), OMP_NUM_THREADS="1")
    out.update(extra)
    return out


def launch(options: list, command: list, cwd, timeout: int = 600, **extra: str) -> subprocess.CompletedProcess:
    """``python -m ascend_tune run OPTIONS -- COMMAND`` in ``cwd``."""
    return subprocess.run([sys.executable, "-m", "ascend_tune", "run", *options, "--", *command], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout, env=env(**extra))


def bare(command: list, cwd, timeout: int = 600, **extra: str) -> subprocess.CompletedProcess:
    """``COMMAND`` alone, in the same environment."""
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env(**extra))


def mirror(repo: str) -> str:
    """The git directory of ``repo`` (``owner/name``) under ``$ASCEND_TUNE_MIRRORS`` (default /work/.mirror)."""
    base = os.environ.get("ASCEND_TUNE_MIRRORS", "/work/.mirror")
    return os.path.join(base, repo.replace("/", "+"), "repo")


def git(git_dir: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", f"--git-dir={git_dir}", *args], capture_output=True, timeout=60)


def copy_thirdparty(name: str, dest) -> str:
    """The public files of ``name`` (a key of PUBLIC) written unmodified into ``dest/<name>``, from the pinned commit
    of their repository's git checkout (its HEAD when that commit is not there); skips the test when no checkout is
    on this machine. Returns the folder."""
    repo, commit, files = PUBLIC[name]
    git_dir = mirror(repo)
    if not os.path.isdir(git_dir) or git(git_dir, "rev-parse", "--verify", "HEAD").returncode != 0:
        pytest.skip(f"the public {repo} checkout is not on this machine: fetch {repo} into $ASCEND_TUNE_MIRRORS "
                     f"(a git directory at {git_dir})")
    if git(git_dir, "cat-file", "-e", f"{commit}^{{commit}}").returncode != 0:
        commit = "HEAD"
    path = os.path.join(str(dest), name)
    os.makedirs(path)
    for file in files:
        shown = git(git_dir, "show", f"{commit}:{file}")
        assert shown.returncode == 0, f"{repo} at {commit} has no {file}: {shown.stderr.decode()[-500:]}"
        with open(os.path.join(path, os.path.basename(file)), "wb") as fh:
            fh.write(shown.stdout)
    return path


def our_lines(stderr: str) -> list:
    """The launcher's own messages in a stderr."""
    return [line for line in stderr.splitlines() if line.startswith("ascend-tune run: ")]
