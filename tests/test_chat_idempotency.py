"""Idempotency keys of the panel door: one key, one case, however often it is sent.

In-process members count what they are asked; the library call (:class:`PanelChat`)
and the HTTP door (``Idempotency-Key``, the official ``openai`` SDK as the client) are
each sent the same request again, concurrently, after a cancellation, with another
question, under another token, and with keys that are not keys.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chat_helpers import live_server
from cli_helpers import cli
from dissensus.llm.base import BackendResponse
from dissensus.panels import ChatError, Members, PanelChat
from dissensus.panels.door import parse_request
from dissensus.panels.idempotency import (
    FINGERPRINT_FIELD,
    MAX_KEY_CHARS,
    check_key,
    keyed_run_id,
    request_fingerprint,
)
from dissensus.pipeline.durable import case_step
from dissensus.pipeline.policy import policy_from_dict
from dissensus.pipeline.steps import CaseInput
from dissensus.serve import ServeSettings, create_app
from dissensus.serve.chat import _timeout_note
from dissensus.store.journal import Journal
from serve_helpers import write_tokens

NAMES = ["m1", "m2", "m3"]


class Counting:
    """A member answering every question with the sum it finds in it, after ``delay_s``;
    ``failing`` first attempts fail (a member down), and every attempt is counted."""

    provider = "test"
    model_id = "counting"

    def __init__(self, delay_s: float = 0.0, failing: int = 0) -> None:
        self.delay_s = delay_s
        self.failing = failing
        self.asked = 0

    async def send(self, request: Any, *, json_mode: Any) -> BackendResponse:
        self.asked += 1
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        if self.failing > 0:
            self.failing -= 1
            raise ConnectionError("member down")
        numbers = [int(w) for w in request.messages[-1].content.split() if w.isdigit()]
        total = sum(numbers)
        return BackendResponse(
            text=json.dumps({"reasoning": f"Adding gives {total}.", "answer": str(total)}),
            model="counting",
            prompt_tokens=5,
            completion_tokens=5,
        )

    async def aclose(self) -> None:
        return None


def _policy(sections: dict[str, Any] | None = None, **panel: Any) -> Any:
    section = {
        "answer": "number",
        "members": [{"name": n, "model": "scripted:x", "family": f"f{n}"} for n in NAMES],
        "max_retries": 0,
        **panel,
    }
    data = {"reading": {"similarity": "tfidf"}, "panel": section, **(sections or {})}
    return policy_from_dict(data)


def _chat(
    journal: Journal, members: dict[str, Counting], sections: dict[str, Any] | None = None
) -> PanelChat:
    policy = _policy(sections)
    return PanelChat(policy, journal=journal, members=Members(policy.panel, dict(members)))


def _body(question: str = "What is 3 plus 4 ?") -> dict[str, Any]:
    return {"model": "dissensus-panel", "messages": [{"role": "user", "content": question}]}


def _said(done: Any) -> str | None:
    """What the panel said: the committed decision, or an escalation's plurality."""
    return done.dissensus.decision or done.dissensus.suggestion


def _asked(members: dict[str, Counting]) -> int:
    return sum(m.asked for m in members.values())


@pytest.fixture
def journal(tmp_path: Path) -> Iterator[Journal]:
    with Journal(str(tmp_path / "runs.sqlite")) as journal:
        yield journal


