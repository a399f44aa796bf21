"""When the shift watch checks: check ``i`` is made at the first step after the
``i * every``-th case judged with the file, in one process as after a restart (a new
watch on the same journal), and a step that is not due only counts."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dissensus.pipeline.shift_watch as watch_module
from dissensus.pipeline.batch import execute_run, start_run
from dissensus.pipeline.shift import latest_flag, watch_index
from dissensus.pipeline.shift_watch import ShiftWatch
from dissensus.pipeline.spec import RunSpec
from dissensus.store import Journal
from dissensus.store import event_types as ev
from dissensus.store.follow import Followed, RunRead
from serve_helpers import heap_frozen
from shift_helpers import build_world


@pytest.fixture(scope="module", autouse=True)
def _frozen() -> Iterator[None]:
    yield from heap_frozen()


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_world(tmp_path_factory.mktemp("due"))


def _lines(path: Path, n: int) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()[:n]


def _one_run(journal: Journal, policy: Path, line: str, run_id: str) -> Any:
    """One run of one panel, as the one-panel doors make it: its record."""

    async def go() -> list[Any]:
        return [r async for r in execute_run(journal, run_id)]

    start_run(journal, None, policy, text=line + "\n", run_id=run_id)
    (record,) = asyncio.run(go())
    return record


def _held(record: Any) -> bool:
    return bool(record.basis != "learned" and "acceptance held" in record.reason)


def _sha(spec: RunSpec) -> str | None:
    return spec.acceptance["sha256"] if spec.acceptance else None


def test_check_one_is_made_right_after_the_tenth_case_and_the_eleventh_is_held(
    world: Path, tmp_path: Path
) -> None:
    policy = world / "hold.yaml"
    spec = RunSpec.from_policy(policy)
    with Journal(tmp_path / "j.sqlite") as journal:
        watch = ShiftWatch(spec, every=10, journal=journal)
        lines = _lines(world / "shifted.jsonl", 11)
        for i, line in enumerate(lines[:9]):
            _one_run(journal, policy, line, f"p{i}")
            assert watch.step() is None  # fewer than 10 judged: no check
        _one_run(journal, policy, lines[9], "p9")
        outcome = watch.step()  # the tenth case completes check 1: made now
        assert outcome is not None and outcome["check"] == 1 and outcome["deployed_n"] == 10
        assert outcome["shifted"] and watch.flagged_run is not None
        assert latest_flag(journal, _sha(spec)) is not None
        eleventh = _one_run(journal, policy, lines[10], "p10")
        assert _held(eleventh), eleventh.reason
        assert watch.step() is None  # 11 judged: no new multiple


def test_a_watch_started_after_a_restart_checks_as_soon_as_the_multiple_is_reached(
    world: Path, tmp_path: Path
) -> None:
    policy = world / "hold.yaml"
    spec = RunSpec.from_policy(policy)
    lines = _lines(world / "shifted.jsonl", 11)
    with Journal(tmp_path / "j.sqlite") as journal:
        before = ShiftWatch(spec, every=10, journal=journal)
        for i, line in enumerate(lines[:8]):
            _one_run(journal, policy, line, f"a{i}")
            assert before.step() is None
    with Journal(tmp_path / "j.sqlite") as journal:  # a new process, a new watch
        after = ShiftWatch(spec, every=10, journal=journal)
        _one_run(journal, policy, lines[8], "b8")
        assert after.step() is None  # its first look: 9 judged, no check yet
        _one_run(journal, policy, lines[9], "b9")
        outcome = after.step()
        assert outcome is not None and outcome["check"] == 1 and outcome["deployed_n"] == 10
        assert outcome["shifted"] and after.flagged_run is not None
        assert _held(_one_run(journal, policy, lines[10], "b10"))


class _Event:
    def __init__(self, payload: dict[str, Any], run_id: str) -> None:
        self.payload, self.run_id = payload, run_id


class _Journal:
    """The two reads the watch makes, over a list of judged cases; it counts full reads."""

    def __init__(self) -> None:
        self.events: list[_Event] = []
        self.reads = 0

    def judge(self, sha: str | None) -> None:
        n = len(self.events)
        payload = {"vector": {"x": float(n)}, "figures": {"file_sha256": sha}}
        self.events.append(_Event(payload, f"r{n}"))

    def count_of_type(self, type: str) -> int:
        assert type == ev.CASE_ACCEPTANCE
        return len(self.events)

    def events_of_type(self, type: str) -> Iterator[_Event]:
        assert type == ev.CASE_ACCEPTANCE
        self.reads += 1
        return iter(list(self.events))

    def follow(
        self, type: str, keep: Callable[[Any], Any], before: Any = None, **_: Any
    ) -> Followed[Any]:
        """Every case read, as one run (a read the watch makes)."""
        assert type == ev.CASE_ACCEPTANCE
        self.reads += 1
        kept = tuple((seq, keep(e)) for seq, e in enumerate(self.events))
        run = RunRead(None, "", len(kept), tuple((s, v) for s, v in kept if v is not None))
        values = tuple(v for _, v in run.kept)
        return Followed("fake", type, {"r": run}, ("r",), len(self.events), values)


_STEPS = st.lists(
    st.tuples(st.sampled_from(["mine", "other", "restart"]), st.integers(1, 30)),
    min_size=1,
    max_size=8,
).map(lambda runs: [kind for kind, n in runs for _ in range(1 if kind == "restart" else n)])
"""Runs of the file's cases, of another file's, and restarts."""


@settings(max_examples=150, deadline=None, derandomize=True)
@given(every=st.integers(min_value=10, max_value=25), steps=_STEPS)
def test_no_check_is_late_and_a_step_that_is_not_due_only_counts(
    world: Path, every: int, steps: list[str]
) -> None:
    """Cases of the file and of another file judged one at a time, a step after each,
    restarts anywhere: after every step the check of the current index has been made,
    each index once per watch, and a look that reads the cases comes only at a watch's
    first step or when the count may have reached a new multiple."""
    spec = RunSpec.from_policy(world / "warn.yaml")
    sha = _sha(spec)
    journal = _Journal()

    def check(*args: Any, check: int, **kwargs: Any) -> dict[str, Any]:
        return {"shifted": False, "check": check}

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(watch_module, "check_vectors", check)
        watch = ShiftWatch(spec, every=every, journal=journal)  # type: ignore[arg-type]
        made: list[int] = []
        mine = others = 0
        looked: tuple[int, int] | None = None
        for step in steps:
            if step == "restart":
                watch = ShiftWatch(spec, every=every, journal=journal)  # type: ignore[arg-type]
                made, looked = [], None
                continue
            journal.judge(sha if step == "mine" else "another")
            mine, others = (mine + 1, others) if step == "mine" else (mine, others + 1)
            reads = journal.reads
            outcome = watch.step()
            index = watch_index(mine, every)
            if outcome is not None:
                made.append(outcome["check"])
                assert outcome["check"] == index
            if index >= 1:
                assert made and made[-1] == index, (made, mine, every)
            assert made == sorted(set(made))  # each index once, in order
            if journal.reads > reads:
                looked_mine, looked_others = looked if looked is not None else (0, 0)
                assert (
                    looked is None
                    or watch_index(mine, every) > watch_index(looked_mine, every)
                    or others > looked_others
                ), "a read with no new multiple and no case of another file"
                looked = (mine, others)
