"""The Ray engine's reservations in the budget's accounting (no Ray needed).

The Ray engine's driver journals what a block may spend (``model.reserved``) before it
sends the block to a worker, and settles it (``model.settled``) with the block's events.
A resumed run, on either engine, charges every reservation not settled in full: the
worker may have spent all of it before the driver was killed. A settled one charges
only what the block journalled.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from dissensus.engines.ray.ledger import _share
from dissensus.llm.budget import Budget
from dissensus.pipeline import load_policy
from dissensus.pipeline.batch import execute_run, start_run
from dissensus.pipeline.durable import open_reservations, replay_spend
from dissensus.pipeline.run_events import ModelReserved, ModelSent, ModelSettled
from dissensus.store import Journal
from dissensus.store import event_types as ev
from pipeline_cases import panel, write_jsonl, write_policy, write_script

RESERVATION = st.tuples(
    st.integers(min_value=0, max_value=50) | st.none(),  # calls
    st.integers(min_value=0, max_value=5000) | st.none(),  # tokens
    st.booleans(),  # settled
)


def _reserve(
    journal: Journal, block: int, attempt: int, calls: int | None, tokens: int | None
) -> str:
    key = f"reserved/{block}/{attempt}"
    payload = ModelReserved(
        block=block,
        attempt=attempt,
        first_line=block * 10 + 1,
        last_line=block * 10 + 10,
        calls=calls,
        tokens=tokens,
    ).payload()
    journal.append("r", ev.MODEL_RESERVED, payload, key=key)
    return key


def _settle(journal: Journal, key: str, attempts: int = 0) -> None:
    payload = ModelSettled(reservation=key, attempts=attempts, tokens=0).payload()
    journal.append("r", ev.MODEL_SETTLED, payload, key="settled/" + key.removeprefix("reserved/"))


@settings(max_examples=40, deadline=None, derandomize=True)
@given(reservations=st.lists(RESERVATION, max_size=6), sent=st.integers(min_value=0, max_value=5))
def test_unsettled_reservations_are_charged_in_full_settled_ones_not(
    reservations: list[tuple[int | None, int | None, bool]], sent: int
) -> None:
    with Journal(":memory:") as journal:
        journal.create_run("r", kind="decide", meta={})
        for n in range(sent):  # attempts sent without a result: charged as before
            payload = ModelSent(call="call/1/x/0", n=n).payload()
            journal.append("r", ev.MODEL_SENT, payload, key=f"sent/call/1/x/0/{n}", case="1")
        for i, (calls, tokens, settled) in enumerate(reservations):
            key = _reserve(journal, i % 3, i // 3, calls, tokens)
            if settled:
                _settle(journal, key, attempts=calls or 0)
        budget = Budget()
        total = replay_spend(journal, "r", budget)
        held = [(c or 0, t or 0) for c, t, s in reservations if not s]
        assert total.attempts == sent + sum(c for c, _ in held)
        assert total.prompt_tokens == sum(t for _, t in held)
        assert budget.spent.attempts == total.attempts
        assert budget.spent.total_tokens == total.total_tokens
        assert len(open_reservations(journal, "r")) == len(held)


def test_a_journal_without_reservations_is_charged_as_before() -> None:
    with Journal(":memory:") as journal:
        journal.create_run("r", kind="decide", meta={})
        journal.append("r", ev.MODEL_SENT, ModelSent(call="c", n=0).payload(), key="sent/c/0")
        assert replay_spend(journal, "r", Budget(max_calls=5)).attempts == 1
        assert open_reservations(journal, "r") == {}


@given(
    left=st.integers(min_value=-5, max_value=10_000),
    held=st.integers(min_value=0, max_value=10_000),
    slots=st.integers(min_value=1, max_value=16),
)
def test_an_allowance_never_exceeds_what_is_free(left: int, held: int, slots: int) -> None:
    share = _share(left, slots, left - held)
    assert 0 <= share <= max(0, left - held)
    if held == 0 and left > 0:
        assert share >= 1  # a budget with calls left never hands out nothing


def _live_run(tmp_path: Path, max_calls: int) -> tuple[Journal, Path]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    rows = [panel(f"live-{i}", ["1", "1", "1"]) for i in range(6)]
    path = write_jsonl(tmp_path / "in.jsonl", rows)
    policy = write_policy(
        tmp_path / "policy.yaml", {"guard": {"enabled": False}, "budget": {"max_calls": max_calls}}
    )
    script = write_script(tmp_path / "model.yaml", {})
    calls = tmp_path / "calls.jsonl"
    journal = Journal(tmp_path / "j.sqlite")
    start_run(
        journal,
        str(path),
        load_policy(str(policy))[0],
        run_id="r",
        model=f"record:{calls}:scripted:{script}",
    )
    return journal, calls


async def _drain(journal: Journal) -> int:
    return len([r async for r in execute_run(journal, "r")])


def _sent(calls: Path) -> int:
    return len(calls.read_text().splitlines()) if calls.exists() else 0


def test_a_run_killed_on_ray_and_resumed_locally_is_charged_its_open_reservation(
    tmp_path: Path,
) -> None:
    """The journal a Ray driver killed after reserving leaves: the local engine's resume
    may spend only what the reservation left (here 3 of 10 attempts)."""
    journal, calls = _live_run(tmp_path, max_calls=10)
    _reserve(journal, 0, 0, 7, None)
    assert asyncio.run(_drain(journal)) == 6
    assert 0 < _sent(calls) <= 3


def test_a_settled_reservation_frees_what_it_did_not_spend(tmp_path: Path) -> None:
    """Settled (with no spend of its own), the reservation charges nothing: the local run
    makes every call an uninterrupted run makes."""
    fresh, fresh_calls = _live_run(tmp_path / "a", max_calls=100)
    assert asyncio.run(_drain(fresh)) == 6
    journal, calls = _live_run(tmp_path / "b", max_calls=100)
    _settle(journal, _reserve(journal, 0, 0, 97, None))
    assert asyncio.run(_drain(journal)) == 6
    assert _sent(calls) == _sent(fresh_calls) > 0
    assert journal.verify("r").ok