@pytest.mark.anyio
async def test_a_key_sent_again_is_answered_with_its_case_and_asks_nobody(
    journal: Journal, tmp_path: Path
) -> None:
    members = {n: Counting() for n in NAMES}
    chat = _chat(journal, members)
    try:
        first = await chat.acomplete(_body(), idempotency_key="key-1")
        asked = _asked(members)
        again = await chat.acomplete(_body(), idempotency_key="key-1")
        other = await chat.acomplete(_body(), idempotency_key="key-2")
        unkeyed = [await chat.acomplete(_body()) for _ in range(2)]
    finally:
        await chat.aclose()
    assert asked == len(NAMES)
    assert _asked(members) == 4 * len(NAMES)  # key-1 once, key-2 once, the two unkeyed
    assert first.dissensus.run_id == keyed_run_id("key-1")
    assert (again.id, again.dissensus.case_id) == (first.id, first.dissensus.case_id)
    assert again.choices[0].message.content == first.choices[0].message.content
    assert again.choices[0].finish_reason == first.choices[0].finish_reason
    assert again.dissensus.decision == first.dissensus.decision
    assert again.dissensus.members == first.dissensus.members
    assert (first.dissensus.replayed, again.dissensus.replayed) == (False, True)
    assert first.usage is not None and first.usage.total_tokens == 30
    assert again.usage is not None and again.usage.total_tokens == 0
    assert other.dissensus.case_id != first.dissensus.case_id
    assert unkeyed[0].dissensus.case_id != unkeyed[1].dissensus.case_id
    # The fingerprint is journalled with the panel; the key itself is not.
    entered = case_step(journal, first.dissensus.run_id, 1, "input")
    assert entered is not None
    meta = CaseInput.model_validate(entered).panel.meta
    assert meta[FINGERPRINT_FIELD] == request_fingerprint(parse_request(_body()))
    assert "key-1" not in json.dumps(meta)
    journal.close()
    result = cli("runs", "verify", first.dissensus.run_id, "--journal", tmp_path / "runs.sqlite")
    assert result.code == 0, result.err


@pytest.mark.anyio
async def test_a_resolved_case_is_replayed_with_the_humans_decision(journal: Journal) -> None:
    from dissensus.pipeline.review import resolve

    members = {n: Counting() for n in NAMES}
    chat = _chat(journal, members)
    try:
        asked = await chat.acomplete(_body("What is 5 plus 6 ?"), idempotency_key="e")
        assert asked.dissensus.review_id is not None
        resolve(journal, asked.dissensus.review_id, decision="11", note="checked", reviewer="ann")
        resolved = await chat.acomplete(_body("What is 5 plus 6 ?"), idempotency_key="e")
    finally:
        await chat.aclose()
    assert (asked.dissensus.status, asked.choices[0].finish_reason) == ("escalated", "escalated")
    assert (resolved.dissensus.status, resolved.dissensus.decision) == ("resolved", "11")
    assert resolved.choices[0].finish_reason == "stop"
    # The text of the first member that gave the human's decision.
    assert resolved.dissensus.answered_by == "m1"
    assert '"answer": "11"' in (resolved.choices[0].message.content or "")
    assert resolved.dissensus.replayed
    assert _asked(members) == len(NAMES)


@pytest.mark.anyio
async def test_the_same_key_with_another_question_is_refused(journal: Journal) -> None:
    members = {n: Counting() for n in NAMES}
    chat = _chat(journal, members)
    try:
        await chat.acomplete(_body(), idempotency_key="k")
        with pytest.raises(ChatError) as refused:
            await chat.acomplete(_body("What is 5 plus 6 ?"), idempotency_key="k")
        # How the answer is delivered is not what is asked: a stream of the same question is the case.
        streamed = await chat.acomplete({**_body(), "stream": True}, idempotency_key="k")
    finally:
        await chat.aclose()
    assert (refused.value.status, refused.value.code) == (422, "idempotency_key_reused")
    assert _asked(members) == len(NAMES)
    assert streamed.dissensus.replayed


@pytest.mark.anyio
async def test_a_key_is_its_callers_own(journal: Journal) -> None:
    members = {n: Counting() for n in NAMES}
    chat = _chat(journal, members)
    try:
        alice = await chat.acomplete(_body(), idempotency_key="k", key_scope="alice")
        bob = await chat.acomplete(
            _body("What is 5 plus 6 ?"), idempotency_key="k", key_scope="bob"
        )
    finally:
        await chat.aclose()
    assert alice.dissensus.case_id != bob.dissensus.case_id
    assert (_said(alice), _said(bob)) == ("7", "11")


