"""Precision backends behind one small interface: ``start(step)`` before a selected step, ``stop()`` + ``step()``
after it, ``close()`` at the block's end.

- ``builtin``: :class:`~ascend_tune.precision.engine.DumpEngine`, always available, nothing left behind.
- ``msprobe`` (PyPI ``mindstudio-probe`` 26.x, never the unrelated PyPI ``msprobe``): a process singleton that
  patches torch for good and takes seconds to import, so it is created at the first selected step, once.
- ``ptdbg_ascend`` (legacy NPU images; not on PyPI): the guide's API, driven by hand (no ``enable_dataloader``,
  whose class-wide loader patch ends training with an exception after the last step).

msprobe and ptdbg count steps themselves; before each selected step their counter is set to the monitor's step
number (msprobe's ``set_init_step``, ptdbg's ``step()`` repeated), so their ``step<N>`` folders match the log.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import inspect
import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from ..analysis.dumps.overflow import find_overflows, overflows_of
from ..analysis.dumps.read import dump_from_index
from ..analysis.dumps.stacks import parse_stacks
from ..errors import ConfigError
from ..formats.dump_layout import step_dir_name
from .config import PrecisionConfig, expand_steps

MSPROBE_DIST = "mindstudio-probe"
MSPROBE_INSTALL = 'pip install "mindstudio-probe>=26.0,<27"'


@dataclass(frozen=True)
class StepOutcome:
    """What a dumped step left: its folder (None when nothing was kept) and the overflows found in it."""

    path: Optional[str]
    overflows: list = field(default_factory=list)
    replay: Any = None  # task="replay": the step's analysis.dumps.replay.ReplayReport


def importable(module: str) -> bool:
    """Whether ``module`` can be found without importing it (a ``None`` in sys.modules blocks it, as for import)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def msprobe_installed() -> bool:
    """Whether msprobe is importable *and* comes from mindstudio-probe (the PyPI name ``msprobe`` is unrelated)."""
    if not importable("msprobe"):
        return False
    try:
        importlib.metadata.version(MSPROBE_DIST)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def choose(config: PrecisionConfig, device_kind: str) -> str:
    """The backend a config runs on: ``backend`` when forced, else ``auto``'s pick.

    ``auto`` takes ptdbg_ascend when importable (legacy NPU images), msprobe on an NPU device (torch_npu present)
    when installed, and the builtin engine otherwise. DESIGN.md's order would take msprobe on cpu / cuda as well;
    it is left out there on purpose: it patches torch for the rest of the process, takes ~3.5 s to import and makes
    a dumped step 35-48x slower, while GPU / CPU runs are the reference side that only needs a cheap dump msprobe
    can read, which the builtin engine writes. Pass ``backend="msprobe"`` to use it anyway.
    Raises ConfigError when a forced backend is not installed. ``task="replay"`` is the builtin engine's alone.
    """
    if config.backend == "builtin" or config.task == "replay":
        return "builtin"
    if config.backend == "msprobe":
        if not msprobe_installed():
            raise ConfigError(
                f"precision backend='msprobe' but mindstudio-probe is not installed; run {MSPROBE_INSTALL} "
                "(not the unrelated PyPI package 'msprobe'), or use backend='builtin'"
            )
        return "msprobe"
    if config.backend == "ptdbg_ascend":
        if not importable("ptdbg_ascend"):
            raise ConfigError(
                "precision backend='ptdbg_ascend' but ptdbg_ascend is not importable (it is not on PyPI; it ships "
                f"with legacy Ascend images); use backend='msprobe' ({MSPROBE_INSTALL}) or backend='builtin'"
            )
        return "ptdbg_ascend"
    if importable("ptdbg_ascend"):
        return "ptdbg_ascend"
    if device_kind == "npu" and msprobe_installed():
        return "msprobe"
    return "builtin"


def create(
    name: str,
    config: PrecisionConfig,
    dump_path: str,
    rank: int,
    models: list,
    on_error: Callable[[str, BaseException], None],
) -> Any:
    """Build backend ``name`` (nothing heavy is imported before its first ``start``)."""
    if name == "builtin":
        return BuiltinBackend(config, dump_path, rank, models, on_error)
    if name == "msprobe":
        return MsprobeBackend(config, dump_path, models)
    return PtdbgBackend(config, dump_path, models)


class BuiltinBackend:
    """The built-in engine; an overflow check keeps only the steps that overflowed."""

    name = "builtin"

    def __init__(self, config: PrecisionConfig, dump_path: str, rank: int, models: list,
                 on_error: Callable[[str, BaseException], None]):
        from .engine import DumpEngine

        self.config = config
        self.engine = DumpEngine(config, dump_path, rank, models, on_error)

    @property
    def failed(self) -> Optional[str]:
        return self.engine.failed

    def start(self, step: int) -> None:
        self.engine.start(step)

    def stop(self) -> None:
        self.engine.stop()

    def step(self, overflow_limit: int = -1) -> StepOutcome:
        result = self.engine.finish()
        if result is None:
            return StepOutcome(None)
        if self.config.task == "replay":
            return StepOutcome(os.path.dirname(self.engine.rank_dir), replay=result)
        if self.config.task != "overflow_check":
            return StepOutcome(os.path.dirname(result.rank_dir))
        dump = dump_from_index({"data": result.data}, parse_stacks(result.stack), result.construct,
                               result.rank_dir, step=result.step, rank=result.rank, path=result.rank_dir)
        overflows = list(overflows_of(dump))
        if overflow_limit != -1:
            overflows = overflows[:overflow_limit]
        if not overflows:
            _remove_rank_dir(result.rank_dir)
            return StepOutcome(None)
        return StepOutcome(os.path.dirname(result.rank_dir), overflows)

    def close(self) -> None:
        self.engine.stop()


