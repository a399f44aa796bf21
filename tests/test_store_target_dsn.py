"""A journal target that means PostgreSQL but reads as a file path is refused.

A libpq keyword/value string (``host=... password=... dbname=...``) or a URL whose
scheme is not in lower case was taken for an SQLite file path: ``decide`` made a file
named after the credentials in the working directory, wrote the run there, and every
message (the review commands it printed, errors) quoted the password. It is now one
line, exit 2, with the password masked and nothing created; an existing file of such a
name still opens, and ``./NAME`` names one.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cli_helpers import cli
from dissensus.errors import InputError
from dissensus.store import Journal
from dissensus.store.targets import check_journal_target
from pipeline_cases import panel, write_jsonl

SECRET = "S3cretPW"


@pytest.mark.parametrize(
    "target",
    [
        f"host=127.0.0.1 port=5432 user=u password={SECRET} dbname=j",
        f"dbname=j password='{SECRET} x'",
        f"PostgreSQL://u:{SECRET}@127.0.0.1:5432/j",
        f"POSTGRES://u:{SECRET}@127.0.0.1/j",
    ],
)
def test_a_connection_string_is_refused_with_its_password_masked(
    tmp_path: Path, target: str
) -> None:
    inputs = write_jsonl(tmp_path / "in.jsonl", [panel("p1", ["1", "1", "2"])])
    for args in (
        ("decide", str(inputs), "--journal", target, "--similarity", "tfidf"),
        ("runs", "list", "--journal", target),
    ):
        done = cli(*args, cwd=tmp_path)
        assert done.code == 2, (args, done.out, done.err)
        assert SECRET not in done.err + done.out
        assert "postgres" in done.err and "://" in done.err
        assert len(done.err.strip().splitlines()) == 1
    done = cli("runs", "list", env={"DISSENSUS_JOURNAL": target}, cwd=tmp_path)
    assert done.code == 2 and SECRET not in done.err + done.out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl"]
    with pytest.raises(InputError):
        Journal(target)


def test_an_existing_file_of_such_a_name_and_dot_slash_stay_files(tmp_path: Path) -> None:
    old = os.getcwd()
    os.chdir(tmp_path)
    try:
        with Journal("./user=kim") as j:
            j.create_run("r", kind="t", meta={})
        with Journal("user=kim") as j:
            assert [r.run_id for r in j.runs()] == ["r"]
    finally:
        os.chdir(old)


@settings(max_examples=200, derandomize=True, deadline=None)
@given(st.text(min_size=1, max_size=40))
def test_a_password_keyword_is_never_shown(value: str) -> None:
    secret = "Zq9" + value.replace("'", "").replace("\\", "") + "Zq9"
    if any(c.isspace() for c in secret):
        return
    try:
        check_journal_target(f"host=h password={secret} dbname=j")
    except InputError as exc:
        assert secret not in str(exc)
    else:
        raise AssertionError("not refused")
