"""Under ``on_shift: escalate`` a large run is shift-checked while it runs: from the check
at its 100th judged case that flags the file, learned acceptance commits nothing more in
the run, and the run, its summary and a resume say so."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from cli_helpers import cli
from dissensus.pipeline import batch, shift_in_run
from dissensus.pipeline.audit import run_acceptance
from dissensus.pipeline.batch import execute_run, start_run
from dissensus.pipeline.shift import SHIFT_EVENT
from dissensus.pipeline.shift_in_run import FIRST, within_key
from dissensus.store import Journal
from dissensus.store import event_types as ev
from shift_helpers import PANELS, build_world, shifted


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = build_world(tmp_path_factory.mktemp("in-run"))
    rows = [json.loads(line) for line in PANELS.read_text(encoding="utf-8").splitlines()]
    out = []
    for i in range(150):  # shifted cases: every one judged, and alike
        row = shifted(rows[i % len(rows)])
        row["id"] = f"s{i}"
        out.append(json.dumps(row))
    (root / "long.jsonl").write_text("".join(line + "\n" for line in out), encoding="utf-8")
    return root


def _held(record: Any) -> bool:
    return bool(record.basis != "learned" and "acceptance held" in record.reason)


def _decided(journal: Journal, run_id: str) -> list[Any]:
    async def go() -> list[Any]:
        return [r async for r in execute_run(journal, run_id)]

    return asyncio.run(go())


def test_a_run_is_held_from_the_check_that_flags_it_mid_run(world: Path, tmp_path: Path) -> None:
    with Journal(tmp_path / "j.sqlite") as journal:
        start_run(journal, str(world / "long.jsonl"), world / "hold.yaml", run_id="r")
        records = _decided(journal, "r")
        assert len(records) == 150
        held = [_held(r) for r in records]
        first = held.index(True)
        # Nothing held before the 100th judged case; everything held after the hold.
        assert first >= FIRST and all(held[first:]), held
        assert not any(r.basis == "learned" for r in records[first:])
        check = journal.get("r", within_key(FIRST))
        assert check is not None and check.payload["shifted"]
        assert check.payload["within_run"] == FIRST and check.payload["check"] == 1
        assert check.payload["deployed_n"] == FIRST
        state = run_acceptance(journal, "r")
        assert state is not None and state.held_within_run == FIRST
        words = state.words()
        assert words is not None and "while the run ran, after 100 judged cases" in words
        # The run's end check is the next in the runs' sequence: no index is used twice.
        end = journal.get("r", "run/shift")
        assert end is not None and end.payload["check"] == 2
        checks = [e.payload["check"] for e in journal.events_of_type(SHIFT_EVENT)]
        assert checks == [1, 2]
        # A run started afterwards is held from its start.
        start_run(journal, str(world / "same.jsonl"), world / "hold.yaml", run_id="later")
        later = _decided(journal, "later")
        assert any(_held(r) for r in later) and not any(r.basis == "learned" for r in later)


def test_a_run_interrupted_before_its_check_makes_it_on_resume(world: Path, tmp_path: Path) -> None:
    with Journal(tmp_path / "j.sqlite") as journal:
        start_run(journal, str(world / "long.jsonl"), world / "hold.yaml", run_id="r")

        async def interrupted() -> list[Any]:
            out = []
            async for record in execute_run(journal, "r"):
                out.append(record)
                if len(out) >= FIRST - 5:
                    break
            return out

        before = asyncio.run(interrupted())
        assert not any(_held(r) for r in before)
        assert journal.get("r", within_key(FIRST)) is None
        records = _decided(journal, "r")
        assert len(records) == 150
        held = [_held(r) for r in records]
        first = held.index(True)
        assert first >= FIRST and all(held[first:])
        check = journal.get("r", within_key(FIRST))
        assert check is not None and check.payload["check"] == 1
        # A replay of the finished run gives the same records.
        assert [r.model_dump() for r in _decided(journal, "r")] == [r.model_dump() for r in records]


def test_under_warn_a_run_is_checked_only_at_its_end(world: Path, tmp_path: Path) -> None:
    with Journal(tmp_path / "j.sqlite") as journal:
        start_run(journal, str(world / "long.jsonl"), world / "warn.yaml", run_id="r")
        records = _decided(journal, "r")
        assert not any(_held(r) for r in records)
        assert journal.get("r", within_key(FIRST)) is None
        end = journal.get("r", "run/shift")
        assert end is not None and end.payload["shifted"] and end.payload["check"] == 1


def test_the_summary_and_runs_show_say_the_run_was_held_mid_run(
    world: Path, tmp_path: Path
) -> None:
    journal = tmp_path / "j.sqlite"
    done = cli(
        "decide", world / "long.jsonl", "--policy", world / "hold.yaml", "--journal", journal
    )
    assert done.code == 0, done.err
    assert "while the run ran, after 100 judged cases" in done.out
    with Journal(journal) as store:
        (run,) = store.runs()
        events = {e.type for e in store.events(run.run_id)}
        assert ev.ACCEPTANCE_HELD in events
    shown = cli("runs", "show", run.run_id, "--journal", journal)
    assert shown.code == 0, shown.err
    assert "while the run ran, after 100 judged cases" in shown.out
    verified = cli("runs", "verify", run.run_id, "--journal", journal)
    assert verified.code == 0, verified.out + verified.err


@settings(
    max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    same=st.integers(min_value=0, max_value=30),
    moved=st.integers(min_value=0, max_value=30),
    block=st.integers(min_value=1, max_value=40),
    stop_after=st.one_of(st.none(), st.integers(min_value=1, max_value=59)),
)
@example(same=5, moved=30, block=7, stop_after=None)
@example(same=0, moved=30, block=40, stop_after=12)
def test_checks_mid_run_keep_their_promises(
    world: Path,
    tmp_path_factory: pytest.TempPathFactory,
    same: int,
    moved: int,
    block: int,
    stop_after: int | None,
) -> None:
    """Whatever the mix of cases, the block size and an interruption: every line gets one
    record, in order; once a case is held no later one is committed by learned
    acceptance; the file's checks in the journal have distinct indices 1..n; a hold mid-run
    names the check that flagged the file."""
    root = tmp_path_factory.mktemp("mix")
    like = _lines(world / "same.jsonl")[:same]
    unlike = [json.loads(line) for line in _lines(world / "long.jsonl")[:moved]]
    rows = like + [json.dumps(r) for r in unlike]
    if not rows:
        return
    panels = root / "mix.jsonl"
    panels.write_text("".join(line + "\n" for line in rows), encoding="utf-8")
    with pytest.MonkeyPatch.context() as patch, Journal(root / "j.sqlite") as journal:
        patch.setattr(shift_in_run, "FIRST", 10)
        patch.setattr(batch, "BLOCK_CASES", block)
        start_run(journal, str(panels), world / "hold.yaml", run_id="r")
        if stop_after is not None:

            async def interrupted() -> None:
                n = 0
                async for _ in execute_run(journal, "r"):
                    n += 1
                    if n >= stop_after:
                        break

            asyncio.run(interrupted())
        records = _decided(journal, "r")
        assert [r.line for r in records] == list(range(1, len(rows) + 1))
        held = [_held(r) for r in records]
        if True in held:
            assert not any(r.basis == "learned" for r in records[held.index(True) :])
        checks = sorted(
            e.payload["check"]
            for e in journal.events_of_type(SHIFT_EVENT)
            if "across_runs" not in e.payload
        )
        assert checks == list(range(1, len(checks) + 1))
        hold = journal.get("r", "acceptance/held")
        if same == 0 and moved >= 20:
            assert hold is not None  # the check at the 10th judged case flags the file
        if hold is not None and "within_run" in hold.payload:  # (else: held on the resume)
            at = hold.payload["within_run"]
            flagged = journal.get("r", within_key(at))
            assert flagged is not None and flagged.payload["shifted"]


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


@pytest.mark.parametrize("policy", ["plain.yaml", "hold.yaml"])
def test_rejected_lines_among_cases_in_flight_lose_no_record(
    world: Path, tmp_path: Path, policy: str
) -> None:
    """A rejected line is handed over as soon as it is read, before the cases above it
    are decided: none of those cases may be taken for one committed already, whether
    the run starts its executor again (a hold mid-run) or not."""
    (world / "plain.yaml").write_text("reading: {similarity: tfidf}\n", encoding="utf-8")
    long = _lines(world / "long.jsonl")
    lines = long[:99] + [json.dumps({"bad": i}) for i in range(600)] + long[99:140]
    panels = tmp_path / "sparse.jsonl"
    panels.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    journal = tmp_path / "j.sqlite"
    rejects = tmp_path / "rejects.jsonl"
    done = cli(
        "decide",
        panels,
        "--policy",
        world / policy,
        "--journal",
        journal,
        "--json",
        "--rejects",
        rejects,
    )
    assert done.code == 3, done.err  # rejected lines
    records = [json.loads(line) for line in done.out.splitlines()]
    assert [r["line"] for r in records] == [*range(1, 100), *range(700, 741)]
    bad = [json.loads(line)["line"] for line in rejects.read_text(encoding="utf-8").splitlines()]
    assert sorted(bad) == list(range(100, 700))
    if policy == "hold.yaml":
        assert any("acceptance held" in r["reason"] for r in records)


def test_lines_not_judged_do_not_make_blocks_smaller(
    world: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run just short of its next check committed one line per block while the lines
    that followed were not judged (rejected lines here): hundreds of commits. Only judged
    cases count toward the block that ends at the check."""
    long = _lines(world / "long.jsonl")
    lines = long[:95] + [json.dumps({"bad": i}) for i in range(600)] + long[95:110]
    panels = tmp_path / "sparse.jsonl"
    panels.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    commits: list[int] = []
    commit = batch._commit

    def counted(*args: Any, **kw: Any) -> Any:
        commits.append(len(args[2]))
        return commit(*args, **kw)

    monkeypatch.setattr(batch, "_commit", counted)
    with Journal(tmp_path / "j.sqlite") as journal:
        start_run(journal, str(panels), world / "hold.yaml", run_id="r")
        records = _decided(journal, "r")
    assert len(records) == 110
    assert sum(commits) >= 600 and len(commits) < 40, commits


