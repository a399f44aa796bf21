"""The human review queue: escalate -> list -> show -> resolve -> the case resumes with it."""

from __future__ import annotations

import json
import multiprocessing
import os
import re
import signal
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest

from cli_helpers import run_cli, run_steps
from dissensus.errors import DissensusError, InputError
from dissensus.pipeline import decide, policy_from_dict
from dissensus.pipeline.review import (
    AlreadyResolved,
    ClaimConflict,
    StaleContent,
    claim,
    claim_next,
    complete_resolutions,
    content_sha256,
    final_records,
    find_item,
    list_items,
    resolve,
)
from dissensus.store import Event, Journal, UnknownRun
from dissensus.store.errors import JournalBusy
from pipeline_cases import as_panel, panel, write_jsonl, write_policy

POLICY = policy_from_dict({"reading": {"similarity": "tfidf", "theta_s": 0.3}})


def _escalated(journal: Journal, run_id: str) -> str:
    row = panel(
        "vc",
        ["1", "2", "1"],
        values=[{"a": 1.0}, {"b": 1.0}, {"a": 0.5}],
        reasoning=["Option 1 is right."] * 3,
    )
    record = decide(as_panel(row), POLICY, journal=journal, run_id=run_id)
    assert record.action == "escalate" and record.review_id
    return record.review_id


def test_resolution_round_trip(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "j.sqlite")
    review_id = _escalated(journal, "run1")
    assert [s.item.review_id for s in list_items(journal)] == [review_id]
    status = find_item(journal, review_id)
    assert status.resolution is None and status.item.options == ["1", "2"]

    record = resolve(journal, review_id, decision="2", note="policy says 2", reviewer="kim")
    assert (record.action, record.decision, record.auto, record.basis) == (
        "human",
        "2",
        False,
        "human",
    )
    assert record.resolution is not None and record.resolution.note == "policy says 2"
    assert record.path[-1] == "human:resolved"

    assert list(list_items(journal)) == []
    assert [
        s.resolution.decision for s in list_items(journal, include_resolved=True) if s.resolution
    ] == ["2"]
    assert [r.decision for r in final_records(journal, "run1")] == ["2"]
    assert journal.verify("run1").ok
    types = [e.type for e in journal.events("run1")]
    assert types[-2:] == ["review.resolved", "case.resolved"]
    with pytest.raises(DissensusError, match="already resolved"):
        resolve(journal, review_id, decision="1", note="again")
    journal.close()


def test_unknown_or_malformed_review_ids_are_input_errors(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "j.sqlite")
    _escalated(journal, "run1")
    for bad in ("nodot", "run1.x", "nope.1", "run1.99"):
        with pytest.raises(InputError):
            find_item(journal, bad)
    journal.close()


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(*args)


