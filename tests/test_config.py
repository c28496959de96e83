"""FeatureConfig, the base of the feature options' configs: from_any's forms, the ASCEND_TUNE_* text, "did you mean"."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ascend_tune.config import OFF_WORDS, ON_WORDS, FeatureConfig
from ascend_tune.errors import ConfigError


@dataclass(frozen=True)
class Demo(FeatureConfig):
    OPTION = "demo"
    ENV = "ASCEND_TUNE_DEMO"
    EXAMPLE = "count=2,tags=a,b"
    WORDS = {"loud": {"flag": True, "count": 9}}

    count: int = 1
    flag: bool = False
    rate: Optional[float] = None
    name: str = "x"
    steps: Optional[tuple] = None
    tags: tuple = ()

    def __post_init__(self) -> None:
        self.check_int("count", 0)
        self.check_bool("flag")


@dataclass(frozen=True)
class Switched(FeatureConfig):
    """A feature whose False is a config of its own and whose option takes no text (as tune's)."""

    OPTION = "switched"
    TAKES_TEXT = False

    on: bool = True

    @classmethod
    def off(cls) -> Switched:
        return cls(on=False)


def _cased(word: str) -> st.SearchStrategy:
    return st.sampled_from([word, word.upper(), word.capitalize()])


_LETTERS = "abcdefghijklmnopqrstuvwxyz_"
names = st.builds(str.__add__, st.sampled_from(_LETTERS), st.text(_LETTERS + "0123456789.", max_size=7)).filter(
    lambda s: s != "none"
)
list_items = st.one_of(
    st.integers(0, 10**6).map(lambda n: (n, str(n))),
    st.tuples(st.integers(0, 99), st.integers(0, 99)).map(lambda r: (f"{r[0]}-{r[1]}", f"{r[0]} - {r[1]}")),
    names.map(lambda s: (s, s)),
)


@st.composite
def configs(draw: st.DrawFn) -> tuple:
    """Options as values and as the environment's text, in a random order and spelling."""
    values, texts = {}, {}
    if draw(st.booleans()):
        values["count"] = draw(st.integers(0, 10**9))
        texts["count"] = str(values["count"])
    if draw(st.booleans()):
        values["flag"] = draw(st.booleans())
        texts["flag"] = draw(st.sampled_from(ON_WORDS if values["flag"] else OFF_WORDS).flatmap(_cased))
    if draw(st.booleans()):
        values["rate"] = draw(st.none() | st.floats(allow_nan=False, allow_infinity=False))
        texts["rate"] = draw(_cased("none")) if values["rate"] is None else repr(values["rate"])
    if draw(st.booleans()):
        values["name"] = draw(names)
        texts["name"] = values["name"]
    for key in ("steps", "tags"):
        if draw(st.booleans()):
            items = draw(st.lists(list_items, max_size=4))
            values[key] = tuple(v for v, _ in items)
            texts[key] = ", ".join(t for _, t in items)
    if not texts:  # empty text means off (test_one_set_of_on_off_words)
        values["count"], texts["count"] = 0, "0"
    order = draw(st.permutations(list(texts)))
    return values, ",".join(f"{k}={texts[k]}" for k in order)


@given(configs())
def test_the_text_form_parses_each_value_by_its_field_type(case):
    values, text = case
    assert Demo.from_text(text) == Demo(**values)


@given(st.sampled_from(ON_WORDS).flatmap(_cased), st.sampled_from(OFF_WORDS + ("", "  ")).flatmap(_cased))
def test_one_set_of_on_off_words(on, off):
    assert Demo.from_text(on) == Demo() and Demo.from_text(f" {on} ") == Demo()
    assert Demo.from_text(off) is None
    assert Switched.from_text(on) == Switched() and Switched.from_text(off) == Switched(on=False)
    assert Demo.from_text("count=3,flag=" + on).flag is True


def test_words_of_a_feature_and_lists_that_continue():
    assert Demo.from_text("LOUD") == Demo(flag=True, count=9)
    config = Demo.from_text("tags=a,b,0-2,7,count=2,steps=,name=n")
    assert (config.tags, config.count, config.steps, config.name) == (("a", "b", "0-2", 7), 2, (), "n")
    assert Demo.from_text("steps=none").steps is None and Demo.from_text("steps=1,,").steps == (1,)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("cuont=2", r"ASCEND_TUNE_DEMO='cuont=2': demo has no option 'cuont'; did you mean 'count'\?"),
        ("zzz=2", "demo has no option 'zzz'; valid options: count, flag, rate, name, steps, tags"),
        ("count=2,stray", r"'stray' is not key=value; use 1/0, true/false, yes/no or on/off, loud, .*e\.g\. count=2"),
        ("maybe", "'maybe' is not key=value"),
        ("count=two", "demo option count='two' is not an integer"),
        ("count=-1", "demo option count must be an integer >= 0, got -1"),
        ("rate=fast", "demo option rate='fast' is not a number"),
        ("flag=maybe", "demo option flag='maybe' is not one of 1/0, true/false, yes/no or on/off"),
    ],
)
def test_text_errors_name_the_variable_and_what_to_write(text, message):
    with pytest.raises(ConfigError, match=message) as info:
        Demo.from_text(text)
    assert str(info.value).startswith(f"ASCEND_TUNE_DEMO={text!r}: ")


