"""User-facing errors: each message says what to do; the CLI prints it on one line and exits 2."""


class AscendTuneError(Exception):
    """Base class of every error ascend_tune raises on purpose."""


class ConfigError(AscendTuneError, ValueError):
    """An option, argument or environment variable has a value ascend_tune cannot use."""


class DeviceError(AscendTuneError, RuntimeError):
    """The requested device is not usable on this machine."""


class OutputError(AscendTuneError, OSError):
    """An output folder or file cannot be written."""


class InputError(AscendTuneError, ValueError):
    """An input file or folder given to a command is missing or unreadable."""
