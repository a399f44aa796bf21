"""The queue page's run filter with a journal of many runs (the chat door journals one
per request): the page suggests the newest :data:`RUN_CHOICES` decide runs, the run
filtered on and any run id typed still work, and no list of the page reads every run;
the store's :meth:`~dissensus.store.journal.Journal.newest_runs` on both back ends."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipeline_cases import as_panel, panel
from serve_helpers import client_for, heap_frozen, login, settings
from store_backends import BACKENDS, target_for

pytestmark = pytest.mark.anyio

MANY = 230
"""Bare decide runs journalled after the escalated one (more than the page suggests)."""


@pytest.fixture(scope="module", autouse=True)
def _heap_frozen() -> Iterator[None]:
    yield from heap_frozen()


def _journal(path: Path) -> tuple[str, list[str]]:
    """A journal with one escalated case in run ``old-one``, then :data:`MANY` decide runs
    and a few of another kind; the escalated case's review id and the decide runs, oldest
    first."""
    from dissensus.pipeline import decide, policy_from_dict
    from dissensus.store import Journal

    policy = policy_from_dict({"reading": {"similarity": "tfidf", "theta_s": 0.3}})
    row = panel("p1", ["1", "2", "1"], values=[{"a": 1.0}, {"b": 1.0}, {"a": 0.5}])
    with Journal(path) as journal:
        record = decide(as_panel(row), policy, journal=journal, run_id="old-one")
        assert record.review_id
        with journal.transaction():
            for i in range(MANY):
                journal.create_run(f"chat-{i:04d}", kind="decide", meta={})
            for i in range(3):
                journal.create_run(f"other-{i}", kind="evaluate", meta={})
    return record.review_id, ["old-one"] + [f"chat-{i:04d}" for i in range(MANY)]


def _choices(html: str) -> list[str]:
    found = re.search(r'<datalist id="run-choices">(.*?)</datalist>', html, re.S)
    assert found, html[:3000]
    return re.findall(r'<option value="([^"]*)">', found.group(1))


async def test_the_run_filter_suggests_the_newest_runs_and_takes_any(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dissensus.serve.routes import pages_queue

    RUN_CHOICES = getattr(pages_queue, "RUN_CHOICES", 200)
    review_id, decide_runs = _journal(tmp_path / "journal.sqlite")
    assert len(decide_runs) > RUN_CHOICES

    # No list of the page reads every run of the journal.
    def every_run(*args: object, **kwargs: object) -> None:
        raise AssertionError("the queue page read every run")

    monkeypatch.setattr("dissensus.store.journal.Journal.runs", every_run)
    async with client_for(settings(tmp_path)) as client:
        await login(client, "rev")
        page = await client.get("/review")
        assert page.status_code == 200, page.text[:2000]
        assert _choices(page.text) == decide_runs[::-1][:RUN_CHOICES]  # newest first
        assert 'name="run" list="run-choices" value=""' in page.text
        assert f'href="/review/case/{review_id}"' in page.text
        assert 'id="no-run"' not in page.text
        # The run started column names the run of the row shown.
        assert re.search(r'<time datetime="\d{4}-\d\d-\d\dT[^"]+">', page.text)

        # An older run, not suggested, typed in the field (or given as ?run=).
        old = await client.get("/review", params={"run": "old-one"})
        assert old.status_code == 200
        assert 'name="run" list="run-choices" value="old-one"' in old.text
        assert f'href="/review/case/{review_id}?run=old-one"' in old.text
        choices = _choices(old.text)
        assert "old-one" in choices and len(choices) == RUN_CHOICES + 1
        newer = await client.get("/review", params={"run": decide_runs[-1]})
        assert "Nothing to review here." in newer.text and 'id="no-run"' not in newer.text
        assert len(_choices(newer.text)) == RUN_CHOICES  # already suggested: not twice

        # A run the journal does not hold: an empty list saying so.
        none = await client.get("/review", params={"run": "no-such-run"})
        assert none.status_code == 200
        assert 'id="no-run"' in none.text and "no-such-run" in none.text
        assert f"/review/case/{review_id}" not in none.text

        for status in ("automatic", "audits", "resolved", "all"):
            listed = await client.get("/review", params={"status": status})
            assert listed.status_code == 200, (status, listed.text[:2000])
            assert len(_choices(listed.text)) == RUN_CHOICES


@pytest.mark.parametrize("backend", BACKENDS)
def test_newest_runs_newest_first_of_a_kind(backend: str, tmp_path: Path) -> None:
    from dissensus.store import Journal

    with target_for(backend, tmp_path) as target, Journal(target) as journal:
        made = []
        with journal.transaction():
            for i in range(12):
                kind = "evaluate" if i % 4 == 3 else "decide"
                journal.create_run(f"r-{i:02d}", kind=kind, meta={})
                made.append((f"r-{i:02d}", kind))
        oldest_first = [info.run_id for info in journal.runs()]
        assert sorted(oldest_first) == [run for run, _ in made]
        newest = journal.newest_runs(5)
        assert [info.run_id for info in newest] == oldest_first[::-1][:5]
        decide = [run for run in oldest_first if dict(made)[run] == "decide"]
        got = journal.newest_runs(4, kind="decide")
        assert [info.run_id for info in got] == decide[::-1][:4]
        assert all(info.kind == "decide" for info in got)
        assert [i.run_id for i in journal.newest_runs(100)] == oldest_first[::-1]
        assert journal.newest_runs(0) == []
        assert journal.newest_runs(3, kind="calibrate") == []


def test_newest_runs_read_the_runs_index_backwards(tmp_path: Path) -> None:
    """SQLite's plan: the ``(created, run_id)`` index, no sort of the whole table."""
    import sqlite3

    from dissensus.store import Journal

    path = tmp_path / "j.sqlite"
    with Journal(path) as journal:
        journal.create_run("r1", kind="decide", meta={})
    sql = "SELECT * FROM runs WHERE kind = ? ORDER BY created DESC, run_id DESC LIMIT 200"
    with sqlite3.connect(path) as conn:
        plan = " ".join(
            str(row[-1]) for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}", ("decide",))
        )
    assert "runs_created" in plan and "TEMP B-TREE" not in plan, plan
