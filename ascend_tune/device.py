"""Which accelerator this process trains on, and the few device calls the rest of the package needs.

This is the only module that imports ``torch_npu``. torch_npu can be installed but broken: with no CANN,
``import torch_npu`` raises ``ImportError(libhccl.so ...)`` and other images raise ``RuntimeError``; so every
probe catches ``Exception``, records why, and falls back to the next kind.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import platform
from dataclasses import asdict, dataclass
from types import ModuleType
from typing import Any, Optional

import torch

from .errors import ConfigError, DeviceError

KINDS = ("npu", "cuda", "cpu")
ENV_DEVICE = "ASCEND_TUNE_DEVICE"


@dataclass(frozen=True)
class DeviceInfo:
    """The device kind a run uses, with what identifies it in a report.

    kind: ``npu`` | ``cuda`` | ``cpu``; name: the first device's name; count: devices visible to this process;
    torch_version / backend_version: torch and torch_npu (npu) or CUDA (cuda) versions; cann_version: the CANN
    toolkit's when torch_npu says; source: ``detected`` or the override variable; fallback_reasons: why each
    better kind was not used (e.g. torch_npu's import error).
    """

    kind: str
    name: str
    count: int
    torch_version: str
    backend_version: Optional[str] = None
    cann_version: Optional[str] = None
    source: str = "detected"
    fallback_reasons: tuple = ()

    def as_dict(self) -> dict:
        """A JSON-ready dict (for summary.json and reports)."""
        out = asdict(self)
        out["fallback_reasons"] = list(self.fallback_reasons)
        return out


_cached: Optional[DeviceInfo] = None
_torch_npu: Optional[ModuleType] = None


def detect_device(refresh: bool = False) -> DeviceInfo:
    """Detect the device kind once per process (``refresh=True`` probes again).

    ``ASCEND_TUNE_DEVICE=npu|cuda|cpu`` overrides detection; asking for a kind that is not usable raises
    :class:`DeviceError` with the reason.
    """
    global _cached
    if _cached is None or refresh:
        _cached = _probe()
    return _cached


def reset_detection() -> None:
    """Forget the cached detection and the imported torch_npu (tests swap fake packages in and out)."""
    global _cached, _torch_npu
    _cached = None
    _torch_npu = None


def torch_npu_module() -> Optional[ModuleType]:
    """The imported torch_npu when this process runs on an NPU, else None."""
    return _torch_npu if detect_device().kind == "npu" else None


def _probe() -> DeviceInfo:
    forced = os.environ.get(ENV_DEVICE, "").strip().lower()
    if forced and forced not in KINDS:
        raise ConfigError(f"{ENV_DEVICE}={forced!r} is not a device kind; use one of {', '.join(KINDS)} or unset it")
    if forced:
        info, reason = {"npu": _probe_npu, "cuda": _probe_cuda, "cpu": _probe_cpu}[forced]()
        if info is None:
            raise DeviceError(f"{ENV_DEVICE}={forced} but {reason}; unset {ENV_DEVICE} to detect the device")
        return _with(info, source=ENV_DEVICE)
    reasons = []
    for probe in (_probe_npu, _probe_cuda):
        info, reason = probe()
        if info is not None:
            return _with(info, fallback_reasons=tuple(reasons))
        if reason:
            reasons.append(reason)
    info, _ = _probe_cpu()
    return _with(info, fallback_reasons=tuple(reasons))


def _with(info: DeviceInfo, **changes: Any) -> DeviceInfo:
    return DeviceInfo(**{**asdict(info), **changes})


def _probe_npu() -> tuple[Optional[DeviceInfo], Optional[str]]:
    global _torch_npu
    if importlib.util.find_spec("torch_npu") is None:
        return None, "torch_npu is not installed"
    try:
        mod = importlib.import_module("torch_npu")
    except Exception as exc:  # a broken install raises ImportError or RuntimeError, sometimes worse
        return None, f"torch_npu is installed but its import failed: {type(exc).__name__}: {exc}"
    try:
        if not mod.npu.is_available():
            return None, "torch_npu imported but torch.npu.is_available() is False (no visible NPU)"
        count = int(mod.npu.device_count())
        name = str(mod.npu.get_device_name(0))
    except Exception as exc:
        return None, f"torch_npu imported but querying the NPU failed: {type(exc).__name__}: {exc}"
    _torch_npu = mod
    version = getattr(mod, "__version__", None)
    return DeviceInfo("npu", name, count, torch.__version__, version, _cann_version(mod)), None


def _cann_version(mod: ModuleType) -> Optional[str]:
    try:
        return str(mod.utils.get_cann_version(module="CANN"))
    except Exception:  # older torch_npu releases lack the helper; the version is informative only
        return None


def _probe_cuda() -> tuple[Optional[DeviceInfo], Optional[str]]:
    try:
        if not torch.cuda.is_available():
            return None, "CUDA is not available to torch"
        name = torch.cuda.get_device_name(0)
        count = torch.cuda.device_count()
    except Exception as exc:
        return None, f"querying CUDA failed: {type(exc).__name__}: {exc}"
    return DeviceInfo("cuda", name, count, torch.__version__, torch.version.cuda), None


def _probe_cpu() -> tuple[DeviceInfo, None]:
    name = f"{platform.machine() or 'unknown'} CPU, {os.cpu_count() or 1} cores"
    return DeviceInfo("cpu", name, 1, torch.__version__), None


def synchronize(device_type: str) -> None:
    """Wait for the device's queued work (never called between log steps)."""
    if device_type == "cuda":
        torch.cuda.synchronize()
    elif device_type == "npu" and _torch_npu is not None:
        _torch_npu.npu.synchronize()


def new_event(device_type: str) -> Any:
    """A device event to learn, without blocking, when queued work (a non-blocking copy) has finished."""
    if device_type == "cuda":
        return torch.cuda.Event()
    if device_type == "npu" and _torch_npu is not None:
        return _torch_npu.npu.Event()
    return None


def peak_memory_mib(device_type: str) -> Optional[float]:
    """Peak allocated device memory since the last reset, in MiB; a host-side counter, so no sync."""
    module: Any = None
    if device_type == "cuda" and torch.cuda.is_available():
        module = torch.cuda
    elif device_type == "npu" and _torch_npu is not None:
        module = _torch_npu.npu
    if module is None:
        return None
    try:
        return module.max_memory_allocated() / 2**20
    except Exception:  # an allocator without stats must not end training
        return None
