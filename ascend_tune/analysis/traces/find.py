"""Where profiler traces are: the one set of file patterns every command searches for.

Two layouts, at any depth under a folder (so ``rank{R}/`` folders and torch_npu's
``*_ascend_pt/ASCEND_PROFILER_OUTPUT/`` folders are found alike):
- torch.profiler's ``tensorboard_trace_handler`` files, ``*.pt.trace.json`` or ``*.pt.trace.json.gz``;
- torch_npu's ``trace_view.json`` (in ``<run>_ascend_pt/ASCEND_PROFILER_OUTPUT/``).
The numeric-``ts`` copies ``ascend-tune trace`` writes (``*.perfetto.json``) match neither, so a second search
does not find them.
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Sequence
from typing import Optional, Union

from ...errors import InputError
from ...formats.run_dir import rank_of_dir

TORCH_PATTERNS = ("*.pt.trace.json", "*.pt.trace.json.gz")
NPU_TRACE_NAME = "trace_view.json"
TRACE_PATTERNS = (*TORCH_PATTERNS, NPU_TRACE_NAME)
NPU_OUTPUT_DIR = "ASCEND_PROFILER_OUTPUT"
ASCEND_PT_SUFFIX = "_ascend_pt"

PathLike = Union[str, os.PathLike]


def is_trace_name(name: str) -> bool:
    """Whether a file name is one of :data:`TRACE_PATTERNS`."""
    return any(fnmatch.fnmatch(name, pattern) for pattern in TRACE_PATTERNS)


def find_traces(paths_or_dir: Union[PathLike, Sequence[PathLike]]) -> tuple:
    """The trace files named by a file, a folder (searched at any depth) or a list of those; sorted, no repeats.

    paths_or_dir: a trace file (taken whatever its name), a folder, or a sequence of both. A folder without
        traces adds nothing (the caller says what an empty answer means); a path that does not exist raises
        ``InputError``.
    """
    if isinstance(paths_or_dir, (str, os.PathLike)):
        paths_or_dir = [paths_or_dir]
    found: list = []
    for entry in paths_or_dir:
        path = os.fspath(entry)
        if os.path.isfile(path):
            found.append(path)
        elif os.path.isdir(path):
            found.extend(_search(path))
        else:
            raise InputError(
                f"{path}: no such file or folder; pass a trace file or a profile folder (e.g. exp/train/profile)"
            )
    return tuple(dict.fromkeys(found))


def _search(folder: str) -> list:
    matches = []
    for root, dirs, files in os.walk(folder):
        dirs.sort()
        matches.extend(os.path.join(root, name) for name in files if is_trace_name(name))
    return sorted(matches)


def ascend_pt_folder(trace_path: PathLike) -> Optional[str]:
    """The ``*_ascend_pt`` folder of a torch_npu ``.../ASCEND_PROFILER_OUTPUT/<trace>``, else None."""
    parent = os.path.dirname(os.path.abspath(os.fspath(trace_path)))
    folder = os.path.dirname(parent)
    if os.path.basename(parent) == NPU_OUTPUT_DIR and folder.endswith(ASCEND_PT_SUFFIX):
        return folder
    return None


_FILE_RANK = re.compile(r"^rank(\d+)[_.]")  # rank0_host_1234.pt.trace.json: the profiler's own file name
_NPU_INFO = re.compile(r"^profiler_info_(\d+)\.json$")


def trace_rank(path: PathLike, header: Optional[dict] = None, within: Optional[PathLike] = None) -> Optional[int]:
    """THE rank a trace belongs to (``ascend-tune trace``, ``compare-trace --rank`` and ``perf`` all ask here): its
    ``distributedInfo`` (when its ``header`` was read), a ``rank{R}`` folder above the file (below ``within`` only,
    when given: perf's run folder, where every rank's traces sit), a ``rank{R}_`` file name, torch_npu's
    ``profiler_info_{R}.json`` beside its ``*_ascend_pt`` folder; None when none says."""
    info = (header or {}).get("distributedInfo")
    if isinstance(info, dict) and isinstance(info.get("rank"), int):
        return info["rank"]
    folder = os.path.dirname(os.path.abspath(path))
    if within is not None:
        base = os.path.abspath(within)
        base = base if os.path.isdir(base) else os.path.dirname(base)
        folder = os.path.relpath(folder, base) if folder.startswith(base) else folder
    for part in reversed(folder.split(os.sep)):
        rank = rank_of_dir(part)
        if rank is not None:
            return rank
    match = _FILE_RANK.match(os.path.basename(path))
    if match:
        return int(match.group(1))
    run_dir = ascend_pt_folder(path)  # <run>_ascend_pt/ASCEND_PROFILER_OUTPUT/trace_view.json
    if run_dir is not None and os.path.isdir(run_dir):
        for name in os.listdir(run_dir):
            match = _NPU_INFO.match(name)
            if match:
                return int(match.group(1))
    return None
