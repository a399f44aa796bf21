"""A problem file whose options repeat one text (or an anchor's) is refused, naming the
option's text field and its line: one plan under two ids was tabled twice and certified
under one id with standings the other contradicted."""

from __future__ import annotations

from pathlib import Path

import pytest

from dissensus.concord import load_problem
from dissensus.errors import ConfigError

HEAD = """floor: 0.5
anchors: {rejected: {id: R0, text: "leave it"}, ideal: {id: I0, text: "fix it all"}}
"""
AGENTS = """agents:
  - {id: a, kind: table, scores: {R0: 0, I0: 10, A: 5, B: 9}}
  - {id: b, kind: table, scores: {R0: 0, I0: 10, A: 9, B: 5}}
"""


def _load(tmp_path: Path, options: str) -> ConfigError:
    path = tmp_path / "p.yaml"
    path.write_text(HEAD + options + AGENTS, encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_problem(path)
    return info.value


def test_two_options_with_one_text_are_refused(tmp_path: Path) -> None:
    err = _load(tmp_path, "options:\n  - {id: A, text: restart}\n  - {id: B, text: restart}\n")
    assert err.field == "options.1.text"
    assert "options.0 ('A')" in str(err) and "(line 5)" in str(err)


def test_an_option_with_an_anchor_text_is_refused(tmp_path: Path) -> None:
    err = _load(tmp_path, "options:\n  - {id: A, text: fix it all}\n  - {id: B, text: other}\n")
    assert err.field == "options.0.text"
    assert "ideal anchor ('I0')" in str(err)


def test_distinct_texts_load(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(
        HEAD + "options:\n  - {id: A, text: restart}\n  - {id: B, text: restart now}\n" + AGENTS,
        encoding="utf-8",
    )
    assert [o.id for o in load_problem(path).options] == ["A", "B"]


def test_an_option_with_an_anchor_text_and_a_trailing_space_is_refused(tmp_path: Path) -> None:
    err = _load(
        tmp_path, "options:\n  - {id: A, text: restart}\n  - {id: B, text: 'fix it all '}\n"
    )
    assert err.field == "options.1.text"
    assert "ideal anchor ('I0')" in str(err) and "(line 5)" in str(err)


def test_two_options_apart_by_outer_white_space_only_are_refused(tmp_path: Path) -> None:
    err = _load(tmp_path, "options:\n  - {id: A, text: ' plan'}\n  - {id: B, text: plan}\n")
    assert err.field == "options.1.text"
    assert "options.0 ('A')" in str(err)
