"""Whose work a torch call is: the monitor's own (``internal()``, never recorded), or the user's, made through
a recorder that runs it on their behalf (``on_behalf``, ``user_caller``: the frame that made the call)."""

from __future__ import annotations

import threading
from typing import Any, Callable

# this thread's marks: ``internal``, the depth of internal() blocks (the backward patch reads it inline: it runs on
# every backward, where a call to in_internal() costs more than the read)
THREAD_MARKS = threading.local()


class _Internal:
    # a plain class, not @contextmanager: it runs on every backward, where a generator costs microseconds
    __slots__ = ()

    def __enter__(self) -> None:
        THREAD_MARKS.internal = getattr(THREAD_MARKS, "internal", 0) + 1

    def __exit__(self, *exc: Any) -> None:
        THREAD_MARKS.internal -= 1


INTERNAL = _Internal()
"""``with INTERNAL:`` is ``with internal():`` without the call (the step log's path, once a log line)."""


def internal() -> _Internal:
    """Mark tensor work done by ascend_tune itself (loss accumulation, statistics) so no capture records it."""
    return INTERNAL


def in_internal() -> bool:
    """True while ascend_tune's own tensor work runs on this thread."""
    return getattr(THREAD_MARKS, "internal", 0) > 0


# the code objects of functions that make a torch call on the user's behalf (a recorder's call_api); a function mode
# beneath such a recorder sees that function as the call's maker, and looks past it to the user's frame
_ON_BEHALF: set = set()


def on_behalf(fn: Callable) -> Callable:
    """Mark ``fn`` (a recorder's ``call_api``) as running the torch calls it receives for the code that made them:
    :func:`user_caller` looks past its frames. Recorders stack (a statistics dump beside a replay, the shape
    detector beside a dump), so the lower one would otherwise name the upper one's frame as the caller."""
    _ON_BEHALF.add(fn.__code__)
    return fn


def user_caller(frame: Any) -> Any:
    """``frame``, or the first frame above it that is not an :func:`on_behalf` function's: the call's maker."""
    while frame is not None and frame.f_code in _ON_BEHALF:
        frame = frame.f_back
    return frame
