"""A run's header (``runs``: ``created``, ``kind``, ``meta``) is checked by ``runs verify``.

The header is what ``runs list`` and ``runs show`` display; it lies outside the hash
chain, and an edit of it (``UPDATE runs SET kind = 'x'``) used to leave ``runs verify``
at OK. Verification now compares each column with what the run's ``run.started`` event
says (the event the header is made from), on both back ends, and a journal written by an
earlier version (whose ``run.started`` does not name the kind, nor the door, and whose
header time is not the event's) still verifies.
"""

from __future__ import annotations

import itertools
import json
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from cli_helpers import run_cli
from dissensus.pipeline.batch import start_run
from dissensus.pipeline.policy import Policy
from dissensus.pipeline.spec import RunSpec
from dissensus.quoting import quote_short
from dissensus.store import Journal
from dissensus.store.canonical import canonical
from dissensus.store.run_header import SHOWN
from store_backends import BACKENDS, raw
from test_store_migrations import RUN_02, _copy_rows, _journal_02

COLUMNS = ("created", "kind", "meta")
EDITS = {
    "created": "2020-01-01T00:00:00.000000+00:00",
    "kind": "forged",
    "meta": canonical({"input": "/elsewhere.jsonl", "policy_file": "p.yaml", "via": "serve"}),
}
"""One edit per column, each what ``runs list`` would then show."""


def _start(
    journal: Journal,
    run_id: str,
    *,
    text: str = '{"id": "x"}\n',
    path: Path | None = None,
    via: str | None = "serve",
    policy_file: str | None = "p.yaml",
    kind: str = "decide",
) -> None:
    """A run as a door starts it: the header and ``run.started`` in one transaction."""
    spec = RunSpec.from_policy(Policy(), policy_file=policy_file)
    if path is not None:
        start_run(journal, str(path), spec, run_id=run_id, via=via, kind=kind)
    else:
        start_run(journal, None, spec, text=text, run_id=run_id, via=via, kind=kind)


def _header(target: str, run_id: str) -> dict[str, str]:
    ((created, kind, meta),) = raw(
        target, "SELECT created, kind, meta FROM runs WHERE run_id = ?", (run_id,)
    )
    return {"created": created, "kind": kind, "meta": meta}


def _said(run_id: str, column: str, header: str, journal: str) -> str:
    return (
        f"run {quote_short(run_id)}: header {column} is {quote_short(header, SHOWN)}, "
        f"its run.started event says {quote_short(journal, SHOWN)}"
    )


@pytest.mark.parametrize("journal_target", BACKENDS, indirect=True)
@pytest.mark.parametrize("column", COLUMNS)
def test_an_edited_header_column_fails_verify_naming_both_values(
    journal_target: str, column: str
) -> None:
    """Each column edited alone: ``runs verify`` fails (exit 1) naming the run, the
    column, what the header holds and what the journal says, which is what it held."""
    target = journal_target
    with Journal(target) as journal:
        _start(journal, "r1")
        assert journal.verify("r1").ok
    before = _header(target, "r1")
    raw(target, f"UPDATE runs SET {column} = ? WHERE run_id = 'r1'", (EDITS[column],))
    with Journal(target) as journal:
        report = journal.verify("r1")
        (listed,) = journal.runs()
    # What the listing shows is the edited value (the chain alone did not notice it).
    assert (listed.meta if column == "meta" else getattr(listed, column)) == (
        json.loads(EDITS["meta"]) if column == "meta" else EDITS[column]
    )
    assert not report.ok
    assert report.problems == [_said("r1", column, EDITS[column], before[column])]
    done = run_cli("runs", "verify", "r1", "--journal", target)
    assert done.returncode == 1, done.stderr
    assert "FAILED" in done.stderr and f"header {column} is" in done.stderr
    assert EDITS[column][:20] in done.stderr
    # Put back, the header verifies again.
    raw(target, f"UPDATE runs SET {column} = ? WHERE run_id = 'r1'", (before[column],))
    assert run_cli("runs", "verify", "r1", "--journal", target).returncode == 0


