"""Two doors on one journal given one idempotency key at once: one case is journalled,
and the request whose decision comes second is answered with it as a replay (its own
panel, equal as deterministic members make it, was not the one journalled). A request
whose own commit went through, its acknowledgement lost, is still answered as its own. A
request whose decision finds the key's run taken by the other door (no journal fault) is
answered 409 ``idempotency_key_in_use``, and the key sent again is the other's case.

The races are made deterministic: the second door's decision first lets the first door
decide the key wholly, then meets the busy journal SQLite reports to a writer that lost,
or starts the run the first door took (injected hooks, no timing)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

from dissensus.panels import ChatCompletion, ChatError, Members, PanelChat
from dissensus.panels.door import ATTEMPT_FIELD
from dissensus.pipeline.durable import case_step
from dissensus.pipeline.steps import CaseInput
from dissensus.store.errors import JournalBusy
from dissensus.store.journal import Journal
from test_chat_idempotency import NAMES, Counting, _body, _policy

KEY = "race-key-1"


def _door(journal: Journal) -> tuple[PanelChat, dict[str, Counting]]:
    members = {n: Counting() for n in NAMES}
    policy = _policy()
    return PanelChat(policy, journal=journal, members=Members(policy.panel, dict(members))), members


def test_the_second_of_two_doors_given_a_key_at_once_answers_the_first_case_as_a_replay(
    tmp_path: Path,
) -> None:
    path = str(tmp_path / "runs.sqlite")
    with Journal(path) as journal_a, Journal(path) as journal_b:
        first, _ = _door(journal_a)
        second, asked = _door(journal_b)
        won: list[Any] = []

        async def losing(panel: Any, spec: Any, run_id: str, **kw: Any) -> Any:
            # The first door decides the key while the second was asking its members,
            # then the second's write loses (SQLite: busy for a writer whose snapshot is
            # stale).
            won.append(await asyncio.to_thread(first.complete, _body(), idempotency_key=KEY))
            raise JournalBusy("journal is locked by another writer")

        second._decide_watched = losing  # type: ignore[method-assign]
        try:
            lost = second.complete(_body(), idempotency_key=KEY)
        finally:
            second.close()
            first.close()
        runs = journal_a.runs()
    assert sum(m.asked for m in asked.values()) == len(NAMES)  # it did ask its members
    (winner,) = won
    assert winner.dissensus.replayed is False and winner.usage.total_tokens > 0
    assert lost.dissensus.replayed is True
    assert lost.usage.total_tokens == 0  # no member's answer of this one is in the case
    assert (lost.id, lost.dissensus.case_id) == (winner.id, winner.dissensus.case_id)
    assert lost.choices[0].message.content == winner.choices[0].message.content
    assert [r.run_id for r in runs] == [winner.dissensus.run_id]


def test_a_keyed_commit_whose_acknowledgement_is_lost_is_answered_as_its_own(
    tmp_path: Path,
) -> None:
    """The door's decision journals the case, then reports a busy journal: the case is
    this request's (its attempt id), answered as it is, not as a replay."""
    with Journal(str(tmp_path / "runs.sqlite")) as journal:
        door, _ = _door(journal)
        decide = door._decide_watched

        async def unacknowledged(panel: Any, spec: Any, run_id: str, **kw: Any) -> Any:
            await decide(panel, spec, run_id, **kw)
            raise JournalBusy("journal is locked by another writer")

        door._decide_watched = unacknowledged  # type: ignore[method-assign]
        try:
            done = door.complete(_body(), idempotency_key=KEY)
        finally:
            door.close()
        entered = case_step(journal, done.dissensus.run_id, 1, "input")
    assert done.dissensus.replayed is False and done.usage.total_tokens > 0
    assert entered is not None
    assert len(CaseInput.model_validate(entered).panel.meta[ATTEMPT_FIELD]) == 32


def test_each_keyed_attempt_journals_an_attempt_id_of_its_own(tmp_path: Path) -> None:
    """The same request under the same key, on two journals: two attempt ids."""
    attempts = []
    for i in range(2):
        with Journal(str(tmp_path / f"runs{i}.sqlite")) as journal:
            door, _ = _door(journal)
            try:
                done = door.complete(_body(), idempotency_key=KEY)
            finally:
                door.close()
            entered = case_step(journal, done.dissensus.run_id, 1, "input")
            assert entered is not None
            attempts.append(CaseInput.model_validate(entered).panel.meta[ATTEMPT_FIELD])
    assert len(set(attempts)) == 2


class Meeting(Counting):
    """A member that answers only once every member of both doors was asked: neither
    door journals anything before both found no case for the key."""

    def __init__(self, met: asyncio.Barrier) -> None:
        super().__init__()
        self.met = met

    async def send(self, request: Any, *, json_mode: Any) -> Any:
        async with asyncio.timeout(10):
            await self.met.wait()
        return await super().send(request, json_mode=json_mode)


@pytest.mark.anyio
async def test_a_door_whose_run_the_other_door_took_meanwhile_answers_key_in_use(
    tmp_path: Path,
) -> None:
    """Both doors asked their members for one key, the first decided it; the second's
    decision finds the run taken (not a journal fault): 409 ``idempotency_key_in_use``,
    never a failed decision, and the key sent again is the first's case, asking nobody."""
    path = str(tmp_path / "runs.sqlite")
    met = asyncio.Barrier(2 * len(NAMES))
    with Journal(path) as journal_a, Journal(path) as journal_b:
        policy = _policy()
        members_a = {n: Meeting(met) for n in NAMES}
        members_b = {n: Meeting(met) for n in NAMES}
        first = PanelChat(policy, journal=journal_a, members=Members(policy.panel, dict(members_a)))
        second = PanelChat(
            policy, journal=journal_b, members=Members(policy.panel, dict(members_b))
        )
        decided = threading.Event()
        decide_first, decide_second = first._decide_watched, second._decide_watched

        async def deciding_first(panel: Any, spec: Any, run_id: str, **kw: Any) -> Any:
            try:
                return await decide_first(panel, spec, run_id, **kw)
            finally:
                decided.set()

        async def deciding_second(panel: Any, spec: Any, run_id: str, **kw: Any) -> Any:
            assert await asyncio.to_thread(decided.wait, 10)
            return await decide_second(panel, spec, run_id, **kw)  # the run is the first's now

        first._decide_watched = deciding_first  # type: ignore[method-assign]
        second._decide_watched = deciding_second  # type: ignore[method-assign]
        try:
            won, lost = await asyncio.gather(
                first.acomplete(_body(), idempotency_key=KEY),
                second.acomplete(_body(), idempotency_key=KEY),
                return_exceptions=True,
            )
            assert isinstance(won, ChatCompletion), won
            assert isinstance(lost, ChatError), lost
            assert (lost.status, lost.code) == (409, "idempotency_key_in_use")
            assert won.dissensus.case_id in str(lost)
            asked = [m.asked for m in [*members_a.values(), *members_b.values()]]
            assert asked == [1] * 2 * len(NAMES)  # each door asked each member once
            again = await second.acomplete(_body(), idempotency_key=KEY)
        finally:
            await second.aclose()
            await first.aclose()
        runs = journal_a.runs()
    assert won.dissensus.replayed is False and again.dissensus.replayed is True
    assert again.dissensus.case_id == won.dissensus.case_id
    assert [m.asked for m in members_b.values()] == [1] * len(NAMES)  # nobody asked again
    assert [r.run_id for r in runs] == [won.dissensus.run_id]
