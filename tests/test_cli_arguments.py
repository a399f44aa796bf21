"""Arguments that name nothing usable: bytes that are not UTF-8 (a shell passes them as
lone surrogates) are one line naming the argument and exit 2 where they are used as text,
nothing written, and still fine as file names; an unknown ``--run`` is exit 2 in every
``review`` listing."""

from __future__ import annotations

from pathlib import Path

import pytest

from cli_helpers import cli
from dissensus.store import Journal
from pipeline_cases import panel, write_jsonl, write_policy

BAD = "a\udcff"


@pytest.fixture
def journal(tmp_path: Path) -> Path:
    inp = write_jsonl(tmp_path / "in.jsonl", [panel("p1", ["1", "2"])])
    pol = write_policy(tmp_path / "p.yaml")
    path = tmp_path / "j.sqlite"
    assert cli("decide", inp, "--policy", pol, "--journal", path, "--run-id", "R").code in (0, 3)
    return path


@pytest.mark.parametrize(
    "argv",
    [
        ["runs", "show", BAD],
        ["review", "list", "--run", BAD],
        ["review", "resolve", "R.1", "--decision", "1", "--note", BAD],
        ["review", "resolve", "R.1", "--decision", "1", "--note", "ok", "--reviewer", BAD],
    ],
)
def test_text_arguments_that_are_not_utf8_are_one_line(journal: Path, argv: list[str]) -> None:
    before = Journal(journal).verify("R")
    res = cli(*argv, "--journal", journal)
    assert res.code == 2, res.err
    # A review's text and reviewer are checked where every door checks them (naming the
    # field); a run id by the journal, which looks up no id it could not hold.
    named = {"--note": "the note", "--reviewer": "--reviewer"}.get(argv[-2])
    if named:
        assert res.err == (
            f"error: {named} is not valid Unicode text: a lone surrogate (U+DCFF) at character 2\n"
        )
    else:
        assert res.err.count("\n") == 1 and res.err.startswith("error: no run 'a\\udcff'")
        assert res.err.endswith(
            "invalid run id 'a\\udcff': it is not valid UTF-8: give text as UTF-8)\n"
        )
    with Journal(journal) as j:
        assert j.verify("R").n_events == before.n_events  # nothing written


def test_a_run_id_that_is_not_utf8_creates_no_run(tmp_path: Path) -> None:
    inp = write_jsonl(tmp_path / "in.jsonl", [panel("p1", ["1", "1"])])
    pol = write_policy(tmp_path / "p.yaml")
    path = tmp_path / "j.sqlite"
    res = cli("decide", inp, "--policy", pol, "--journal", path, "--run-id", BAD)
    assert res.code == 2 and "not valid UTF-8" in res.err
    with Journal(path) as j:
        assert [r.run_id for r in j.runs()] == []


def test_a_file_name_that_is_not_utf8_still_works(tmp_path: Path) -> None:
    inp = write_jsonl(tmp_path / "in\udcff.jsonl", [panel("p1", ["1", "1"])])
    res = cli("route", inp, "--similarity", "tfidf", "--json")
    assert res.code == 0, res.err
    assert '"id":"p1"' in res.out.replace(" ", "")


def test_review_audits_of_an_unknown_run_is_exit_2_as_review_list(journal: Path) -> None:
    for command in ("list", "audits"):
        res = cli("review", command, "--run", "nope", "--journal", journal)
        assert res.code == 2 and "nope" in res.err, (command, res.err)


def test_an_error_quoting_a_value_shows_its_escapes_once(journal: Path) -> None:
    """An error's words quote the values they name (``repr``: a backslash there is the
    quoting's own escape), so the line shows that escape once: ``'a\\x07'``, not
    ``'a\\\\x07'`` (a short field's doubling of a backslash of its own is for values
    shown bare, not for our messages)."""
    res = cli("runs", "show", "a\x07", "--journal", journal)
    assert res.code == 2 and res.err.count("\n") == 1
    assert "no run 'a\\x07'" in res.err and "\\\\x07" not in res.err