@pytest.mark.anyio
async def test_concurrent_requests_with_one_key_make_one_case(journal: Journal) -> None:
    members = {n: Counting(delay_s=0.2) for n in NAMES}
    chat = _chat(journal, members)
    try:
        answers = await asyncio.gather(
            *(chat.acomplete(_body(), idempotency_key="same") for _ in range(5))
        )
    finally:
        await chat.aclose()
    assert _asked(members) == len(NAMES)
    assert len({a.dissensus.case_id for a in answers}) == 1
    assert sorted(a.dissensus.replayed for a in answers) == [False, True, True, True, True]
    assert len({a.choices[0].message.content for a in answers}) == 1


@pytest.mark.anyio
async def test_a_key_whose_request_journalled_nothing_stays_free(journal: Journal) -> None:
    # Every member down on the first request: too few answers, a 502, nothing journalled.
    members = {n: Counting(failing=1) for n in NAMES}
    chat = _chat(journal, members)
    try:
        with pytest.raises(ChatError) as down:
            await chat.acomplete(_body(), idempotency_key="k")
        assert journal.run(keyed_run_id("k"), missing_ok=True) is None
        done = await chat.acomplete(_body(), idempotency_key="k")
    finally:
        await chat.aclose()
    assert (down.value.status, down.value.code) == (502, "panel_unavailable")
    assert not done.dissensus.replayed
    assert _said(done) == "7"


@pytest.mark.anyio
async def test_a_caller_gone_after_the_hand_off_is_answered_on_its_retry(
    journal: Journal,
) -> None:
    members = {n: Counting() for n in NAMES}
    chat = _chat(journal, members)
    handed: list[str] = []

    async def first() -> Any:
        task = asyncio.current_task()
        assert task is not None

        def gone(case_id: str, run_id: str) -> None:
            handed.append(case_id)
            task.cancel()  # the client's timeout, just after the hand-off

        return await chat.acomplete(_body(), idempotency_key="k", on_decide=gone)

    try:
        with pytest.raises(asyncio.CancelledError):
            await asyncio.ensure_future(first())
        retried = await chat.acomplete(_body(), idempotency_key="k")
    finally:
        await chat.aclose()
    assert retried.dissensus.case_id == handed[0]
    assert retried.dissensus.replayed
    assert _asked(members) == len(NAMES)


@pytest.mark.anyio
async def test_a_keyed_run_that_did_not_end_is_a_409(journal: Journal) -> None:
    from dissensus.pipeline.batch import start_run

    members = {n: Counting() for n in NAMES}
    chat = _chat(journal, members)
    # Another process started the key's run and has not journalled its case yet.
    start_run(journal, None, chat.spec, text=json.dumps({"id": "p", "outputs": []}) + "\n",
              run_id=keyed_run_id("k"))  # fmt: skip
    try:
        with pytest.raises(ChatError) as busy:
            await chat.acomplete(_body(), idempotency_key="k")
    finally:
        await chat.aclose()
    assert (busy.value.status, busy.value.code) == (409, "idempotency_key_in_use")
    assert _asked(members) == 0


@pytest.mark.parametrize("key", ["", " key", "ké", "a b", "a\nb", "x" * (MAX_KEY_CHARS + 1), 7])
def test_what_is_no_key_is_refused(key: Any) -> None:
    with pytest.raises(ChatError) as refused:
        check_key(key)
    assert (refused.value.status, refused.value.code) == (400, "invalid_idempotency_key")
    assert refused.value.param == "Idempotency-Key"


