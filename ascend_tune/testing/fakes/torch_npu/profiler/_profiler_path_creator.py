"""Where a profiling run's ``{worker}_{pid}_{time}_ascend_pt`` folder goes.

The real package keeps this in a process-wide singleton that ``tensorboard_trace_handler(...)`` configures when it
is *created* and that a ``profile`` without ``on_trace_ready`` resets at ``start()``; the fake keeps that behaviour
(the state lives in this module, so dropping ``torch_npu`` from ``sys.modules`` clears it).
"""

from __future__ import annotations

import os
import shutil
import socket
from datetime import datetime, timezone
from typing import Optional

from ._constant import Constant, print_warn_msg

__all__: list[str] = []


class ProfPathCreator:
    """The configured output folder and worker name, and the run folder made from them."""

    def __init__(self) -> None:
        self._prof_path: Optional[str] = None
        self._worker_name: Optional[str] = None
        self._dir_path: Optional[str] = None
        self._export_only_mode = False
        self.is_prof_inited = False

    def init(
        self, worker_name: Optional[str] = None, dir_name: Optional[str] = None, export_only_mode: bool = False
    ) -> None:
        """Configure the next run folders; invalid names fall back to the defaults with a warning."""
        self._export_only_mode = export_only_mode
        if worker_name is None or (
            isinstance(worker_name, str) and worker_name and len(worker_name) < Constant.MAX_WORKER_NAME_LENGTH
        ):
            self._worker_name = worker_name
        else:
            print_warn_msg("Invalid parameter worker_name, reset it to default.")
            self._worker_name = None
        if isinstance(dir_name, str) and dir_name:
            self._dir_path = os.path.realpath(dir_name)
        else:
            if dir_name is not None:
                print_warn_msg("Invalid parameter dir_name, reset it to default.")
            self._dir_path = None

    @property
    def export_only(self) -> bool:
        """True when no folder is kept: no ``on_trace_ready`` and no ``ASCEND_WORK_PATH``.

        The real profiler then writes raw data to ``./export_only_prof_dir`` and deletes it afterwards; the fake
        keeps it in memory instead, so nothing appears in the working directory.
        """
        return self._export_only_mode and not self._dir_path and not os.getenv(Constant.ASCEND_WORK_PATH)

    def create_prof_dir(self) -> Optional[str]:
        """Make ``{dir}/{worker or hostname}_{pid}_{YYYYmmddHHMMSSfff}_ascend_pt``; None when export-only."""
        if self.export_only:
            self._prof_path = None
            return None
        dir_path = self._dir_path
        if not dir_path:
            work_path = os.getenv(Constant.ASCEND_WORK_PATH)
            if work_path:
                dir_path = os.path.join(os.path.abspath(work_path), Constant.PROFILING_WORK_PATH)
            else:
                dir_path = os.getcwd()
        worker = f"{self._worker_name or socket.gethostname()}_{os.getpid()}"
        stamp = datetime.now(tz=timezone.utc).astimezone().strftime("%Y%m%d%H%M%S%f")[:-3]
        self._prof_path = os.path.join(dir_path, f"{worker}_{stamp}_ascend_pt")
        os.makedirs(self._prof_path, mode=0o750, exist_ok=True)
        self.is_prof_inited = True
        return self._prof_path

    def get_prof_dir(self) -> Optional[str]:
        """The current run folder."""
        return self._prof_path

    def delete_prof_dir(self) -> None:
        """Remove the current run folder (after a run that recorded nothing)."""
        if self._prof_path:
            shutil.rmtree(self._prof_path, ignore_errors=True)


_creator = ProfPathCreator()


def prof_path_creator() -> ProfPathCreator:
    """The process-wide path configuration, as the real singleton."""
    return _creator