@pytest.mark.parametrize("journal_target", BACKENDS, indirect=True)
def test_a_new_runs_header_is_made_from_its_run_started_event(
    journal_target: str, tmp_path: Path
) -> None:
    """``created`` is the event's time, ``kind`` and ``meta`` what the event says: the
    door (``via``) and the kind are journalled in ``run.started``."""
    target = journal_target
    data = tmp_path / "in.jsonl"
    data.write_text('{"id": "x"}\n', encoding="utf-8")
    with Journal(target) as journal:
        _start(journal, "a", via="mcp", kind="nightly")
        _start(journal, "b", path=data, via=None, policy_file=None)
        for run_id in ("a", "b"):
            started = journal.get(run_id, "run/started")
            assert started is not None
            info = journal.run(run_id)
            assert info is not None and info.created == started.at
            assert info.kind == started.payload["kind"]
            assert journal.verify(run_id).ok
        info_a, info_b = journal.run("a"), journal.run("b")
    assert info_a is not None and info_b is not None
    assert (info_a.kind, info_a.meta) == (
        "nightly",
        {"input": "-", "policy_file": "p.yaml", "via": "mcp"},
    )
    assert (info_b.kind, info_b.meta) == ("decide", {"input": str(data), "policy_file": None})


@pytest.mark.parametrize("journal_target", BACKENDS, indirect=True)
def test_a_meta_edited_into_text_that_is_no_json_is_a_problem_not_an_error(
    journal_target: str,
) -> None:
    target = journal_target
    with Journal(target) as journal:
        _start(journal, "r1")
    before = _header(target, "r1")
    raw(target, "UPDATE runs SET meta = 'not json' WHERE run_id = 'r1'")
    with Journal(target) as journal:
        report = journal.verify("r1")
    assert report.problems == [_said("r1", "meta", "not json", before["meta"])]
    done = run_cli("runs", "verify", "r1", "--journal", target)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr


# -- journals written by earlier versions ------------------------------------------------


def _journal_02_on(backend: str, tmp_path: Path, url: str) -> str:
    source = _journal_02(tmp_path)
    if backend == "sqlite":
        return source
    import psycopg

    fixtures = Path(__file__).parent / "fixtures"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute((fixtures / "journal-0.2-postgres.sql").read_text())  # type: ignore[arg-type]
    for table in ("runs", "events", "review_index"):
        _copy_rows(source, url, table)
    return url


@pytest.mark.parametrize("journal_target", BACKENDS, indirect=True)
def test_a_02_journals_header_verifies_and_its_derivable_columns_are_checked(
    journal_target: str, tmp_path: Path
) -> None:
    """The 0.2 run's header was made a moment before its ``run.started`` and names no
    kind: it verifies. Its kind (every such run's is ``decide``), its input and policy
    file are still checked, and a time after its ``run.started``; an earlier time is not
    derivable for such a run (documented) and verifies."""
    target = _journal_02_on(
        "postgres" if journal_target.startswith("postgresql") else "sqlite",
        tmp_path,
        journal_target,
    )
    with Journal(target) as journal:
        report = journal.verify(RUN_02)
        started = journal.get(RUN_02, "run/started")
    assert report.ok, report.problems
    assert started is not None and "kind" not in started.payload
    before = _header(target, RUN_02)
    assert before["created"] < started.at  # made before its event: not the event's time
    meta = json.loads(before["meta"])
    later = (datetime.fromisoformat(started.at) + timedelta(seconds=1)).isoformat()
    edits: dict[str, str] = {
        "kind": "forged",
        "meta": canonical({**meta, "input": "/elsewhere.jsonl"}),
        "created": later,
    }
    for column, value in edits.items():
        raw(target, f"UPDATE runs SET {column} = ? WHERE run_id = ?", (value, RUN_02))
        with Journal(target) as journal:
            problems = journal.verify(RUN_02).problems
        raw(target, f"UPDATE runs SET {column} = ? WHERE run_id = ?", (before[column], RUN_02))
        assert (
            len(problems) == 1 and f"header {column} is {quote_short(value, SHOWN)}" in problems[0]
        )
    assert "later than its run.started event" in problems[0]
    # What an earlier version's run does not journal: a time before its event, the door.
    earlier = (datetime.fromisoformat(started.at) - timedelta(days=400)).isoformat()
    raw(target, "UPDATE runs SET created = ? WHERE run_id = ?", (earlier, RUN_02))
    raw(
        target,
        "UPDATE runs SET meta = ? WHERE run_id = ?",
        (canonical({**meta, "via": "serve"}), RUN_02),
    )
    with Journal(target) as journal:
        assert journal.verify(RUN_02).ok


