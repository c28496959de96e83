"""Run by every Python process that ``ascend-tune run`` starts (this folder is first on its ``PYTHONPATH``).

It runs the ``sitecustomize`` module it hides (the next one on ``sys.path``), then lets :mod:`ascend_tune.launch
.process` wait for a training loop. Whatever fails here is said once on stderr; the process itself goes on.
"""

import importlib.machinery
import importlib.util
import os
import sys


def _chain() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    path = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module  # the hidden one is the process's sitecustomize, as it would have been
    spec.loader.exec_module(module)


def _install() -> None:
    if not os.environ.get("ASCEND_TUNE_RUN"):
        return
    try:
        from ascend_tune.launch import process
    except ImportError:  # another interpreter than the launcher's: reach the launcher's copy, last on the path
        home = os.environ.get("ASCEND_TUNE_RUN_HOME", "")
        if not home:
            return
        sys.path.append(home)
        from ascend_tune.launch import process
    process.install()


try:
    _chain()
finally:
    try:
        _install()
    except Exception as exc:  # never the process's end: it runs unmonitored
        print(f"ascend-tune run: not monitoring this process ({type(exc).__name__}: {exc})", file=sys.stderr)