def test_cli_review_list_show_resolve(tmp_path: Path) -> None:
    """One batch through the CLI: the escalated case never blocks the others; a human resolves it."""
    rows = [
        panel(
            "vc",
            ["1", "2", "1"],
            values=[{"a": 1.0}, {"b": 1.0}, {"a": 0.5}],
            reasoning=["Option 1 is right."] * 3,
        ),
        panel("ok", ["1", "1", "1"], swap=["1", "1", "1"]),
    ]
    inp = write_jsonl(tmp_path / "in.jsonl", rows)
    pol = write_policy(tmp_path / "policy.yaml")
    journal = str(tmp_path / "j.sqlite")
    steps = [
        ["decide", str(inp), "--policy", str(pol), "--journal", journal, "--run-id", "R", "--json"],
        ["review", "list", "--journal", journal, "--json"],
        ["review", "show", "R.1", "--journal", journal],
        [
            "review",
            "resolve",
            "R.1",
            "--decision",
            "2",
            "--note",
            "checked the contract",
            "--journal",
            journal,
        ],
        ["review", "list", "--journal", journal],
        ["runs", "show", "R", "--journal", journal, "--json"],
        ["runs", "verify", "R", "--journal", journal],
    ]
    proc = run_steps(steps)
    assert proc.returncode == 0, proc.stderr
    chunks = proc.stdout.split("<<< ")
    codes = [int(c.split("\n", 1)[0]) for c in chunks[1:]]
    assert codes == [0] * len(steps)
    outputs = [chunks[0]] + [c.split("\n", 1)[1] if "\n" in c else "" for c in chunks[1:]]
    decided = [json.loads(line) for line in outputs[0].splitlines()]
    assert [(d["id"], d["action"], d["auto"]) for d in decided] == [
        ("vc", "escalate", False),
        ("ok", "auto_explain", True),
    ]
    assert all({"id", "action", "decision", "auto", "reason"} <= set(d) for d in decided)
    listed = [json.loads(line) for line in outputs[1].splitlines()]
    assert [(x["review_id"], x["status"]) for x in listed] == [("R.1", "open")]
    shown = outputs[2]
    assert "why escalated" in shown and "a1" in shown and "a2" in shown
    assert "resolved R.1" in outputs[3]
    assert "no review items open" in outputs[4]
    run = json.loads(outputs[5])
    assert [r["decision"] for r in run["records"]] == ["2", "1"] and run["finished"]
    assert "OK" in outputs[6]


def test_review_show_says_when_the_packet_came_from_a_failed_deliberation(tmp_path: Path) -> None:
    (tmp_path / "none.yaml").write_text("rules: []\n", encoding="utf-8")  # every model call fails
    policy = policy_from_dict(
        {
            "reading": {"similarity": "tfidf", "theta_s": 0.3},
            "routing": {"convergent_disagreement_without_values": "seek_context"},
            "seek_context": {"followup": "dci", "model": f"scripted:{tmp_path / 'none.yaml'}"},
        }
    )
    journal = Journal(tmp_path / "j.sqlite")
    record = decide(as_panel(panel("d", ["1", "2", "2"])), policy, journal=journal, run_id="R")
    journal.close()
    assert record.review_id == "R.1"
    proc = _cli("review", "show", "R.1", "--journal", str(tmp_path / "j.sqlite"))
    assert proc.returncode == 0, proc.stderr
    flat = " ".join(proc.stdout.split())
    assert "DCI packet: path fallback:" in flat
    assert "packet status: model_failure" in flat


def test_cli_resolve_flags_a_decision_outside_the_options(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "j.sqlite")
    review_id = _escalated(journal, "R")
    journal.close()
    proc = _cli(
        "review",
        "resolve",
        review_id,
        "--decision",
        "7",
        "--note",
        "typo?",
        "--journal",
        str(tmp_path / "j.sqlite"),
    )
    assert proc.returncode == 0, proc.stderr
    assert "'7' is none of the case's options (1, 2)" in " ".join(proc.stderr.split())
    with Journal(tmp_path / "j.sqlite") as j:
        event = j.get("R", "review/1/resolved")
        assert event is not None and event.payload["outside_options"] is True


