"""Per-rank work in parallel worker processes: the one pool every multi-rank verdict runs its ranks on.

Each task reads only its own rank's files and returns a small summary (a frozen dataclass), so a worker holds one
rank's data at a time and the cross-rank step reads summaries, never the dumps or traces. ``jobs`` = 1 (or a single
task) runs in this process; more start a :class:`~concurrent.futures.ProcessPoolExecutor` in ``forkserver`` mode
where the platform has it, else ``spawn``: never ``fork``, which would copy a process that may hold torch's threads.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor
from typing import Callable, Optional


def default_jobs() -> int:
    """The CPU count this process may use (``-j``'s default)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # macOS, Windows
        return max(1, os.cpu_count() or 1)


def map_ranks(work: Callable, tasks: Iterable, jobs: Optional[int] = None) -> list:
    """``[work(task) for task in tasks]``, in order, on up to ``jobs`` worker processes (None: the CPU count).

    ``work`` must be a module-level function and the tasks and results picklable.
    """
    tasks = list(tasks)
    jobs = default_jobs() if jobs is None else jobs
    workers = min(max(1, jobs), len(tasks))
    if workers <= 1:
        return [work(task) for task in tasks]
    methods = multiprocessing.get_all_start_methods()
    context = multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")
    with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        return list(pool.map(work, tasks))
