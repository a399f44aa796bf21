"""route's warning about one decision spelled several ways names only spellings a reader
cannot tell apart (case, white space, full-width, an accent composed or not): '2⁵' and
'25', the flags of England and Scotland, 'Ⅸ' and 'IX' are decisions it tells apart."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli_helpers import cli
from dissensus.cli.route import _LookAlikeDecisions

ENGLAND = "\U0001f3f4\U000e0067\U000e0062\U000e0065\U000e006e\U000e0067\U000e007f"
SCOTLAND = "\U0001f3f4\U000e0067\U000e0062\U000e0073\U000e0063\U000e0074\U000e007f"
APART = [("2\u2075", "25"), (ENGLAND, SCOTLAND), ("\u2168", "IX")]
ALIKE = [("remove", "Remove "), ("caf\u00e9", "cafe\u0301")]


@pytest.mark.parametrize(("one", "other"), APART + ALIKE)
def test_only_spellings_of_one_decision_are_counted(one: str, other: str) -> None:
    alike = _LookAlikeDecisions()
    alike._check(1, "p", {one, other})
    assert alike.count == ((one, other) in ALIKE)


def _panel(pid: str, one: str, other: str) -> dict[str, object]:
    outputs = [{"agent": a, "decision": d, "reasoning": "r"} for a, d in (("a", one), ("b", other))]
    return {"id": pid, "outputs": outputs}


def test_route_warns_of_spellings_only(tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl"
    rows = [_panel(f"apart{i}", *pair) for i, pair in enumerate(APART)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    res = cli("route", path, "--similarity", "tfidf", "--json")
    assert res.code == 0, res.err
    assert "warning" not in res.err
    rows += [_panel(f"alike{i}", *pair) for i, pair in enumerate(ALIKE)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    res = cli("route", path, "--similarity", "tfidf", "--json")
    assert res.code == 0, res.err
    assert "2 panel(s) have decisions that differ only in case" in res.err
    assert "line 4, panel 'alike0'" in res.err