def test_cli_show_names_the_resolve_command_only_while_open(tmp_path: Path) -> None:
    path = str(tmp_path / "j.sqlite")
    with Journal(path) as journal:
        review_id = _escalated(journal, "R")
    opened = _cli("review", "show", review_id, "--journal", path)
    assert opened.returncode == 0, opened.stderr
    # The command names the journal shown, so it can be run as it is.
    assert f"resolve: dissensus review resolve {review_id} --journal {path} " in opened.stdout
    done = _cli(
        "review", "resolve", review_id, "--decision", "1", "--note", "ok", "--reviewer", "ann",
        "--journal", path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    resolved = _cli("review", "show", review_id, "--journal", path)
    assert resolved.returncode == 0, resolved.stderr
    flat = " ".join(resolved.stdout.split())
    assert "status: resolved: 1" in flat
    assert "dissensus review resolve" not in flat
    assert (
        f"undo: dissensus review undo {review_id} --journal {path} --reviewer ann "
        "(by ann, within 300 s of resolving)" in flat
    )
    # The command shown undoes it as it is (as its reviewer, whoever runs it).
    undone = _cli("review", "undo", review_id, "--journal", path, "--reviewer", "ann")
    assert undone.returncode == 0, undone.stderr
    # Past the undo window, no command is named at all.
    from dissensus.cli.review import _within

    assert not _within("2020-01-01T00:00:00+00:00", 300.0) and not _within(None, 300.0)


# -- atomic resolutions, races, content binding, claims (both back ends) ----------------


def test_concurrent_resolvers_have_exactly_one_winner_and_the_others_learn_who(
    journal_target: str,
) -> None:
    with Journal(journal_target) as journal:
        review_id = _escalated(journal, "race")
    barrier = threading.Barrier(6)
    outcomes: dict[str, str] = {}

    def reviewer(name: str) -> None:
        with Journal(journal_target) as j:
            barrier.wait()
            try:
                resolve(j, review_id, decision="2", note=f"{name} decided", reviewer=name)
                outcomes[name] = "won"
            except AlreadyResolved as exc:
                outcomes[name] = str(exc)

    threads = [threading.Thread(target=reviewer, args=(f"r{i}",)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [name for name, out in outcomes.items() if out == "won"]
    assert len(winners) == 1 and len(outcomes) == 6
    with Journal(journal_target) as j:
        done = j.get("race", "review/1/resolved")
        assert done is not None and done.payload["reviewer"] == winners[0]
        for name, out in outcomes.items():
            if name != winners[0]:
                assert out.startswith(
                    f"review item {review_id} was already resolved by {winners[0]} at {done.at}"
                )
        types = [e.type for e in j.events("race")]
        assert types.count("review.resolved") == 1 and types.count("case.resolved") == 1
        assert j.verify("race").ok


def test_a_resolution_journalled_between_the_check_and_the_write_is_already_resolved(
    journal_target: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another reviewer's resolution landing between ``resolve``'s look and its write
    transaction is reported as theirs (``AlreadyResolved``), never as a key conflict; a
    case found resolved is refused after the one write transaction that found it."""
    with Journal(journal_target) as mine, Journal(journal_target) as theirs:
        review_id = _escalated(mine, "R")
        taken: list[str] = []
        real = mine.transaction

        def transaction(run_id: str, *args: Any, **kwargs: Any) -> Any:
            taken.append(run_id)
            if len(taken) == 2 and taken[0] == "R":  # bob resolves between the two
                resolve(theirs, review_id, decision="1", note="bob's", reviewer="bob")
            return real(run_id, *args, **kwargs)

        monkeypatch.setattr(mine, "transaction", transaction)
        with pytest.raises(AlreadyResolved, match="already resolved by bob at") as raced:
            resolve(mine, review_id, decision="2", note="ann's", reviewer="ann")
        assert (raced.value.reviewer, raced.value.decision) == ("bob", "1")
        assert taken == ["R", "R"]
        resolved = [e.payload["reviewer"] for e in mine.events("R", type="review.resolved")]
        assert resolved == ["bob"]
        assert [e.type for e in mine.events("R")].count("case.resolved") == 1

        taken[:] = ["late"]  # no second injection
        with pytest.raises(AlreadyResolved, match="already resolved by bob at") as late:
            resolve(mine, review_id, decision="2", note="ann's", reviewer="ann")
        assert late.value.at == raced.value.at
        assert taken == ["late", "R"]
        assert mine.verify("R").ok


def test_a_resolution_is_one_atomic_append(
    journal_target: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A crash between review.resolved and case.resolved leaves neither."""
    with Journal(journal_target) as journal:
        review_id = _escalated(journal, "R")
        real = journal.append

        def crashing(run_id: str, type: str, payload: dict[str, object], **kw: Any) -> Event:
            if type == "case.resolved":
                raise KeyboardInterrupt
            return real(run_id, type, payload, **kw)

        monkeypatch.setattr(journal, "append", crashing)
        with pytest.raises(KeyboardInterrupt):
            resolve(journal, review_id, decision="2", note="n", reviewer="kim")
        monkeypatch.undo()
        assert journal.get("R", "review/1/resolved") is None
        assert [s.item.review_id for s in list_items(journal)] == [review_id]  # still open
        assert resolve(journal, review_id, decision="2", note="n", reviewer="kim").decision == "2"
        assert journal.verify("R").ok


def test_a_resolution_refused_as_busy_is_not_saved(
    journal_target: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A resolve that fails (the journal busy as the reviewer's claim is dropped) leaves
    nothing: the reviewer told "not saved" finds the case open, and the retry lands."""
    with Journal(journal_target) as journal:
        review_id = _escalated(journal, "R")
        claim(journal, review_id, "kim", ttl=600)

        def busy(*args: object, **kwargs: object) -> bool:
            raise JournalBusy("the journal is busy")

        monkeypatch.setattr(journal, "release_claim", busy)
        with pytest.raises(JournalBusy):
            resolve(journal, review_id, decision="2", note="n", reviewer="kim")
        monkeypatch.undo()
        assert journal.get("R", "review/1/resolved") is None
        assert [s.item.review_id for s in list_items(journal)] == [review_id]  # still open
        held = journal.current_claim(review_id)
        assert held is not None and held.who == "kim"  # the claim stays with the resolution
        assert resolve(journal, review_id, decision="2", note="n", reviewer="kim").decision == "2"
        assert journal.current_claim(review_id) is None
        assert journal.verify("R").ok


def test_a_half_applied_resolution_from_an_older_journal_is_completed(journal_target: str) -> None:
    with Journal(journal_target) as journal:
        review_id = _escalated(journal, "R")
        journal.append(  # what a kill between the two appends of older versions left behind
            "R",
            "review.resolved",
            {
                "review_id": review_id,
                "decision": "2",
                "note": "n",
                "reviewer": "kim",
                "outside_options": False,
            },
            key="review/1/resolved",
            case="1",
        )
        assert [(r.action, r.decision) for r in final_records(journal, "R")] == [("human", "2")]
        with pytest.raises(AlreadyResolved, match="already resolved by kim at"):
            resolve(journal, review_id, decision="1", note="late", reviewer="bob")
        resolved = journal.get("R", "case/1/resolved")
        assert resolved is not None and resolved.payload["decision"] == "2"
        assert complete_resolutions(journal, "R") == 0
        assert journal.verify("R").ok


def test_complete_resolutions_journals_every_missing_case_record(tmp_path: Path) -> None:
    with Journal(tmp_path / "j.sqlite") as journal:
        review_id = _escalated(journal, "R")
        journal.append(
            "R",
            "review.resolved",
            {
                "review_id": review_id,
                "decision": "1",
                "note": "n",
                "reviewer": None,
                "outside_options": False,
            },
            key="review/1/resolved",
            case="1",
        )
        assert complete_resolutions(journal, "R") == 1
        assert [e.type for e in journal.events("R")][-2:] == ["review.resolved", "case.resolved"]


def test_a_stale_content_hash_is_refused_and_nothing_is_written(journal_target: str) -> None:
    with Journal(journal_target) as journal:
        review_id = _escalated(journal, "R")
        status = find_item(journal, review_id)
        assert (
            status.content_sha256 == content_sha256(status.item)
            and len(status.content_sha256) == 64
        )
        before = journal.run("R").n_events  # type: ignore[union-attr]
        with pytest.raises(StaleContent, match="changed since it was shown"):
            resolve(
                journal, review_id, decision="2", note="n", reviewer="kim", content_sha256="0" * 64
            )
        assert journal.run("R").n_events == before  # type: ignore[union-attr]
        record = resolve(
            journal,
            review_id,
            decision="2",
            note="n",
            reviewer="kim",
            content_sha256=status.content_sha256,
        )
        assert record.decision == "2"
        stored = journal.get("R", "review/1/resolved")
        assert stored is not None and stored.payload["content_sha256"] == status.content_sha256


def clock_ahead(monkeypatch: pytest.MonkeyPatch, seconds: float) -> None:
    """The journal's clock (claims' ``now``) runs ``seconds`` ahead from here on: a claim
    expires without the test waiting for it."""
    from datetime import UTC, datetime, timedelta

    from dissensus.store import clock

    def ahead() -> str:
        return (datetime.now(UTC) + timedelta(seconds=seconds)).isoformat(timespec="microseconds")

    monkeypatch.setattr(clock, "now", ahead)


def test_claims_exclude_other_reviewers_until_they_expire(
    journal_target: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Journal(journal_target) as journal:
        review_id = _escalated(journal, "R")
        held = claim(journal, review_id, "kim", ttl=30)
        assert held.who == "kim" and journal.current_claim(review_id) == held
        assert claim(journal, review_id, "kim", ttl=30).who == "kim"  # renewing one's own claim
        with pytest.raises(ClaimConflict, match="claimed by kim until"):
            claim(journal, review_id, "bob", ttl=60)
        with pytest.raises(ClaimConflict, match="claimed by kim"):
            resolve(journal, review_id, decision="1", note="n", reviewer="bob")
        clock_ahead(monkeypatch, 29)
        assert journal.current_claim(review_id) is not None  # not expired yet
        with pytest.raises(ClaimConflict, match="claimed by kim until"):
            claim(journal, review_id, "bob", ttl=60)
        clock_ahead(monkeypatch, 31)  # past the renewed claim's expiry
        assert journal.current_claim(review_id) is None
        assert claim(journal, review_id, "bob", ttl=60).who == "bob"
        resolve(journal, review_id, decision="1", note="n", reviewer="bob")
        assert journal.current_claim(review_id) is None  # released by the resolution
        with pytest.raises(AlreadyResolved, match="already resolved by bob"):
            claim(journal, review_id, "kim", ttl=60)


def test_an_unnamed_resolution_is_refused_while_anyone_holds_a_claim(
    journal_target: str,
) -> None:
    """``reviewer=None`` (a library caller or a LangGraph resume that names nobody) holds
    no claim: a live claim of anyone refuses it, as another reviewer's would."""
    with Journal(journal_target) as journal:
        review_id = _escalated(journal, "R")
        claim(journal, review_id, "bob", ttl=60)
        with pytest.raises(ClaimConflict, match="claimed by bob"):
            resolve(journal, review_id, decision="1", note="n")
        assert journal.current_claim(review_id) is not None  # bob's claim stands
        assert journal.release_claim(review_id, "bob")
        record = resolve(journal, review_id, decision="1", note="n")
        assert record.resolution is not None and record.resolution.reviewer is None


def test_concurrent_claims_have_exactly_one_holder(journal_target: str) -> None:
    with Journal(journal_target) as journal:
        review_id = _escalated(journal, "R")
    barrier = threading.Barrier(5)
    got: list[str] = []
    refused: list[str] = []

    def reviewer(name: str) -> None:
        with Journal(journal_target) as j:
            barrier.wait()
            try:
                claim(j, review_id, name, ttl=60)
                got.append(name)
            except ClaimConflict:
                refused.append(name)

    threads = [threading.Thread(target=reviewer, args=(f"r{i}",)) for i in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == 1 and len(refused) == 4
    with Journal(journal_target) as j:
        current = j.current_claim(review_id)
        assert current is not None and current.who == got[0]


def test_an_empty_note_is_refused(tmp_path: Path) -> None:
    with Journal(tmp_path / "j.sqlite") as journal:
        review_id = _escalated(journal, "R")
        with pytest.raises(InputError, match="note"):
            resolve(journal, review_id, decision="1", note="  ")


def test_review_list_of_an_unknown_run_is_a_usage_error(tmp_path: Path) -> None:
    with Journal(tmp_path / "j.sqlite") as journal:
        _escalated(journal, "R")
        with pytest.raises(UnknownRun):
            list(list_items(journal, run_id="nosuch"))


def test_reviewers_taking_the_next_item_at_once_each_get_a_different_one(
    journal_target: str,
) -> None:
    with Journal(journal_target) as journal:
        ids = [_escalated(journal, f"run{i}") for i in range(3)]
    barrier = threading.Barrier(4)
    got: dict[str, str | None] = {}

    def reviewer(name: str) -> None:
        with Journal(journal_target) as j:
            barrier.wait()
            status = claim_next(j, name, ttl=60)
            got[name] = status.item.review_id if status else None

    threads = [threading.Thread(target=reviewer, args=(f"r{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    taken = [v for v in got.values() if v is not None]
    assert sorted(taken) == sorted(ids) and list(got.values()).count(None) == 1
    with Journal(journal_target) as j:
        for name, review_id in got.items():
            if review_id is not None:
                held = j.current_claim(review_id)
                assert held is not None and held.who == name
                assert claim_next(j, name, ttl=60).item.review_id == review_id  # type: ignore[union-attr]


def _killed_after_one_event(argv: list[str]) -> None:
    from dissensus.cli import main
    from fault_runner import install

    install(1, signal.SIGKILL)
    os._exit(main(argv))


def test_a_kill_during_review_resolve_never_leaves_half_a_resolution(tmp_path: Path) -> None:
    """SIGKILL right after the first journalled event of `review resolve`: before, that
    left review.resolved without case.resolved; now both are one commit."""
    path = tmp_path / "j.sqlite"
    with Journal(path) as journal:
        review_id = _escalated(journal, "R")
    argv = [
        "review",
        "resolve",
        review_id,
        "--decision",
        "2",
        "--note",
        "n",
        "--journal",
        str(path),
    ]
    # A CLI process forked from this one (no interpreter start-up), killed by the hook.
    proc = multiprocessing.get_context("fork").Process(target=_killed_after_one_event, args=(argv,))
    proc.start()
    proc.join(timeout=300)
    assert proc.exitcode == -signal.SIGKILL
    with Journal(path) as j:
        types = [e.type for e in j.events("R")]
        assert types[-2:] == ["review.resolved", "case.resolved"]
        assert [r.action for r in final_records(j, "R")] == ["human"]
        assert j.verify("R").ok


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"note": "n" * 32_769}, "the note is 32769 characters long; at most 32768"),
        ({"decision": "d" * 32_769}, "the decision is 32769 characters long"),
        ({"reviewer": "ev\x1bil"}, "the reviewer may not hold control or invisible"),
        ({"reviewer": "r" * 129}, "at most 128"),
        ({"note": "  "}, "the note must not be empty"),
    ],
)
def test_a_resolution_out_of_bounds_is_refused_before_anything_is_journalled(
    tmp_path: Path, fields: dict[str, str], says: str
) -> None:
    with Journal(tmp_path / "j.sqlite") as journal:
        review_id = _escalated(journal, "R")
        before = len(list(journal.events("R")))
        args = {"decision": "1", "note": "n", "reviewer": "kim", **fields}
        with pytest.raises(InputError, match=re.escape(says)):
            resolve(journal, review_id, **args)
        assert len(list(journal.events("R"))) == before


def test_a_decision_is_read_without_its_surrounding_spaces(tmp_path: Path) -> None:
    """The API and the CLI read ``' 1 '`` as the review page does: option 1, not an answer
    outside the options."""
    with Journal(tmp_path / "j.sqlite") as journal:
        review_id = _escalated(journal, "R")
        record = resolve(journal, review_id, decision=" 1 ", note="n", reviewer="kim")
        assert record.decision == "1"
        (event,) = journal.events("R", type="review.resolved")
        assert event.payload["decision"] == "1" and event.payload["outside_options"] is False
