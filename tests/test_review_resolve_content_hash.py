"""``review resolve --content-sha256``: a resolution from the command line bound to the
content the reviewer was shown, as the service's resolve is.

Before, ``review show`` printed no content hash and ``review resolve`` took none: a case
whose content changed between the reviewer's ``show`` and ``resolve`` was resolved all
the same, and a library caller quoting the hash in upper case was told the content had
changed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, seed, settings
from hypothesis import strategies as st

from cli_helpers import cli
from dissensus.pipeline.review import StaleContent, find_item, resolve
from dissensus.store.journal import open_journal
from pipeline_cases import panel


def _one_item(journal: str, tmp_path: Path) -> str:
    panels = tmp_path / "in.jsonl"
    panels.write_text(json.dumps(panel("p0", ["1", "2", "1"])) + "\n", encoding="utf-8")
    res = cli("decide", panels, "--journal", journal, "--run-id", "r1", "--json")
    assert res.code == 0, res.err
    return str(json.loads(res.out.splitlines()[0])["review_id"])


def _events(journal: str) -> int:
    with open_journal(journal) as store:
        return sum(1 for _ in store.events("r1"))


def test_show_prints_the_hash_and_resolve_refuses_a_stale_one(
    journal_target: str, tmp_path: Path
) -> None:
    rid = _one_item(journal_target, tmp_path)
    shown = cli("review", "show", rid, "--journal", journal_target, "--json")
    assert shown.code == 0, shown.err
    sha = json.loads(shown.out)["content_sha256"]
    assert len(sha) == 64 and sha == sha.lower()
    text = cli("review", "show", rid, "--journal", journal_target)
    assert f"content sha256: {sha}" in text.out
    assert f"--content-sha256 {sha}" in text.out  # the resolve command it suggests

    before = _events(journal_target)
    stale = cli(
        "review", "resolve", rid, "--journal", journal_target, "--decision", "1",
        "--note", "n", "--reviewer", "ann", "--content-sha256", "0" * 64,
    )  # fmt: skip
    assert stale.code == 1, (stale.out, stale.err)
    assert "content changed" in stale.err and "Traceback" not in stale.err
    assert _events(journal_target) == before  # nothing journalled
    with open_journal(journal_target) as store:
        assert find_item(store, rid).resolution is None

    upper = cli(
        "review", "resolve", rid, "--journal", journal_target, "--decision", "1",
        "--note", "n", "--reviewer", "ann", "--content-sha256", sha.upper(), "--json",
    )  # fmt: skip
    assert upper.code == 0, upper.err
    assert json.loads(upper.out)["decision"] == "1"


@pytest.mark.parametrize(
    "bad", ["", "abc", "0" * 63, "0" * 65, "g" * 64, "0x" + "0" * 62, "é" * 64, "0" * 10**5]
)
def test_resolve_refuses_a_hash_that_is_no_sha256(tmp_path: Path, bad: str) -> None:
    journal = str(tmp_path / "j.sqlite")
    rid = _one_item(journal, tmp_path)
    before = _events(journal)
    res = cli(
        "review", "resolve", rid, "--journal", journal, "--decision", "1", "--note", "n",
        "--reviewer", "ann", "--content-sha256", bad,
    )  # fmt: skip
    assert res.code == 2, (res.out, res.err)
    assert "--content-sha256" in res.err and "Traceback" not in res.err
    assert len(res.err) < 1000  # a long value is named in short
    assert _events(journal) == before


@seed(20261205)
@settings(max_examples=25, deadline=None)
@given(flips=st.lists(st.integers(min_value=0, max_value=63), max_size=64))
def test_library_resolve_reads_upper_case_hex_as_the_same_hash(
    tmp_path_factory: pytest.TempPathFactory, flips: list[int]
) -> None:
    tmp = tmp_path_factory.mktemp("h")
    journal = str(tmp / "j.sqlite")
    rid = _one_item(journal, tmp)
    with open_journal(journal) as store:
        sha = find_item(store, rid).content_sha256
        mixed = "".join(c.upper() if i in flips else c for i, c in enumerate(sha))
        record = resolve(store, rid, decision="1", note="n", reviewer="ann", content_sha256=mixed)
        assert record.decision == "1"


def test_library_resolve_still_refuses_other_content(tmp_path: Path) -> None:
    journal = str(tmp_path / "j.sqlite")
    rid = _one_item(journal, tmp_path)
    with open_journal(journal) as store:
        with pytest.raises(StaleContent):
            resolve(store, rid, decision="1", note="n", reviewer="ann", content_sha256="F" * 64)
        assert find_item(store, rid).resolution is None


def test_show_of_a_resolved_case_says_who_resolved_it_and_why(tmp_path: Path) -> None:
    """``review show`` of a resolved case printed only its decision: not who resolved
    it, nor the note they left, which the review page shows."""
    journal = str(tmp_path / "j.sqlite")
    rid = _one_item(journal, tmp_path)
    done = cli(
        "review", "resolve", rid, "--journal", journal, "--decision", "2",
        "--note", "[red]source 3[/red] outranks the others", "--reviewer", "ann",
    )  # fmt: skip
    assert done.code == 0, done.err
    text = cli("review", "show", rid, "--journal", journal).out
    assert "status: resolved: 2" in text
    assert "resolved by: ann" in text
    assert "note: [red]source 3[/red] outranks the others" in text  # verbatim, not markup