@pytest.mark.parametrize("journal_target", BACKENDS, indirect=True)
def test_a_run_without_run_started_has_no_header_to_compare(journal_target: str) -> None:
    """An earlier version's one-panel run (``decide-one``, ``meta: {panel}``) had no
    ``run.started``, nor has a run made through the journal's API without one: their
    header is not derivable and verification checks their chain alone."""
    target = journal_target
    with Journal(target) as journal:
        journal.create_run("old", kind="decide-one", meta={"panel": "p1"})
        journal.append("old", "case.record", {"action": "auto"}, key="record/1", case="1")
        journal.create_run("api", kind="t", meta={}, first=("run.started", {"x": 1}, "run/started"))
    raw(target, "UPDATE runs SET kind = 'other', meta = '{}', created = '2000-01-01'")
    with Journal(target) as journal:
        assert journal.verify("old").ok and journal.verify("api").ok


# -- the property ------------------------------------------------------------------------

_PLAIN = st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00")
_WORDS = st.text(_PLAIN, min_size=1, max_size=12)
_RUNS = st.fixed_dictionaries(
    {
        "via": st.one_of(st.none(), st.sampled_from(["serve", "mcp", "shift-watch"]), _WORDS),
        "policy_file": st.one_of(st.none(), _WORDS),
        "kind": st.one_of(st.just("decide"), _WORDS),
        "input": st.one_of(
            st.tuples(st.just("text"), st.text(_PLAIN, max_size=30)),
            st.tuples(st.just("file"), st.from_regex(r"[a-z0-9é _-]{1,12}", fullmatch=True)),
        ),
    }
)
_IDS = itertools.count()


def _new_value(data: st.DataObject, column: str, old: str) -> str:
    """Another value of ``column`` than ``old``: a neighbour of it, or anything."""
    if column == "created":
        moved = st.integers(1, 10**12).flatmap(
            lambda us: st.sampled_from([-us, us]).map(
                lambda d: (datetime.fromisoformat(old) + timedelta(microseconds=d)).isoformat(
                    timespec="microseconds"
                )
            )
        )
        new = data.draw(st.one_of(moved, _WORDS), label="created")
    elif column == "kind":
        new = data.draw(_WORDS, label="kind")
    else:
        meta: dict[str, Any] = json.loads(old)
        changed = st.sampled_from([*sorted(meta), "via", "extra"]).flatmap(
            lambda key: st.one_of(st.none(), _WORDS).map(lambda v: canonical({**meta, key: v}))
        )
        dropped = st.sampled_from(sorted(meta)).map(
            lambda key: canonical({k: v for k, v in meta.items() if k != key})
        )
        respelled = st.just(json.dumps(meta, ensure_ascii=False))  # same content, other text
        new = data.draw(st.one_of(changed, dropped, respelled, _WORDS, st.just("{}")), label="meta")
    assume(new != old)
    return new


@pytest.mark.parametrize("journal_target", BACKENDS, indirect=True)
@settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(run=_RUNS, column=st.sampled_from(COLUMNS), data=st.data())
def test_any_single_edit_of_a_header_column_is_caught(
    journal_target: str,
    tmp_path: Path,
    run: dict[str, Any],
    column: str,
    data: st.DataObject,
) -> None:
    """A random run verifies as written; any one edit of one of its header's columns
    makes verification fail naming that column, and nothing else."""
    target = journal_target
    run_id = f"run{next(_IDS)}"
    how, what = run["input"]
    path = None
    if how == "file":
        path = tmp_path / what
        path.write_text('{"id": "x"}\n', encoding="utf-8")
    with Journal(target) as journal:
        _start(
            journal,
            run_id,
            text=what,
            path=path,
            via=run["via"],
            policy_file=run["policy_file"],
            kind=run["kind"],
        )
        assert journal.verify(run_id).ok
    old = _header(target, run_id)[column]
    new = _new_value(data, column, old)
    raw(target, f"UPDATE runs SET {column} = ? WHERE run_id = ?", (new, run_id))
    with Journal(target) as journal:
        report = journal.verify(run_id)
    assert not report.ok
    assert report.problems == [_said(run_id, column, new, old)]