def test_keys_and_run_ids() -> None:
    assert check_key("x" * MAX_KEY_CHARS) == "x" * MAX_KEY_CHARS
    assert keyed_run_id("k", "a") != keyed_run_id("k", "b") != keyed_run_id("k")
    assert keyed_run_id("k") == keyed_run_id("k")
    note = _timeout_note("r.1", "r", keyed=True)
    assert note.headers == {"x-should-retry": "true"}
    assert "Idempotency-Key" in note.message
    assert _timeout_note("r.1", "r").headers == {"x-should-retry": "false"}


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    sends=st.lists(
        st.tuples(st.sampled_from(["a", "b", "c", None]), st.integers(1, 3)),
        min_size=1,
        max_size=8,
    )
)
def test_one_key_one_case(tmp_path_factory: pytest.TempPathFactory, sends: list[Any]) -> None:
    """Whatever the order of sends: each key's members are asked once, every send of a
    key with its first question answers that case, another question is a 422, and a
    send without a key is a case of its own."""
    members = {n: Counting() for n in NAMES}
    path = tmp_path_factory.mktemp("keys") / "runs.sqlite"
    with Journal(str(path)) as journal:
        chat = _chat(journal, members)
        first: dict[str, tuple[int, str]] = {}
        cases: list[str] = []
        try:
            for key, n in sends:
                body = _body(f"What is {n} plus {n} ?")
                if key is not None and key in first and first[key][0] != n:
                    with pytest.raises(ChatError) as refused:
                        chat.complete(body, idempotency_key=key)
                    assert refused.value.status == 422
                    continue
                done = chat.complete(body, idempotency_key=key)
                assert _said(done) == str(2 * n)
                cases.append(done.dissensus.case_id)
                if key is None:
                    continue
                if key in first:
                    assert done.dissensus.replayed
                    assert done.dissensus.case_id == first[key][1]
                else:
                    assert not done.dissensus.replayed
                    first[key] = (n, done.dissensus.case_id)
        finally:
            chat.close()
    unkeyed = sum(1 for key, _ in sends if key is None)
    assert _asked(members) == len(NAMES) * (len(first) + unkeyed)
    assert len(set(cases)) == len(first) + unkeyed


# --- over HTTP, with the official SDK -------------------------------------------------


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, Counting]]]:
    root = tmp_path_factory.mktemp("keyed")
    write_tokens(root / "tokens.txt")
    members = {n: Counting() for n in NAMES}
    policy = _policy()
    (root / "script.yaml").write_text("default: '0'\n", encoding="utf-8")
    section = {
        "answer": "number",
        "members": [{"name": n, "model": "scripted:script.yaml"} for n in NAMES],
    }
    (root / "policy.json").write_text(json.dumps({"panel": section}), encoding="utf-8")
    settings = ServeSettings(
        journal=str(root / "journal.sqlite"),
        policy=str(root / "policy.json"),
        tokens=str(root / "tokens.txt"),
    )

    def factory() -> Any:
        app = create_app(settings)
        # The policy's scripted members replaced by counting ones, in this process.
        app.state.chat.members = Members(policy.panel, dict(members))
        return app

    with live_server(factory) as url:
        yield url, members


def test_the_sdk_sends_a_key_and_gets_the_case_again(
    served: tuple[str, dict[str, Counting]],
) -> None:
    openai = pytest.importorskip("openai")
    url, members = served
    before = _asked(members)
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="tok-sub", max_retries=0)
    other = openai.OpenAI(base_url=f"{url}/v1", api_key="tok-adm", max_retries=0)
    try:
        ask = {"model": "dissensus-panel", "messages": _body("What is 20 plus 22 ?")["messages"]}
        key = {"Idempotency-Key": "sdk-key-1"}
        first = client.chat.completions.with_raw_response.create(**ask, extra_headers=key)
        again = client.chat.completions.with_raw_response.create(**ask, extra_headers=key)
        theirs = other.chat.completions.create(**ask, extra_headers=key)
        with pytest.raises(openai.UnprocessableEntityError) as reused:
            client.chat.completions.create(
                model="dissensus-panel",
                messages=_body("What is 1 plus 1 ?")["messages"],
                extra_headers=key,
            )
        with pytest.raises(openai.BadRequestError) as bad:
            client.chat.completions.create(**ask, extra_headers={"Idempotency-Key": "a b"})
    finally:
        client.close()
        other.close()
    done, replayed = first.parse(), again.parse()
    assert "Idempotent-Replayed" not in first.headers
    assert again.headers["Idempotent-Replayed"] == "true"
    assert replayed.id == done.id
    assert replayed.choices[0].message.content == done.choices[0].message.content
    assert done.model_extra["dissensus"]["suggestion"] == "42"
    assert replayed.model_extra["dissensus"]["replayed"] is True
    assert theirs.model_extra["dissensus"]["case_id"] != done.model_extra["dissensus"]["case_id"]
    assert _asked(members) - before == 2 * len(NAMES)  # this token's key once, the other's once
    assert reused.value.code == "idempotency_key_reused"
    assert (bad.value.code, bad.value.param) == ("invalid_idempotency_key", "Idempotency-Key")


