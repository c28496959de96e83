"""Install ascend_tune and its extras into the running venv without ever replacing the torch already there.

Run by ``make install`` after torch itself (``TORCH_SPEC``)::

    .venv/bin/python tools/install_extras.py test,plot,msprobe,msprof,tensorboard

``make test-wheel`` installs a built wheel instead of the checkout (not editable, as a user installs it)::

    .venv-wheel/bin/python tools/install_extras.py --wheel dist/ascend_tune-0.1.0-py3-none-any.whl test

Every pip call gets a constraints file that pins the installed torch, so no extra can pull another torch (a CUDA
build, or a newer release); torch wheels before 2.3 were built against numpy 1, so with those numpy is pinned below
2 too. All extras go in one pip call; when that cannot resolve next to this torch, each extra is tried on its own
and one that needs a newer torch is skipped with a message (its tests skip, naming why). Exit status 1 when the
package itself cannot be installed or torch changed anyway.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from importlib import metadata

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# extra -> packages installed with --no-deps after it: their wheels require what they never import (jupyterlab);
# the extra itself lists what they do import
NO_DEPS = {"hta": ("holistictraceanalysis==0.5.0",)}


def torch_version() -> str:
    """The installed torch's version, read from its metadata (torch itself is not imported)."""
    return metadata.version("torch")


def constraints(version: str) -> list:
    """The lines of the constraints file for this torch."""
    lines = [f"torch=={version}"]
    major_minor = tuple(int(p) for p in version.split("+")[0].split(".")[:2])
    if major_minor < (2, 3):
        lines.append("numpy<2")  # torch 2.3 is the first built against numpy 2 (torch.from_numpy fails otherwise)
    return lines


def pip_install(spec: str, constraints_file: str, editable: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "-c", constraints_file, *(["-e"] if editable else []), spec],
        cwd=ROOT, capture_output=True, text=True,
    )


def _reason(result: subprocess.CompletedProcess) -> str:
    lines = [ln.strip() for ln in (result.stderr + result.stdout).splitlines() if ln.strip().startswith("ERROR")]
    return lines[0] if lines else f"pip exited {result.returncode}"


def main(argv: list) -> int:
    package, editable = ".", True
    if argv[:1] == ["--wheel"]:
        package, editable, argv = os.path.abspath(argv[1]), False, argv[2:]
    extras = [e for e in (argv[0] if argv else "").split(",") if e]
    before = torch_version()
    with tempfile.NamedTemporaryFile("w", suffix=".txt", prefix="ascend_tune-constraints-", delete=False) as fh:
        fh.write("\n".join(constraints(before)) + "\n")
        pins = fh.name
    try:
        result = pip_install(f"{package}[{','.join(extras)}]" if extras else package, pins, editable)
        if result.returncode != 0:
            sys.stderr.write(result.stdout + result.stderr)
            print(f"ascend_tune: the extras [{','.join(extras)}] do not install together next to torch {before}; "
                  "trying each on its own", file=sys.stderr)
            core = pip_install(package, pins, editable)
            if core.returncode != 0:
                sys.stderr.write(core.stdout + core.stderr)
                return 1
            for extra in extras:
                one = pip_install(f"{package}[{extra}]", pins, editable)
                if one.returncode != 0:
                    print(f"ascend_tune: skipping the '{extra}' extra: it cannot be installed next to torch {before} "
                          f"({_reason(one)}); the tests that need it skip", file=sys.stderr)
        for extra in extras:
            for spec in NO_DEPS.get(extra, ()):
                one = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", spec],
                                     cwd=ROOT, capture_output=True, text=True)
                if one.returncode != 0:
                    print(f"ascend_tune: skipping {spec} of the '{extra}' extra ({_reason(one)})", file=sys.stderr)
    finally:
        os.unlink(pins)
    after = torch_version()
    if after != before:
        print(f"ascend_tune: torch changed from {before} to {after} during the install", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
