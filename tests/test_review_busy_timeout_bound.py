"""``$DISSENSUS_JOURNAL_BUSY_TIMEOUT`` is a number of seconds from 0 to 2,147,483 (the
most PostgreSQL's ``lock_timeout`` holds).

Before, a larger number passed the check and every write to a PostgreSQL journal (a
``review resolve``, a ``decide``) failed with the server's ``invalid value for
parameter "lock_timeout"``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli_helpers import cli
from dissensus.errors import ConfigError
from dissensus.store.targets import BUSY_TIMEOUT_ENV, busy_timeout
from pipeline_cases import panel

MAX_BUSY_TIMEOUT = 2_147_483.0
"""PostgreSQL's longest lock_timeout (2,147,483,647 ms), in whole seconds."""


def _one_item(journal: str, tmp_path: Path) -> str:
    panels = tmp_path / "in.jsonl"
    panels.write_text(json.dumps(panel("p0", ["1", "2", "1"])) + "\n", encoding="utf-8")
    res = cli("decide", panels, "--journal", journal, "--run-id", "r1", "--json")
    assert res.code == 0, res.err
    return str(json.loads(res.out.splitlines()[0])["review_id"])


@pytest.mark.parametrize("value", ["2147484", "3000000", "1e12", "99999999999999999999"])
def test_a_busy_timeout_past_the_bound_is_refused_naming_the_variable(
    journal_target: str, tmp_path: Path, value: str
) -> None:
    rid = _one_item(journal_target, tmp_path)
    res = cli(
        "review", "resolve", rid, "--journal", journal_target, "--decision", "1",
        "--note", "n", "--reviewer", "ann", env={BUSY_TIMEOUT_ENV: value},
    )  # fmt: skip
    assert res.code == 2, (res.code, res.out, res.err)
    assert BUSY_TIMEOUT_ENV in res.err and "lock_timeout" not in res.err
    assert "Traceback" not in res.err


def test_the_bound_itself_is_taken_on_every_back_end(journal_target: str, tmp_path: Path) -> None:
    rid = _one_item(journal_target, tmp_path)
    res = cli(
        "review", "resolve", rid, "--journal", journal_target, "--decision", "1",
        "--note", "n", "--reviewer", "ann", "--json",
        env={BUSY_TIMEOUT_ENV: f"{MAX_BUSY_TIMEOUT:.0f}"},
    )  # fmt: skip
    assert res.code == 0, res.err
    assert json.loads(res.out)["decision"] == "1"


def test_busy_timeout_reads_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(BUSY_TIMEOUT_ENV, "2147483")
    assert busy_timeout() == MAX_BUSY_TIMEOUT
    monkeypatch.setenv(BUSY_TIMEOUT_ENV, "2147483.5")
    with pytest.raises(ConfigError, match=BUSY_TIMEOUT_ENV):
        busy_timeout()
