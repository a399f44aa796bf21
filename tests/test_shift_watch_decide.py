"""``dissensus decide`` steps a shift watch after a run too small for its own shift check:
batches of 8 are checked across runs, the check is the one a watch kept across the runs
makes, and the summary says what was done (or why nothing was)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cli_helpers import cli
from dissensus.acceptance.shift import MIN_CASES
from dissensus.pipeline.batch import execute_run, start_run
from dissensus.pipeline.shift import SHIFT_EVENT, latest_flag
from dissensus.pipeline.shift_watch import RunWatch, ShiftWatch, watch_after_run
from dissensus.pipeline.spec import RunSpec
from dissensus.store import Journal
from serve_helpers import heap_frozen
from shift_helpers import build_world


@pytest.fixture(scope="module", autouse=True)
def _frozen() -> Iterator[None]:
    yield from heap_frozen()


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_world(tmp_path_factory.mktemp("decide-watch"))


def _batch(path: Path, rows: list[str], name: str) -> Path:
    target = path / name
    target.write_text("".join(line + "\n" for line in rows), encoding="utf-8")
    return target


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def _decide(world: Path, journal: Path, batch: Path, *extra: str) -> Any:
    return cli("decide", batch, "--policy", world / "hold.yaml", "--journal", journal, *extra)


def _sha(world: Path) -> str | None:
    spec = RunSpec.from_policy(world / "hold.yaml")
    return spec.acceptance["sha256"] if spec.acceptance else None


def test_batches_of_eight_are_checked_across_runs_and_the_next_batch_is_held(
    world: Path, tmp_path: Path
) -> None:
    journal = tmp_path / "j.sqlite"
    rows = _lines(world / "shifted.jsonl")
    first = _decide(world, journal, _batch(tmp_path, rows[:8], "b1.jsonl"), "--shift-every", "16")
    assert first.code == 0, first.err
    assert "This run judged 8 case(s), fewer than the 10 its own shift check needs" in first.out
    assert "every 16: 8 so far, the next check at 16." in first.out
    with Journal(journal) as store:
        assert latest_flag(store, _sha(world)) is None
    # The second batch takes the file's count to 16: check 1, of both batches, flags it.
    second = _decide(
        world, journal, _batch(tmp_path, rows[8:16], "b2.jsonl"), "--shift-every", "16", "--json"
    )
    assert second.code == 0, second.err
    assert len(second.out.splitlines()) == 8  # the records, and nothing else on stdout
    assert "warning: This run judged 8 case(s)" in second.err
    assert "New cases look different" in second.err, second.err
    with Journal(journal) as store:
        flag = latest_flag(store, _sha(world))
        assert flag is not None and flag["check"] == 1 and flag["across_runs"] == 2, flag
        assert flag["deployed_n"] == 16
        flagged_run = flag["run_id"]
    assert f"journalled as run {flagged_run}" in second.err
    third = _decide(world, journal, _batch(tmp_path, rows[16:24], "b3.jsonl"))
    assert third.code == 0, third.err
    assert "Learned acceptance is held after a flagged shift check" in third.out
    records = _decide(world, journal, _batch(tmp_path, rows[24:26], "b4.jsonl"), "--json")
    assert all(json.loads(line)["basis"] != "learned" for line in records.out.splitlines()), (
        records.out
    )


def test_a_small_run_without_a_watch_says_it_is_not_checked(world: Path, tmp_path: Path) -> None:
    journal = tmp_path / "j.sqlite"
    rows = _lines(world / "shifted.jsonl")
    for i in range(3):
        done = _decide(
            world,
            journal,
            _batch(tmp_path, rows[8 * i : 8 * i + 8], f"b{i}.jsonl"),
            "--shift-every",
            "0",
        )
        assert done.code == 0, done.err
        assert "the shift watch is off (--shift-every 0): not checked." in done.out
    with Journal(journal) as store:
        assert not list(store.events_of_type(SHIFT_EVENT))
        run_id = _last_run(store)
    shown = cli("runs", "show", run_id, "--journal", journal)
    assert shown.code == 0, shown.err
    assert "shift check: not made for this run alone: it judged 8 case(s)" in shown.out


def _last_run(store: Journal) -> str:
    return max(store.runs(), key=lambda r: r.created).run_id


def test_a_run_big_enough_for_its_own_check_steps_no_watch(world: Path, tmp_path: Path) -> None:
    journal = tmp_path / "j.sqlite"
    rows = _lines(world / "same.jsonl")
    done = _decide(world, journal, _batch(tmp_path, rows[:12], "big.jsonl"), "--shift-every", "5")
    assert done.code == 0, done.err
    assert "its own shift check needs" not in done.out
    assert "shift check p =" in done.out  # the run's own check
    with Journal(journal) as store:
        checks = list(store.events_of_type(SHIFT_EVENT))
        assert len(checks) == 1 and "across_runs" not in checks[0].payload
    # A replay of the finished run steps no watch either.
    again = cli("runs", "resume", _last_of(journal), "--journal", journal, "--shift-every", "5")
    assert again.code == 0, again.err
    assert "its own shift check needs" not in again.out


def _last_of(journal: Path) -> str:
    with Journal(journal) as store:
        return _last_run(store)


def _one_run(journal: Journal, policy: Path, lines: list[str], run_id: str) -> None:
    async def go() -> None:
        async for _ in execute_run(journal, run_id):
            pass

    start_run(journal, None, policy, text="".join(line + "\n" for line in lines), run_id=run_id)
    asyncio.run(go())


@settings(
    max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    sizes=st.lists(st.integers(min_value=1, max_value=9), min_size=1, max_size=5),
    every=st.integers(min_value=4, max_value=12),
)
def test_a_watch_per_run_makes_the_checks_a_watch_kept_across_the_runs_makes(
    world: Path, tmp_path_factory: pytest.TempPathFactory, sizes: list[int], every: int
) -> None:
    """After each small run, the one-step watch makes the check of the latest multiple
    reached: each check a watch stepped after every run makes, the same check of the same
    cases (same index, same p-value), and in between that check again, alike."""
    policy = world / "warn.yaml"
    spec = RunSpec.from_policy(policy)
    rows = _lines(world / "same.jsonl")
    path = tmp_path_factory.mktemp("per-run") / "j.sqlite"
    with Journal(path) as journal:
        kept = ShiftWatch(spec, every=every, journal=journal)
        made: dict[int, float] = {}
        start = 0
        for k, size in enumerate(sizes):
            _one_run(journal, policy, rows[start : start + size], f"r{k}")
            start += size
            expected = kept.step()
            if expected is not None:
                made[expected["check"]] = expected["p_value"]
            got = watch_after_run(journal, f"r{k}", spec, every=every)
            assert isinstance(got, RunWatch) and got.run_cases == size
            assert got.file_cases == start
            if start < max(every, MIN_CASES):
                assert got.outcome is None
                continue
            assert got.outcome is not None
            assert got.outcome["check"] == start // every
            assert made[got.outcome["check"]] == got.outcome["p_value"]


def test_two_small_runs_that_overlap_leave_no_check_unmade(world: Path, tmp_path: Path) -> None:
    """Two batches finishing before either steps its watch: the count crossed 16 with the
    first, and the second's watch (or the first's) still makes check 1, which flags."""
    policy = world / "hold.yaml"
    spec = RunSpec.from_policy(policy)
    rows = _lines(world / "shifted.jsonl")
    with Journal(tmp_path / "j.sqlite") as journal:
        _one_run(journal, policy, rows[:8], "a")
        _one_run(journal, policy, rows[8:16], "b")
        first = watch_after_run(journal, "a", spec, every=16)
        assert first is not None and first.outcome is not None
        assert first.outcome["check"] == 1 and first.outcome["shifted"]
        assert latest_flag(journal, _sha(world)) is not None
        second = watch_after_run(journal, "b", spec, every=16)
        assert second is not None and second.outcome is not None
        assert second.outcome["p_value"] == first.outcome["p_value"]
        assert second.flagged_run is None  # flagged once
        flags = [e for e in journal.events_of_type(SHIFT_EVENT) if e.payload.get("shifted")]
        assert len(flags) == 1
