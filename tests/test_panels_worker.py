"""Decisions run on their own thread: same results, the caller's loop free, cancellation kept."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dissensus.panels.door as door
from dissensus.llm.base import BackendResponse
from dissensus.panels import Members, PanelChat
from dissensus.panels.shapes import ChatError
from dissensus.panels.worker import DecisionThread
from dissensus.pipeline.policy import policy_from_dict
from dissensus.store.journal import Journal


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(), max_size=8), st.integers(0, 7))
def test_results_and_errors_come_back_to_the_caller(values: list[int], fail_at: int) -> None:
    worker = DecisionThread()
    callers: set[int] = set()

    async def job(value: int, index: int) -> tuple[int, str]:
        await asyncio.sleep(0)
        if index == fail_at:
            raise ValueError(f"job {index}")
        return value * 2, threading.current_thread().name

    async def main() -> list[Any]:
        callers.add(threading.get_ident())
        return await asyncio.gather(
            *(worker.run(job(v, i)) for i, v in enumerate(values)), return_exceptions=True
        )

    try:
        got = asyncio.run(main())
    finally:
        worker.stop()
    for index, (value, out) in enumerate(zip(values, got, strict=True)):
        if index == fail_at:
            assert isinstance(out, ValueError) and str(out) == f"job {index}"
        else:
            assert out == (value * 2, worker.name)
    assert threading.get_ident() in callers  # the caller ran on this thread, the jobs did not


def test_stop_cancels_what_runs_and_a_later_run_starts_again() -> None:
    worker = DecisionThread()
    started = threading.Event()

    async def forever() -> None:
        started.set()
        await asyncio.sleep(3600)

    async def main() -> None:
        pending = asyncio.ensure_future(worker.run(forever()))
        await asyncio.to_thread(started.wait, 30)
        await asyncio.to_thread(worker.stop)
        with pytest.raises(asyncio.CancelledError):
            await pending

        async def two() -> int:
            return 2

        assert await worker.run(two()) == 2

    try:
        asyncio.run(main())
    finally:
        worker.stop()
    worker.stop()  # idempotent


class _Instant:
    provider = "test"
    model_id = "instant"

    async def send(self, request: Any, *, json_mode: Any) -> BackendResponse:
        return BackendResponse(
            text='{"reasoning": "3 + 4 = 7.", "answer": "7"}',
            model="instant",
            prompt_tokens=5,
            completion_tokens=5,
        )

    async def aclose(self) -> None:
        return None


def test_the_door_decides_off_the_callers_thread_into_the_journal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = [f"m{i}" for i in range(3)]
    section = {"answer": "number", "members": [{"name": n, "model": "scripted:x"} for n in names]}
    policy = policy_from_dict({"reading": {"similarity": "tfidf"}, "panel": section})
    members = Members(policy.panel, {n: _Instant() for n in names})
    seen: list[str] = []
    decide = door._decide_panel

    async def spy(*args: Any, **kwargs: Any) -> Any:
        seen.append(threading.current_thread().name)
        return await decide(*args, **kwargs)

    monkeypatch.setattr(door, "_decide_panel", spy)
    with Journal(str(tmp_path / "j.sqlite")) as journal:
        chat = PanelChat(policy, journal=journal, members=members)
        try:
            done = chat.complete({"model": "p", "messages": [{"role": "user", "content": "3+4?"}]})
            status = chat.case(done.dissensus.case_id)
        finally:
            chat.close()
        assert journal.run(done.dissensus.run_id) is not None
        # A call after close() says so (not that a server is shutting down), and
        # journals nothing.
        with pytest.raises(ChatError, match="PanelChat is closed") as closed:
            chat.complete({"model": "p", "messages": [{"role": "user", "content": "3+4?"}]})
        assert closed.value.code == door.CLOSED and len(journal.runs()) == 1
        chat.close()  # again: a no-op
    assert seen == ["dissensus-chat-decide"]
    # What the caller got is what the journal holds (unanimous, unguarded: escalated).
    assert status.record.line == 1
    assert status.status == done.dissensus.status
    assert status.record.review_id == done.dissensus.review_id


def test_the_sync_twins_work_from_many_threads_and_inside_a_running_loop(
    tmp_path: Path,
) -> None:
    """A thread-pool web app calls ``complete`` from several threads at once, a notebook
    from inside its running loop: every call is answered, each case journalled once."""
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    names = [f"m{i}" for i in range(3)]
    section = {"answer": "number", "members": [{"name": n, "model": "scripted:x"} for n in names]}
    policy = policy_from_dict({"reading": {"similarity": "tfidf"}, "panel": section})
    members = Members(policy.panel, {n: _Instant() for n in names})
    body = {"model": "p", "messages": [{"role": "user", "content": "3+4?"}]}
    with Journal(str(tmp_path / "j.sqlite")) as journal:
        chat = PanelChat(policy, journal=journal, members=members)
        try:
            with ThreadPoolExecutor(max_workers=6) as pool:
                threaded = list(pool.map(lambda _: chat.complete(body), range(12)))

            async def notebook() -> Any:
                return chat.complete(body), chat.case(threaded[0].dissensus.case_id)

            inside, status = asyncio.run(notebook())
        finally:
            chat.close()
        runs = {c.dissensus.run_id for c in [*threaded, inside]}
        assert len(runs) == 13 and len(journal.runs()) == 13
    assert status.record.review_id == threaded[0].dissensus.review_id
