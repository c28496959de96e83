"""FeatureConfig: what every feature option's config shares (``profile=``, ``precision=``, ``tune=``, ``shapes=``).

A feature's config is a frozen dataclass subclassing :class:`FeatureConfig`; it declares its fields and keeps only
its own rules in ``__post_init__``. The base gives it:

- :meth:`~FeatureConfig.from_any`: the option's value as the user passes it: a config, a dict of its fields,
  ``True`` (:meth:`~FeatureConfig.turned_on`: the defaults unless the feature says otherwise), ``False`` (off), a
  ``key=value`` string where the feature takes one, or ``None``, which
  means *not given* (the feature's factory then asks :meth:`~FeatureConfig.from_option` for the environment's
  config or its own default);
- :meth:`~FeatureConfig.from_text`: the ``ASCEND_TUNE_*`` form, ``key=value`` items separated by commas, each value
  parsed by its field's type (below), or one on/off word;
- unknown keys refused with the closest valid name ("did you mean"), and ``check_int`` / ``check_bool`` /
  ``check_choice`` for ``__post_init__``, every message naming the option.

Text values by field type: ``bool`` takes the on/off words; ``int`` and ``float`` a number; ``Optional[...]`` also
``none``; ``str`` the text as it is; ``tuple`` a list: the items after ``key=`` up to the next ``key=`` (an item
without ``=`` continues the list before it), each an integer, an ``a-b`` range (kept as the text ``"a-b"``) or a
name; ``key=`` alone is the empty list.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
import types
import typing
from collections.abc import Mapping
from typing import Any, ClassVar, Optional, TypeVar

from .errors import ConfigError, check_option_names

ON_WORDS = ("1", "true", "yes", "on")
OFF_WORDS = ("0", "false", "no", "off")
_WORDS_TEXT = "1/0, true/false, yes/no or on/off"
_INT = re.compile(r"^-?\d+$")
_RANGE = re.compile(r"^(\d+)\s*-\s*(\d+)$")

C = TypeVar("C", bound="FeatureConfig")


@dataclasses.dataclass(frozen=True)
class FeatureConfig:
    """The base of the feature options' configs (see the module docstring).

    Class attributes a subclass sets:
        OPTION: the TrainingMonitor option's name (``"profile"``), used in every message.
        ENV: the environment variable read when the option is not given (``"ASCEND_TUNE_PROFILE"``).
        EXAMPLE: a ``key=value,...`` example for the messages.
        TAKES_TEXT: whether the option itself also takes the ``key=value`` string.
        WORDS: words of the feature's own with the options they stand for (``{"force": {"optimizer": "force"}}``).
        RUN_FLAGS: the feature's ``ascend-tune run`` flags, each ``--FLAG [SPEC]`` with its help; what they give
            travels to every process in ``ENV`` (:meth:`run_text`), which the feature reads there.
    """

    OPTION: ClassVar[str] = "feature"
    ENV: ClassVar[str] = ""
    EXAMPLE: ClassVar[str] = ""
    TAKES_TEXT: ClassVar[bool] = True
    WORDS: ClassVar[Mapping] = {}
    RUN_FLAGS: ClassVar[Mapping] = {}

    @classmethod
    def run_text(cls, flags: Mapping) -> Optional[str]:
        """``ENV``'s text for the run flags given (flag -> its SPEC, or None when not given): the one flag's SPEC."""
        given = [spec for spec in flags.values() if spec is not None]
        return given[0] if given else None

    @classmethod
    def check_text(cls, text: str, source: str) -> None:
        """Raise ConfigError (saying what to do) when the process would refuse ``ENV=text``."""
        cls.from_text(text, source=source)

    @classmethod
    def from_any(cls: type[C], value: Any) -> Optional[C]:
        """A config from a config, a dict of its fields, ``True`` (:meth:`turned_on`), ``False`` (off: :meth:`off`), a
        ``key=value`` string (where ``TAKES_TEXT``), or ``None``: not given, returned as None."""
        if value is None:
            return None
        if isinstance(value, cls):
            return value
        if value is True:
            return cls.turned_on()
        if value is False:
            return cls.off()
        if isinstance(value, Mapping):
            check_option_names(value, list(field_types(cls)), cls.OPTION)
            return cls(**value)
        if isinstance(value, str) and cls.TAKES_TEXT:
            return cls.from_text(value, source=cls.OPTION)
        text = ", a key=value string" if cls.TAKES_TEXT else ""
        raise ConfigError(
            f"{cls.OPTION} must be True, False, a dict of options{text} or a {cls.__name__}, "
            f"got {type(value).__name__}"
        )

    @classmethod
    def turned_on(cls: type[C]) -> C:
        """What ``True`` and the on words give: the defaults, unless a subclass says otherwise."""
        return cls()

    @classmethod
    def off(cls: type[C]) -> Optional[C]:
        """What ``False`` and the off words give: None (the feature is off) unless a subclass says otherwise."""
        return None

    @classmethod
    def from_text(cls: type[C], text: str, source: Optional[str] = None) -> Optional[C]:
        """Parse the environment form: an on/off word (empty is off) or ``key=value`` items separated by commas.

        Parameters:
            text: e.g. ``"1"``, ``"off"`` or ``"wait=1,active=2"``.
            source: what the text came from, for messages (``{source}={text!r}: ...``); default ``ENV``.
        """
        source = source or cls.ENV or cls.OPTION
        try:
            word = text.strip().lower()
            if word in ON_WORDS:
                return cls.turned_on()
            if not word or word in OFF_WORDS:
                return cls.off()
            if word in cls.WORDS:
                return cls.from_any(dict(cls.WORDS[word]))
            return cls.from_any(parse_items(cls, text))
        except ConfigError as exc:
            raise ConfigError(f"{source}={text!r}: {exc}") from None

    @classmethod
    def from_env(cls: type[C], default: Optional[C] = None) -> Optional[C]:
        """The config ``ENV`` asks for; ``default`` when the variable is unset or empty."""
        text = os.environ.get(cls.ENV, "")
        return cls.from_text(text, source=cls.ENV) if text.strip() else default

    @classmethod
    def from_option(cls: type[C], value: Any, default: Optional[C] = None) -> Optional[C]:
        """The config of a monitor option: ``value`` when given (:meth:`from_any`), else ``ENV``'s, else ``default``."""
        return cls.from_env(default) if value is None else cls.from_any(value)

    # --- checks for a subclass's __post_init__ ------------------------------------------------------------------

    def check_int(self, name: str, minimum: int) -> None:
        """Raise unless field ``name`` is an integer (not a bool) >= ``minimum``."""
        value = getattr(self, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise ConfigError(f"{self.OPTION} option {name} must be an integer >= {minimum}, got {value!r}")

    def check_bool(self, *names: str) -> None:
        """Raise unless each named field is True or False."""
        for name in names:
            value = getattr(self, name)
            if not isinstance(value, bool):
                raise ConfigError(f"{self.OPTION} option {name} must be True or False, got {value!r}")

    def check_choice(self, name: str, allowed: tuple, items: bool = False) -> None:
        """Raise unless field ``name`` is one of ``allowed`` (``items``: unless each of its items is)."""
        for value in getattr(self, name) if items else (getattr(self, name),):
            if value not in allowed:
                raise ConfigError(
                    f"{self.OPTION} option {name} must be one of {', '.join(map(str, allowed))}, got {value!r}"
                )


@functools.cache
def field_types(cls: type) -> dict:
    """``{field name: (type, optional)}`` of a config dataclass, from its annotations (``Optional[X]`` -> X, True)."""
    hints = typing.get_type_hints(cls)
    out = {}
    for f in dataclasses.fields(cls):
        hint, optional = hints[f.name], False
        args = typing.get_args(hint)
        if typing.get_origin(hint) in (typing.Union, types.UnionType) and type(None) in args:
            rest = [a for a in args if a is not type(None)]
            hint, optional = (rest[0] if len(rest) == 1 else Any), True
        out[f.name] = (typing.get_origin(hint) or hint, optional)
    return out


def parse_items(cls: type, text: str) -> dict:
    """``key=value,...`` as a dict of typed values for config class ``cls`` (see the module docstring)."""
    types = field_types(cls)
    items: dict = {}
    key: Optional[str] = None
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        name, sep, raw = item.partition("=")
        if sep:
            key = name.strip()
            check_option_names([key], list(types), cls.OPTION)
            items[key] = [raw.strip()] if raw.strip() or types[key][0] is not tuple else []
        elif key is not None and types[key][0] is tuple:
            items[key].append(item)
        else:
            words = "".join(f", {w}" for w in cls.WORDS)
            raise ConfigError(
                f"{item!r} is not key=value; use {_WORDS_TEXT}{words}, or key=value items separated by commas"
                + (f", e.g. {cls.EXAMPLE}" if cls.EXAMPLE else "")
            )
    return {name: parse_value(cls.OPTION, name, parts, *types[name]) for name, parts in items.items()}


def parse_value(option: str, name: str, parts: list, kind: Any, optional: bool) -> Any:
    """One option's text (``parts``: its comma-separated items) as a value of field type ``kind``."""
    if kind is tuple:
        if optional and len(parts) == 1 and parts[0].lower() == "none":
            return None
        return tuple(_list_item(p) for p in parts)
    raw = parts[0] if parts else ""
    if optional and raw.lower() == "none":
        return None
    if kind is bool:
        if raw.lower() in ON_WORDS:
            return True
        if raw.lower() in OFF_WORDS:
            return False
        raise ConfigError(f"{option} option {name}={raw!r} is not one of {_WORDS_TEXT}")
    if kind is int or kind is float:
        try:
            return kind(raw)
        except ValueError:
            what = "an integer" if kind is int else "a number"
            raise ConfigError(f"{option} option {name}={raw!r} is not {what}") from None
    return raw


def env_switch(name: str) -> bool:
    """An on/off environment variable (``ASCEND_TUNE_TENSORBOARD=1``): unset or empty is off."""
    raw = os.environ.get(name, "").strip().lower()
    if raw in ON_WORDS:
        return True
    if raw in OFF_WORDS or not raw:
        return False
    raise ConfigError(f"{name}={os.environ[name]!r} is not one of {_WORDS_TEXT}")


def _list_item(text: str) -> Any:
    if _INT.match(text):
        return int(text)
    match = _RANGE.match(text)
    return f"{match.group(1)}-{match.group(2)}" if match else text


__all__ = ["FeatureConfig", "OFF_WORDS", "ON_WORDS", "env_switch", "field_types", "parse_items", "parse_value"]
