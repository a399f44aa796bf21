"""Commands shown to the user name the journal they are about (``--journal``), unless a
command without the option opens it anyway, so that copied as shown they act on it."""

from __future__ import annotations

import json
import shlex
import stat
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cli_helpers import cli
from dissensus.errors import ConfigError
from dissensus.pipeline.batch import start_run
from dissensus.pipeline.spec import RunSpec
from dissensus.store import DEFAULT_JOURNAL, Journal, journal_option
from dissensus.store.targets import journal_path


def test_the_journal_a_bare_command_opens_is_not_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DISSENSUS_JOURNAL", raising=False)
    assert journal_option(DEFAULT_JOURNAL) == ""
    assert journal_option("other.sqlite") == " --journal other.sqlite"
    monkeypatch.setenv("DISSENSUS_JOURNAL", "/data/j.sqlite")
    assert journal_option("/data/j.sqlite") == ""
    assert journal_option(DEFAULT_JOURNAL) == f" --journal {DEFAULT_JOURNAL}"


def test_a_url_is_named_without_its_password(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DISSENSUS_JOURNAL", raising=False)
    shown = journal_option("postgresql://ann:s3cret@db.example/j")
    assert "s3cret" not in shown
    # Left out, not masked: pasted as shown, libpq takes it from $PGPASSWORD or
    # ~/.pgpass, where a masked "***" would be sent as the password.
    assert shlex.split(shown) == ["--journal", "postgresql://ann@db.example/j"]
    # The same server named by the environment with its password: nothing to add.
    monkeypatch.setenv("DISSENSUS_JOURNAL", "postgresql://ann:s3cret@db.example/j")
    assert journal_option("postgresql://ann:***@db.example/j") == ""


_PART = st.text(alphabet="abcxyz019-_.~%:@!$", min_size=1, max_size=8)


@given(
    user=st.sampled_from(["ann", "a.b", ""]),
    password=_PART,
    host=st.sampled_from(["db.example", "127.0.0.1", "[::1]", "h1:5432,h2", ""]),
    port=st.sampled_from(["", ":5432"]),
    params=st.lists(
        st.sampled_from(["sslmode=require", "connect_timeout=3", "application_name=x"]),
        max_size=2,
    ),
    secret=st.sampled_from([None, "password", "sslpassword", "pass%77ord"]),
    value=st.sampled_from(["hidden", "hid#den", "hid%23den"]),
    secret_at=st.integers(0, 2),
)
def test_a_command_names_the_same_server_without_any_password(
    user: str,
    password: str,
    host: str,
    port: str,
    params: list[str],
    secret: str | None,
    value: str,
    secret_at: int,
) -> None:
    """What libpq reads from the URL in a command is what it reads from the journal's
    URL, without the password (user-info or query parameter): a host list, an empty host
    (the host in the query) and a ``#`` in a value (no fragment to libpq) included."""
    from urllib.parse import quote

    from psycopg.conninfo import conninfo_to_dict

    from dissensus.store.targets import command_url

    query = list(params)
    if secret is not None:
        query.insert(min(secret_at, len(query)), f"{secret}={value}")
    if not host:
        query.append("host=127.0.0.1")
        port = ""
    elif "," in host:
        port = ""
    url = f"postgresql://{user}:{quote(password, safe='')}@{host}{port}/j"
    url += ("?" + "&".join(query)) if query else ""
    shown = command_url(url)
    assert shown.startswith("postgresql://")
    assert "@" not in shown or ":" not in shown.split("://", 1)[1].split("@", 1)[0]
    assert "hid" not in shown
    given_ = conninfo_to_dict(url)
    expected = {k: v for k, v in given_.items() if k not in ("password", "sslpassword")}
    assert conninfo_to_dict(shown) == expected


@given(st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc")), min_size=1))
def test_any_path_survives_the_shell(name: str) -> None:
    shown = journal_option(f"/tmp/{name}")
    words = shlex.split(shown)
    assert words == ["--journal", f"/tmp/{name}"]


def test_an_existing_runs_message_names_its_resume_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The command is the message's end, unquoted, so a path holding a quote survives a
    copy (it was wrapped in quotes of its own, which the path's quoting broke)."""
    monkeypatch.delenv("DISSENSUS_JOURNAL", raising=False)
    path = str(tmp_path / "it's my journal.sqlite")
    (tmp_path / "in.jsonl").write_text("")
    with Journal(path) as journal:
        spec = RunSpec.from_policy(None)
        start_run(journal, str(tmp_path / "in.jsonl"), spec, run_id="R")
        with pytest.raises(ConfigError) as caught:
            start_run(journal, str(tmp_path / "in.jsonl"), spec, run_id="R")
    command = str(caught.value).split("resume it with: ", 1)[1]
    assert shlex.split(command) == ["dissensus", "runs", "resume", "R", "--journal", path]


def test_a_deadlines_message_ends_with_its_resume_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pipeline_cases import panel, write_jsonl

    monkeypatch.delenv("DISSENSUS_JOURNAL", raising=False)
    path = tmp_path / "it's j.sqlite"
    inp = write_jsonl(tmp_path / "in.jsonl", [panel(f"p{i}", ["1", "2"]) for i in range(2000)])
    res = cli("decide", inp, "--similarity", "tfidf", "--deadline", "0.001", "--json",
              "--journal", path, "--run-id", "D")  # fmt: skip
    assert res.code == 1, res.err
    command = res.err.strip().split("finish it with: ", 1)[1]
    assert shlex.split(command) == [
        "dissensus", "runs", "resume", "D", "--journal", str(path), "--json"
    ]  # fmt: skip


@pytest.mark.parametrize(
    "command",
    [["runs", "list"], ["review", "list"], ["decide", "-"], ["runs", "resume", "r1"], ["mcp"]],
)
@pytest.mark.parametrize("empty", ["", "  "])
def test_an_empty_journal_option_is_refused_not_the_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: list[str], empty: str
) -> None:
    """``--journal "$UNSET"`` is exit 2 naming the journal; it never writes the default file."""
    monkeypatch.delenv("DISSENSUS_JOURNAL", raising=False)
    res = cli(*command, "--journal", empty, stdin=b"", cwd=tmp_path)
    assert res.code == 2, res.err
    assert "journal is an empty path" in res.err
    assert not (tmp_path / DEFAULT_JOURNAL).exists()


def test_an_empty_environment_journal_counts_as_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DISSENSUS_JOURNAL", "")
    assert journal_path(None) == DEFAULT_JOURNAL
    with pytest.raises(ConfigError, match="empty path"):
        journal_path("")


def test_a_hash_in_a_query_password_is_masked_whole() -> None:
    """libpq reads no fragment: ``?password=s3cr#tP4ss`` is the password ``s3cr#tP4ss``,
    masked and scrubbed whole, its tail never shown."""
    from dissensus.store.targets import mask_url, scrub_secrets

    url = "postgresql://u@127.0.0.1:1/db?password=s3cr#tP4ss&sslmode=require"
    shown = mask_url(url)
    assert "s3cr" not in shown and "tP4ss" not in shown
    assert shown.endswith("?password=***&sslmode=require")
    said = scrub_secrets(f"connection failed: password s3cr#tP4ss for {url}", url)
    assert "s3cr" not in said and "tP4ss" not in said


def test_a_deadlines_resume_command_names_its_output_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run writing into ``--output`` names that file in the command that finishes it:
    copied as shown, the command writes every record there (without it, the resumed run
    printed a table, and the file kept only the records of before the stop)."""
    from pipeline_cases import panel, write_jsonl

    monkeypatch.delenv("DISSENSUS_JOURNAL", raising=False)
    path, out = tmp_path / "j.sqlite", tmp_path / "it's out.jsonl"
    inp = write_jsonl(tmp_path / "in.jsonl", [panel(f"p{i}", ["1", "2"]) for i in range(2000)])
    res = cli("decide", inp, "--similarity", "tfidf", "--deadline", "0.001", "--output", out,
              "--journal", path, "--run-id", "D")  # fmt: skip
    assert res.code == 1, res.err
    command = res.err.strip().splitlines()[-1].split("finish it with: ", 1)[1]
    words = shlex.split(command)
    assert words == ["dissensus", "runs", "resume", "D", "--journal", str(path), "--output", str(out)]  # fmt: skip
    assert cli(*words[1:]).code == 0
    assert len(out.read_text(encoding="utf-8").splitlines()) == 2000


def test_an_interrupts_resume_command_names_its_output_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from dissensus.cli.decide import said_interrupted

    monkeypatch.delenv("DISSENSUS_JOURNAL", raising=False)
    monkeypatch.setattr("dissensus.cli.decide.INTERRUPT_SAID", [])  # no state left behind
    path = tmp_path / "j.sqlite"
    with Journal(str(path)) as journal:
        assert said_interrupted(journal, "R", str(tmp_path / "o 1.jsonl")) == 130
        said_interrupted(journal, "R")
    first, second = capsys.readouterr().err.splitlines()
    resume = ["dissensus", "runs", "resume", "R", "--journal", str(path)]
    assert shlex.split(first.split("resume with ", 1)[1]) == [
        *resume, "--output", str(tmp_path / "o 1.jsonl")
    ]  # fmt: skip
    assert shlex.split(second.split("resume with ", 1)[1]) == resume


def test_a_journal_that_is_a_link_to_nothing_says_so(tmp_path: Path) -> None:
    """A loop of symbolic links was "journal not found: la" (runs list) or "cannot open
    journal la: unable to open database file" (decide); a broken link to be read, "journal
    not found" alone: both named a file ``ls`` shows. A new journal is still made through
    a broken link, where it leads."""
    (tmp_path / "la").symlink_to("lb")
    (tmp_path / "lb").symlink_to("la")
    (tmp_path / "lc").symlink_to("gone.sqlite")
    panels = tmp_path / "p.jsonl"
    outputs = [{"agent": a, "decision": "1", "reasoning": "r"} for a in "ab"]
    panels.write_text(json.dumps({"id": "a", "outputs": outputs}) + "\n", encoding="utf-8")
    for command, name, why in (
        (["runs", "list"], "la", "(a loop of symbolic links)"),
        (["decide", str(panels), "--similarity", "tfidf"], "la", "(a loop of symbolic links)"),
        (["runs", "list"], "lc", "(a broken symbolic link to gone.sqlite)"),
    ):
        res = cli(*command, "--journal", name, cwd=tmp_path)
        assert res.code == 2, res.err
        assert res.err.strip() == f"error: journal not found: {name} {why}", command
    assert (tmp_path / "la").is_symlink() and (tmp_path / "lb").is_symlink()
    assert not (tmp_path / "gone.sqlite").exists()
    res = cli("decide", panels, "--similarity", "tfidf", "--journal", "lc", cwd=tmp_path)
    assert res.code == 0, res.err
    assert (tmp_path / "lc").is_symlink() and (tmp_path / "gone.sqlite").is_file()
    assert stat.S_IMODE((tmp_path / "gone.sqlite").stat().st_mode) == 0o600  # as any journal
