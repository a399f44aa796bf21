"""The panel door reads the journal off the event loop: a keyed request and a case look-up.

Before, a request with an ``Idempotency-Key`` read the key's case, and
``GET /v1/cases/{id}`` read its case, on the server's event loop: while the journal's
lock was held (a decision waiting for another writer's SQLite lock, up to the busy
timeout), the whole server stood still, ``/healthz`` and every other request with it,
for as long. Here another thread holds the journal's lock for ``HOLD_S`` seconds while
the loop runs a ticker beside the door's call: the ticker must keep ticking.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from dissensus.llm.base import BackendResponse
from dissensus.panels import Members, PanelChat
from dissensus.pipeline.policy import policy_from_dict
from dissensus.store.journal import Journal

NAMES = ["m1", "m2", "m3"]
HOLD_S = 1.5


class _Seven:
    provider = "test"
    model_id = "seven"

    async def send(self, request: Any, *, json_mode: Any) -> BackendResponse:
        return BackendResponse(
            text="Adding gives 7. The answer is 7.",
            model="seven",
            prompt_tokens=5,
            completion_tokens=5,
        )

    async def aclose(self) -> None:
        return None


def _chat(journal: Journal) -> PanelChat:
    section = {"answer": "number", "members": [{"name": n, "model": "scripted:x"} for n in NAMES]}
    policy = policy_from_dict({"reading": {"similarity": "tfidf"}, "panel": section})
    members = Members(policy.panel, {n: _Seven() for n in NAMES})
    return PanelChat(policy, journal=journal, members=members, shift_every=0)


BODY = {"model": "m", "messages": [{"role": "user", "content": "What is 3 plus 4?"}]}


async def _longest_stall(journal: Journal, call: Callable[[], Awaitable[Any]]) -> float:
    """The longest the loop went without running the ticker while ``call`` ran, with
    the journal's lock held by another thread for :data:`HOLD_S` seconds."""
    taken, release = threading.Event(), threading.Event()

    def hold() -> None:
        with journal._backend.lock:  # type: ignore[attr-defined]
            taken.set()
            release.wait(HOLD_S)

    holder = threading.Thread(target=hold, daemon=True)
    holder.start()
    taken.wait(5)
    stall, last, done = 0.0, time.monotonic(), False

    async def tick() -> None:
        nonlocal stall, last
        while not done:
            await asyncio.sleep(0.01)
            now = time.monotonic()
            stall, last = max(stall, now - last), now

    ticking = asyncio.create_task(tick())
    await asyncio.sleep(0.05)  # the ticker runs
    try:
        await call()
        stall = max(stall, time.monotonic() - last)  # a call that never let it run
    finally:
        done = True
        release.set()
        await ticking
        holder.join(5)
    return stall


async def _keyed(tmp_path: Path) -> float:
    with Journal(str(tmp_path / "j.sqlite")) as journal:
        chat = _chat(journal)
        try:
            first = await chat.acomplete(BODY, idempotency_key="k-1")

            async def again() -> None:
                done = await chat.acomplete(BODY, idempotency_key="k-1")
                assert done.dissensus.replayed and done.id == first.id

            return await _longest_stall(journal, again)
        finally:
            await chat.aclose()


async def _looked_up(tmp_path: Path) -> float:
    with Journal(str(tmp_path / "j.sqlite")) as journal:
        chat = _chat(journal)
        try:
            first = await chat.acomplete(BODY)

            async def look() -> None:
                case = await chat.acase(first.dissensus.case_id)
                assert case.case_id == first.dissensus.case_id

            return await _longest_stall(journal, look)
        finally:
            await chat.aclose()


@pytest.mark.parametrize("run", [_keyed, _looked_up], ids=["keyed-request", "case-look-up"])
def test_the_loop_keeps_serving_while_the_journal_is_locked(
    tmp_path: Path, run: Callable[[Path], Awaitable[float]]
) -> None:
    stall = asyncio.run(run(tmp_path))  # type: ignore[arg-type]
    assert stall < HOLD_S / 3, f"the event loop stood still for {stall:.2f} s"


def test_concurrent_keyed_requests_still_make_one_case(tmp_path: Path) -> None:
    async def run() -> set[str]:
        with Journal(str(tmp_path / "j.sqlite")) as journal:
            chat = _chat(journal)
            try:
                done = await asyncio.gather(
                    *(chat.acomplete(BODY, idempotency_key="same") for _ in range(8))
                )
            finally:
                await chat.aclose()
            assert sum(1 for d in done if not d.dissensus.replayed) == 1
            assert len(journal.runs()) == 1
            return {d.id for d in done}

    assert len(asyncio.run(run())) == 1
