"""SIGTERM during the block: write what the run has, then let the signal do what it would have done.

torchrun, Slurm and Kubernetes send SIGTERM before they kill, and Python's default action ends the process without
running ``__exit__`` or ``finally``. For the block's duration, in the main thread, :class:`SigtermHandler` is the
SIGTERM handler: it closes the block as an exception would (the pending log lines, the profiler cycle, the dump,
``summary.json`` with ``interrupted_by: "SIGTERM"``, every patch undone), restores the handler that was there
before, and hands it the signal: a Python handler is called, the default action is taken again (the process dies
of SIGTERM, as it would have). A signal that arrives while the monitor writes waits until the write is whole
(:meth:`~ascend_tune.contract.outputs.Outputs.defer`). An ignored SIGTERM (``SIG_IGN``) or one a C library handles
is left alone. A process forked meanwhile (a DataLoader worker, which the loader ends with SIGTERM when it does
not stop in time) inherits the handler but not the run: there the signal goes straight on.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from typing import Any, Callable

from ..contract.outputs import Outputs


class SigtermHandler:
    """The block's SIGTERM handler (see the module docstring).

    Parameters:
        close: closes the block with ``interrupted_by="SIGTERM"``; never raises.
        outputs: the run's outputs, whose writes in progress the handler waits for.
    """

    def __init__(self, close: Callable[[], None], outputs: Outputs):
        self._close = close
        self._outputs = outputs
        self._previous: Any = signal.SIG_DFL  # what the signal would have done without us
        self._installed = False
        self._pid = os.getpid()

    def install(self, stack: contextlib.ExitStack) -> bool:
        """Become the SIGTERM handler until ``stack`` closes; False where that cannot be (not the main thread, a
        handler set outside Python, SIGTERM ignored)."""
        if threading.current_thread() is not threading.main_thread():
            return False
        previous = signal.getsignal(signal.SIGTERM)
        if previous is None or previous == signal.SIG_IGN:
            return False
        self._previous = previous
        signal.signal(signal.SIGTERM, self._on_signal)
        self._installed = True
        stack.callback(self._restore)
        return True

    def _on_signal(self, signum: int, frame: Any) -> None:
        if os.getpid() == self._pid:  # not in a forked child, whose copy of the run is not its to close
            if self._outputs.defer(lambda: self._on_signal(signum, frame)):
                return  # a record or trace is being written: it ends first, then this runs
            self._close()  # closes the block's stack, which restores the previous handler
        self._restore()
        previous = self._previous
        if callable(previous):
            previous(signum, frame)
        else:  # SIG_DFL: the default action, now that the run's outputs are written
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)

    def _restore(self) -> None:
        if self._installed and signal.getsignal(signal.SIGTERM) == self._on_signal:
            signal.signal(signal.SIGTERM, self._previous)
        self._installed = False