class _DebuggerBackend:
    """A third-party ``PrecisionDebugger`` (``_create``), made at the first selected step; what msprobe and
    ptdbg_ascend share."""

    name = ""
    failed: Optional[str] = None

    def __init__(self, config: PrecisionConfig, dump_path: str, models: list):
        self.config = config
        self.dump_path = dump_path
        self._models = models
        self._debugger: Any = None

    def _create(self) -> Any:
        raise NotImplementedError

    def _created(self) -> Any:
        """The debugger, made on the first call."""
        if self._debugger is None:
            self._debugger = self._create()
        return self._debugger

    def stop(self) -> None:
        self._debugger.stop()


class MsprobeBackend(_DebuggerBackend):
    """msprobe 26.x's PrecisionDebugger, created at the first selected step and configured through a config.json."""

    name = "msprobe"

    def __init__(self, config: PrecisionConfig, dump_path: str, models: list):
        super().__init__(config, dump_path, models)
        self._model = models[0] if len(models) == 1 else (list(models) or None)
        self._step: Optional[int] = None
        self._config_dir: Optional[str] = None

    def _create(self) -> Any:
        from msprobe.pytorch import PrecisionDebugger

        task = "statistics" if self.config.task == "overflow_check" else self.config.task
        section = {"scope": list(self.config.scope), "list": list(self.config.list),
                   "data_mode": list(self.config.data_mode)}
        if task == "statistics":
            section["summary_mode"] = self.config.summary_mode
        steps = list(self.config.steps or ())
        payload = {"task": task, "dump_path": self.dump_path, "rank": [], "step": steps, "level": self.config.level,
                   "extra_info": True, "async_dump": False, task: section}
        os.makedirs(self.dump_path, exist_ok=True)
        # outside the dump root, which holds step folders only; msprobe reads it in the constructor
        self._config_dir = tempfile.mkdtemp(prefix="ascend_tune_msprobe_")
        path = os.path.join(self._config_dir, "config.json")
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(payload, fh, indent=1)
        os.chmod(path, 0o640)  # msprobe refuses config files others may write
        if getattr(PrecisionDebugger, "_instance", None) is not None:
            # a process singleton: an earlier monitor's instance would quietly keep its own config and dump path
            # (notes: resetting the private _instance is what works)
            PrecisionDebugger._instance = None
        return PrecisionDebugger(config_path=path)

    def start(self, step: int) -> None:
        debugger = self._created()
        debugger.set_init_step(step)
        debugger.start(model=self._model)
        self._step = step

    def step(self, overflow_limit: int = -1) -> StepOutcome:
        self._debugger.step()
        path = os.path.join(self.dump_path, step_dir_name(self._step))
        if self.config.task != "overflow_check" or not os.path.isdir(path):
            return StepOutcome(path if os.path.isdir(path) else None)
        found = find_overflows(path)
        return StepOutcome(path, found if overflow_limit == -1 else found[:overflow_limit])

    def close(self) -> None:
        """Drop the config file; msprobe's patches cannot be undone and stay for the rest of the process."""
        if self._config_dir is not None:
            shutil.rmtree(self._config_dir, ignore_errors=True)


class PtdbgBackend(_DebuggerBackend):
    """ptdbg_ascend's PrecisionDebugger with the guide's arguments, its step counter kept on the monitor's."""

    name = "ptdbg_ascend"

    def __init__(self, config: PrecisionConfig, dump_path: str, models: list):
        super().__init__(config, dump_path, models)
        self._count = 0

    def _create(self) -> Any:
        module = importlib.import_module("ptdbg_ascend")
        overflow = self.config.task == "overflow_check"
        kwargs: dict = dict(dump_path=self.dump_path, hook_name="overflow_check" if overflow else "dump",
                            step=expand_steps(self.config.steps) if self.config.steps else [],
                            enable_dataloader=False)
        signature = inspect.signature(module.PrecisionDebugger.__init__).parameters
        if "model" in signature and self.config.level != "L1" and self._models:
            kwargs["model"] = self._models[0] if len(self._models) == 1 else self._models
        os.makedirs(self.dump_path, exist_ok=True)
        debugger = module.PrecisionDebugger(**kwargs)
        if overflow:
            debugger.configure_hook(mode="api", overflow_nums=self.config.overflow_nums)
        else:
            mode, scope = "api_stack", []
            if self.config.scope:
                mode, scope = "range", list(self.config.scope)
            elif self.config.list:
                mode, scope = "list", list(self.config.list)
            debugger.configure_hook(mode=mode, scope=scope, api_list=[],
                                    input_output_mode=list(self.config.data_mode),
                                    summary_only=self.config.task == "statistics")
        return debugger

    def start(self, step: int) -> None:
        debugger = self._created()
        while self._count < step:  # ptdbg's step() only counts: bring it to the monitor's step number
            debugger.step()
            self._count += 1
        debugger.start()

    def step(self, overflow_limit: int = -1) -> StepOutcome:
        self._debugger.step()
        self._count += 1
        return StepOutcome(self.dump_path)

    def close(self) -> None:
        """ptdbg's hooks stay registered for the process; the debugger stays stopped."""


def _remove_rank_dir(rank_dir: str) -> None:
    shutil.rmtree(rank_dir, ignore_errors=True)
    try:
        os.rmdir(os.path.dirname(rank_dir))  # the step folder, when no other rank wrote there
    except OSError:
        pass
