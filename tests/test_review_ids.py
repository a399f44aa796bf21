"""One spelling per review id: ``<run>.<line>``, the line without leading zeros. Any other
spelling names no item, in the library and the CLI (the service: test_serve_review_refusals)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cli_helpers import run_cli
from dissensus.errors import InputError
from dissensus.pipeline import decide, policy_from_dict
from dissensus.pipeline.confirm import confirm
from dissensus.pipeline.review import (
    REVIEWER_ENV,
    claim,
    find_item,
    reopen,
    resolve,
    split_ref,
)
from dissensus.store import Journal
from pipeline_cases import as_panel, panel

POLICY = policy_from_dict({"reading": {"similarity": "tfidf", "theta_s": 0.3}})


@given(ref=st.text(alphabet="ab.0123456789-+ _٣\n", max_size=12))
def test_an_id_that_parses_is_written_as_its_parts(ref: str) -> None:
    """Whatever parses is the one spelling of its (run, line): ``f"{run}.{line}"``."""
    try:
        run_id, line = split_ref(ref)
    except InputError as exc:
        assert str(exc).startswith("no review item")
        return
    assert f"{run_id}.{line}" == ref and line >= 1


@given(run_id=st.text(alphabet="abc0123456789.", min_size=1, max_size=8), line=st.integers(1))
def test_every_line_from_1_parses_back(run_id: str, line: int) -> None:
    ref = f"{run_id}.{line}"
    if len(str(line)) <= 18:
        assert split_ref(ref) == (run_id, line)


@pytest.mark.parametrize("ref", ["r.01", "r.001", "r.0", "r.-3", "r.+3", "r. 3", "r.٣", "r.3\n"])
def test_other_spellings_are_refused(ref: str) -> None:
    with pytest.raises(InputError, match="no review item"):
        split_ref(ref)
    with pytest.raises(InputError, match="no case"):
        split_ref(ref, "case reference")


def _escalated(journal: Journal) -> str:
    row = panel(
        "vc",
        ["1", "2", "1"],
        values=[{"a": 1.0}, {"b": 1.0}, {"a": 0.5}],
        reasoning=["Option 1 is right."] * 3,
    )
    record = decide(as_panel(row), POLICY, journal=journal, run_id="r")
    assert record.review_id == "r.1"
    return record.review_id


def test_the_library_finds_no_item_under_another_spelling(tmp_path: Path) -> None:
    with Journal(tmp_path / "j.sqlite") as journal:
        rid = _escalated(journal)
        claim(journal, rid, "kim")
        before = len(list(journal.events("r")))
        for alt in ("r.01", "r.001"):
            with pytest.raises(InputError, match="no review item"):
                find_item(journal, alt)
            with pytest.raises(InputError, match="no review item"):
                claim(journal, alt, "lee")
            with pytest.raises(InputError, match="no review item"):
                resolve(journal, alt, decision="2", note="n", reviewer="lee")
            with pytest.raises(InputError, match="no case"):
                confirm(journal, alt, note="n", reviewer="lee")
        resolve(journal, rid, decision="2", note="n", reviewer="kim")
        after = len(list(journal.events("r")))
        with pytest.raises(InputError, match="no review item"):
            reopen(journal, "r.01", reviewer="kim", within_s=300)
        assert len(list(journal.events("r"))) == after == before + 2
        assert journal.current_claims(["r.01", "r.001"]) == {}
        assert journal.review_index_agrees()


def test_the_cli_says_no_review_item(tmp_path: Path) -> None:
    path = tmp_path / "j.sqlite"
    with Journal(path) as journal:
        _escalated(journal)
        before = len(list(journal.events("r")))
    env = {**{k: v for k, v in os.environ.items() if k != REVIEWER_ENV}, REVIEWER_ENV: "kim"}
    for args in (
        ("show", "r.01"),
        ("resolve", "r.01", "--decision", "2", "--note", "n"),
        ("undo", "r.001"),
    ):
        done = run_cli("review", *args, "--journal", path, env=env)
        assert done.returncode == 2, (args, done.stderr)
        assert re.search(r"no review item 'r\.0+1'", done.stderr), done.stderr
    with Journal(path) as journal:
        assert len(list(journal.events("r"))) == before
