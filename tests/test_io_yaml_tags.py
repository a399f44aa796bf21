"""A YAML value its explicit tag cannot read is one error naming the line, never a
traceback: PyYAML's constructors raise their own ``KeyError`` (``!!bool maybe``),
``AttributeError`` (``!!timestamp soon``) and ``TypeError`` (``!!set [1]``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cli_helpers import run_cli
from dissensus.errors import ConfigError
from dissensus.io.yamlfile import load_yaml_text


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a: !!bool maybe\n", "invalid YAML at line 1: bool 'maybe' cannot be read as one"),
        ("a:\n  b: !!timestamp soon\n", "invalid YAML at line 2: timestamp 'soon'"),
        ("a: !!timestamp 2001-13-45\n", "line 1: timestamp '2001-13-45' cannot be read as one"),
        ("a: !!set [1]\n", "invalid YAML at line 1: expected a mapping node"),
        ("a: !!float x\n", "invalid YAML at line 1: float 'x' cannot be read as one"),
        # It was said to be "an integer of more than 4300 digits".
        ("a: !!int x\n", "invalid YAML at line 1: 'x' is not an integer"),
        ('a: !!int "0.3"\n', "invalid YAML at line 1: '0.3' is not an integer"),
        ("- 1\n- !!int 0b2\n", "invalid YAML at line 2: '0b2' is not an integer"),
    ],
)
def test_a_value_its_tag_cannot_read_names_its_line(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_yaml_text(text, file="p.yaml")
    assert message in str(caught.value)
    assert str(caught.value).startswith("p.yaml: ")


def test_values_their_tags_read_are_kept() -> None:
    text = "a: !!int 12\nb: !!bool yes\nc: !!float '0.5'\nd: !!str 3\n"
    assert load_yaml_text(text) == {"a": 12, "b": True, "c": 0.5, "d": "3"}
    with pytest.raises(ConfigError, match="more than 4300 digits at line 1"):
        load_yaml_text("a: !!int " + "9" * 5000 + "\n")


def test_a_policy_with_such_a_value_is_one_error_line(tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text("reading:\n  theta_s: !!bool yes please\n")
    panels = tmp_path / "p.jsonl"
    panels.write_text("")
    proc = run_cli(
        "decide", str(panels), "--policy", str(policy), "--journal", str(tmp_path / "j.sqlite")
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"error: {policy}: invalid YAML at line 2: bool 'yes please' cannot be read as one"
    ]


_TOKENS = st.sampled_from(
    [
        "a: 1\n",
        "- x\n",
        "? ",
        "&a ",
        "*a ",
        "{",
        "}",
        "[",
        "]",
        ",",
        ": ",
        "\n",
        "  ",
        "---\n",
        "<<: *a\n",
        "!!bool ",
        "!!int ",
        "!!float ",
        "!!timestamp ",
        "!!set ",
        "!!omap ",
        "!!pairs ",
        "!!binary ",
        "!!str ",
        "!!null ",
        "!!merge ",
        "!!seq ",
        "!!map ",
        "!!value ",
        "x",
        "yes",
        "2001-12-14",
        "0b2",
        ".nan",
        "1e400",
        "~",
        '"q"',
        "'s'",
        "|\n  t\n",
    ]
)


@settings(max_examples=400)
@given(st.lists(_TOKENS, min_size=1, max_size=14).map("".join))
def test_any_text_is_data_or_one_config_error(text: str) -> None:
    try:
        load_yaml_text(text, file="f.yaml")
    except ConfigError as exc:
        assert str(exc).startswith("f.yaml: ")
