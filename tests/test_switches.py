"""On/off environment variables: one set of spellings, a typo said rather than read as off."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cli_helpers import cli
from dissensus.errors import ConfigError
from dissensus.states.similarity import ALLOW_CODE_ENV, check_code_name, code_allowed
from dissensus.switches import OFF, ON, env_switch

_NAME = "DISSENSUS_TEST_SWITCH"


@given(
    word=st.sampled_from(ON + OFF),
    upper=st.lists(st.booleans(), min_size=5, max_size=5),
    pad=st.sampled_from(["", " ", "\t", "  "]),
)
def test_every_spelling_reads_in_any_case_and_padding(
    word: str, upper: list[bool], pad: str
) -> None:
    cased = "".join(
        c.upper() if up else c for c, up in zip(word, upper + [False] * 5, strict=False)
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(_NAME, f"{pad}{cased}{pad}")
        assert env_switch(_NAME, unset="default") is (word in ON)


@pytest.mark.parametrize("value", ["", "   "])
def test_unset_or_empty_says_nothing(value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(_NAME, value)
    assert env_switch(_NAME, unset="default") is None
    monkeypatch.delenv(_NAME)
    assert env_switch(_NAME, unset="default") is None


@pytest.mark.parametrize("value", ["ture", "2", "enable", "y\x1b[31m"])
def test_any_other_value_is_refused_naming_the_variable(
    value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(_NAME, value)
    with pytest.raises(ConfigError) as exc:
        env_switch(_NAME, unset="the default")
    said = str(exc.value)
    assert said.startswith(f"${_NAME} is {value!r}: set it to 1, true, yes, on (on)")
    assert "\x1b" not in said and "(the default)" in said


def test_allow_code_takes_on_and_off_and_refuses_a_typo(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ALLOW_CODE_ENV, "on")
    assert code_allowed(None) is True
    monkeypatch.setenv(ALLOW_CODE_ENV, "off")
    assert code_allowed(None) is False
    assert code_allowed(True) is True  # a setting wins over the environment
    monkeypatch.setenv(ALLOW_CODE_ENV, "ture")
    assert code_allowed(False) is False
    with pytest.raises(ConfigError, match=r"\$DISSENSUS_ALLOW_CODE is 'ture'"):
        check_code_name("mymod:similar", allow_code=None)
    check_code_name("tfidf", allow_code=None)  # no code named: the variable is not read


def test_version_flag_prints_what_the_version_command_prints() -> None:
    flag, command = cli("--version"), cli("version")
    assert flag.code == 0 and command.code == 0
    assert flag.out == command.out and flag.out.strip()
