"""Fake of the ``torch_npu._C`` extension: the simulated host (device count, chip, CANN) and the runtime's state.

Everything that the real extension keeps in C++ lives here, so the Python modules above it stay as thin as the
real ones. Tests may read ``_options`` (what ``set_option`` and friends set), ``_synchronize_calls`` and ``_calls``:
the runtime calls in the order they were made (``("init",)``, ``("setDevice", 0)``, ``("synchronize",)``,
``("setOption", {...})``), so a test can tell whether an option was set before the runtime did any work.
"""

from __future__ import annotations

import os

if os.environ.get("ASCEND_TUNE_FAKE_NPU_FAIL", "") == "import":
    # The real extension links against CANN's libraries; with no CANN the dynamic loader fails right here.
    raise ImportError("libhccl.so: cannot open shared object file: No such file or directory")

_raw_device_count = int(os.environ.get("ASCEND_TUNE_FAKE_NPU_COUNT", "1"))
_device_name = os.environ.get("ASCEND_TUNE_FAKE_NPU_NAME", "Ascend910B2")
_cann_version = "8.3.RC1"

# -1 until a device is selected, as the runtime reports before the first set_device.
_current_device = -1
_synchronize_calls = 0
_options: dict[str, str] = {}
_calls: list[tuple] = []


def _npu_init() -> None:
    """Initialise the runtime (the real binding calls aclInit and opens the device); called once by ``_lazy_init``."""
    _calls.append(("init",))


def _npu_setDevice(device: int) -> None:  # noqa: N802  (the real binding's name)
    """Select ``device``; the caller has checked it against the visible count."""
    global _current_device
    _calls.append(("setDevice", device))
    _current_device = device


def _npu_getDevice() -> int:  # noqa: N802
    """The selected device, selecting device 0 first if none was, like the runtime does."""
    global _current_device
    if _current_device < 0:
        _current_device = 0
    return _current_device


def _npu_synchronize() -> None:
    """Wait for queued device work: CPU work is already done, so only count the call."""
    global _synchronize_calls
    _calls.append(("synchronize",))
    _synchronize_calls += 1


def _npu_setOption(option: dict) -> None:  # noqa: N802
    """Record runtime options as strings, as the real binding receives them."""
    _calls.append(("setOption", {str(k): str(v) for k, v in option.items()}))
    for key, value in option.items():
        _options[str(key)] = str(value)


def _npu_getOption(name: str) -> bytes | None:  # noqa: N802
    """A runtime option's value as bytes (the real binding returns bytes), or None when never set."""
    value = _options.get(name)
    return None if value is None else value.encode()


def _npu_is_jit_compile_false() -> bool:
    """Whether online compilation is off: the set option, else CANN's default for the chip."""
    if "jitCompile" in _options:
        return _options["jitCompile"] == "disable"
    # CANN defaults to binary kernels (no JIT) on Atlas A2/A3 (910B, 910_93) and to JIT on 910A and 310P.
    return _device_name.startswith(("Ascend910B", "Ascend910_93"))


def _npu_getDeviceName() -> str:  # noqa: N802
    """The chip's name; every device of a host is the same chip."""
    return _device_name


def _get_cann_version(module: str = "CANN") -> str:
    """The installed CANN version; the fake reports one version for every component."""
    return _cann_version