def test_from_any_takes_every_documented_form():
    config = Demo(count=4)
    assert Demo.from_any(None) is None  # not given: the factory decides (environment, then its default)
    assert Demo.from_any(False) is None and Switched.from_any(False) == Switched(on=False)
    assert Demo.from_any(True) == Demo() and Demo.from_any(config) is config
    assert Demo.from_any({"count": 4}) == config and Demo.from_any("count=4") == config
    with pytest.raises(ConfigError, match="^demo='count=x': demo option count='x' is not an integer$"):
        Demo.from_any("count=x")
    with pytest.raises(ConfigError, match=r"demo has no option 'flags'; did you mean 'flag'\?"):
        Demo.from_any({"flags": True})
    with pytest.raises(ConfigError, match="demo must be True, False, a dict of options, a key=value string or a Demo"):
        Demo.from_any(3)
    with pytest.raises(ConfigError, match="^switched must be True, False, a dict of options or a Switched, got str$"):
        Switched.from_any("on=1")
    with pytest.raises(ConfigError, match="demo option flag must be True or False, got 'yes'"):
        Demo.from_any({"flag": "yes"})


def test_an_option_not_given_reads_the_environment_then_the_default(monkeypatch):
    monkeypatch.delenv("ASCEND_TUNE_DEMO", raising=False)
    assert Demo.from_option(None) is None and Demo.from_option(None, default=Demo(count=7)) == Demo(count=7)
    monkeypatch.setenv("ASCEND_TUNE_DEMO", " ")
    assert Demo.from_option(None, default=Demo(count=7)) == Demo(count=7)
    monkeypatch.setenv("ASCEND_TUNE_DEMO", "count=3")
    assert Demo.from_option(None, default=Demo(count=7)) == Demo(count=3) == Demo.from_env()
    assert Demo.from_option(False) is None and Demo.from_option({"count": 5}) == Demo(count=5)  # the option wins
    monkeypatch.setenv("ASCEND_TUNE_DEMO", "off")
    assert Demo.from_option(None, default=Demo(count=7)) is None


def test_choices_of_a_field_or_of_each_of_its_items():
    @dataclass(frozen=True)
    class Modes(FeatureConfig):
        OPTION = "modes"

        mode: str = "a"
        each: tuple = ("x",)

        def __post_init__(self) -> None:
            self.check_choice("mode", ("a", "b"))
            self.check_choice("each", ("x", "y"), items=True)

    assert Modes.from_text("mode=b,each=y,x").each == ("y", "x")
    with pytest.raises(ConfigError, match="^modes option mode must be one of a, b, got 'c'$"):
        Modes(mode="c")
    with pytest.raises(ConfigError, match="^ASCEND_TUNE_MODES='each=x,z': modes option each must be one of x, y"):
        Modes.from_text("each=x,z", source="ASCEND_TUNE_MODES")
