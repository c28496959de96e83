"""Fake ``ptdbg_ascend`` (v4.x, the guide's debugger; never on PyPI) for CPU-only tests.

Same import path and signatures as the real ``ptdbg_ascend.debugger.precision_debugger.PrecisionDebugger`` and
``DebuggerConfig`` (Ascend/att ``debug/accuracy_tools/ptdbg_ascend``): a process singleton with
``configure_hook(...)`` bound to the hook name, ``start`` / ``stop`` / ``step`` class methods, and ``start()``
raising ``Exception("ptdbg: exit after iteration N")`` once its step counter passes the last selected step, as the
real one does. It hooks nothing; ``stop()`` of a dumped step writes the real layout's (empty) ``.pkl`` file
``<dump_path>/step<N>/ptdbg_dump_v4.0/rank<R>/<mode>_dump.pkl``. Every call is appended to :data:`CALLS` so tests
can check how a backend drove it; :func:`reset` forgets the singleton and the calls.
"""

from .debugger.precision_debugger import CALLS, PrecisionDebugger, reset

__version__ = "4.0"


def seed_all(seed: int = 1234, mode: bool = False) -> None:
    """The real helper seeds python, numpy and torch; the fake only records the call."""
    CALLS.append(("seed_all", {"seed": seed, "mode": mode}))


__all__ = ["CALLS", "PrecisionDebugger", "reset", "seed_all"]
