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


def check_option_names(given: object, valid: "list | tuple", what: str) -> None:
    """Raise a ConfigError naming the first option of ``given`` not in ``valid``, with the closest valid name.

    ``what`` names the options' owner in the message, e.g. ``"TrainingMonitor"`` or ``"profile"``.
    """
    import difflib

    for name in given:  # type: ignore[attr-defined]
        if name not in valid:
            close = difflib.get_close_matches(str(name), list(valid), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f"; valid options: {', '.join(valid)}"
            raise ConfigError(f"{what} has no option {name!r}{hint}")