class _Cut(Exception):
    """The run cut off (an interrupt) between its check's flag and its hold."""


def test_a_run_cut_off_between_its_flag_and_its_hold_says_it_was_held_while_it_ran(
    world: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def cut(*args: Any, **kw: Any) -> Any:
        raise _Cut()

    with Journal(tmp_path / "j.sqlite") as journal:
        start_run(journal, str(world / "long.jsonl"), world / "hold.yaml", run_id="r")
        with monkeypatch.context() as patch:
            patch.setattr(batch, "_held_within", cut)
            with pytest.raises(_Cut):
                _decided(journal, "r")
        assert journal.get("r", within_key(FIRST)) is not None  # the flag, and no hold
        assert journal.get("r", "acceptance/held") is None
        records = _decided(journal, "r")
        assert len(records) == 150
        hold = journal.get("r", "acceptance/held")
        assert hold is not None and hold.payload["within_run"] == FIRST
        state = run_acceptance(journal, "r")
        assert state is not None and state.held_within_run == FIRST
        assert "while the run ran, after 100 judged cases" in (state.words() or "")


def test_a_run_the_caller_waits_for_is_checked_mid_run_too(world: Path, tmp_path: Path) -> None:
    # A synchronous POST /v1/decide of a list of panels makes a run created by its first
    # write (defer): the same panels under the same policy are held as decide holds them.
    text = (world / "long.jsonl").read_text(encoding="utf-8")
    held: dict[bool, list[bool]] = {}
    for defer in (False, True):
        with Journal(tmp_path / f"j-{defer}.sqlite") as journal:
            start_run(journal, None, world / "hold.yaml", text=text, run_id="r", lock=True,
                      defer=defer)  # fmt: skip
            held[defer] = [_held(r) for r in _decided(journal, "r")]
            check = journal.get("r", within_key(FIRST))
            assert check is not None and check.payload["shifted"]
    assert held[True] == held[False] and any(held[True])