def test_a_key_sent_twice_in_one_request_is_refused(
    served: tuple[str, dict[str, Counting]],
) -> None:
    url, members = served
    before = _asked(members)
    response = httpx.post(
        f"{url}/v1/chat/completions",
        json=_body(),
        headers=[
            ("Authorization", "Bearer tok-sub"),
            ("Idempotency-Key", "a"),
            ("Idempotency-Key", "b"),
        ],
    )
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_idempotency_key"
    assert _asked(members) == before


@pytest.mark.anyio
async def test_a_request_waiting_for_its_key_at_shutdown_is_ended_unasked(
    journal: Journal,
) -> None:
    """A drain that ended the first request with a key let the requests waiting for the
    key ask the members again mid-shutdown (and be cut off as a plain 500): they are
    ended as the first is, 503 shutting_down, no member asked."""
    members = {n: Counting(delay_s=5.0) for n in NAMES}
    chat = _chat(journal, members)
    first = asyncio.ensure_future(chat.acomplete(_body(), idempotency_key="k"))
    await asyncio.sleep(0.2)
    waiting = asyncio.ensure_future(chat.acomplete(_body(), idempotency_key="k"))
    await asyncio.sleep(0.2)
    await chat.adrain(0.1)
    results = await asyncio.gather(first, waiting, return_exceptions=True)
    await chat.aclose()
    for result in results:
        assert isinstance(result, ChatError) and result.code == "shutting_down", result
    assert _asked(members) == len(NAMES)
    assert journal.run(keyed_run_id("k"), missing_ok=True) is None


@pytest.mark.anyio
async def test_a_retry_waiting_on_its_cases_decision_is_told_the_case(
    journal: Journal,
) -> None:
    """A keyed retry that waits on a decision still running is told the case at once, so
    the service's 504 names it (``timeout_case_journalled``), as the first request's does."""
    import threading

    members = {n: Counting() for n in NAMES}
    chat = _chat(journal, members)
    told: list[tuple[str, str]] = []
    # Blocks the decision thread's loop, so the decision queues behind, until the retry
    # is told its case (however long the members take to answer first).
    gate = threading.Event()

    async def busy() -> None:
        gate.wait(60)

    def on_decide(case_id: str, run_id: str) -> None:
        told.append((case_id, run_id))
        gate.set()

    blocking = chat._decider.submit(busy())
    try:
        first = asyncio.ensure_future(chat.acomplete(_body(), idempotency_key="k"))
        for _ in range(6000):  # 60 s at most
            if chat._deciding:
                break
            await asyncio.sleep(0.01)
        assert chat._deciding and not blocking.done()
        again = await chat.acomplete(_body(), idempotency_key="k", on_decide=on_decide)
        done = await first
    finally:
        gate.set()
        await chat.aclose()
    assert told == [(done.dissensus.case_id, done.dissensus.run_id)]
    assert again.dissensus.replayed and again.dissensus.case_id == done.dissensus.case_id


def test_whitespace_around_the_header_value_is_not_part_of_the_key() -> None:
    from starlette.requests import Request

    from dissensus.serve.chat import _idempotency_key

    for raw in (b"abc", b" abc", b"abc ", b"\tabc\t"):
        request = Request({"type": "http", "headers": [(b"idempotency-key", raw)]})
        assert _idempotency_key(request) == "abc", raw
