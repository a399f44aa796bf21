"""The chat door when a request does not end by itself: shutdown, the request timeout, retries.

* **SIGTERM** (a real ``dissensus serve`` process, members on loopback
  :class:`~dissensus.llm.fakeserver.FakeServer` instances with latency): requests still
  waiting on their members when the grace is over end with OpenAI's error body, ``503``,
  ``Retry-After`` and ``x-should-retry: true`` (a streaming request too, as JSON, so the
  official SDK keeps its code), nothing journalled, no traceback; requests whose members answer
  within the grace are answered as usual.
* **The request timeout** (``--timeout``): a request cancelled before its decision is
  handed over journals nothing; one cancelled after gets a ``504`` naming its case, which
  is then readable, whole.
* **Retries**: the door's errors that a retry cannot mend tell the official SDK not to
  retry, so the members are asked once.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest

openai = pytest.importorskip("openai")

from chat_helpers import live_server  # noqa: E402
from dissensus.llm.fakeserver import FakeServer, FaultPlan, ServerSettings  # noqa: E402
from dissensus.llm.scripted import ScriptedRules  # noqa: E402
from dissensus.panels import ChatError, PanelChat  # noqa: E402
from dissensus.panels.door import SHUTTING_DOWN  # noqa: E402
from dissensus.pipeline.policy import policy_from_dict  # noqa: E402
from dissensus.serve import ServeSettings, create_app  # noqa: E402
from dissensus.serve.server import SHUTDOWN_ENV  # noqa: E402
from dissensus.store import open_journal  # noqa: E402
from dissensus.store.journal import Journal  # noqa: E402
from serve_helpers import write_tokens  # noqa: E402
from test_serve_load import PLAIN, spawn_server, stop_server, wait_ready  # noqa: E402

YES = {"decision": "yes", "reasoning": "The statement holds for every case we checked."}
ASK = {"model": "m", "messages": [{"role": "user", "content": "Does the claim hold?"}]}
SUB = {"Authorization": "Bearer tok-sub"}


def _fake(latency_s: float = 0.0, **faults: Any) -> FakeServer:
    settings = ServerSettings(latency_s=latency_s, faults=FaultPlan(retry_after="0", **faults))
    return FakeServer(ScriptedRules(default=YES), settings).start()


def _panel(servers: list[FakeServer], **extra: Any) -> dict[str, Any]:
    return {
        "answer": "structured",
        "options": ["yes", "no"],
        "members": [
            {
                "name": f"m{i}",
                "model": "openai:fake-model",
                "base_url": s.base_url,
                "family": f"f{i}",
            }
            for i, s in enumerate(servers)
        ],
        "attempt_timeout_s": 20,
        "max_retries": 0,
        **extra,
    }


@pytest.fixture
def members(request: pytest.FixtureRequest) -> Iterator[list[FakeServer]]:
    """Two members answering after ``request.param`` seconds."""
    with ExitStack() as stack:
        made = [_fake(request.param) for _ in range(2)]
        for server in made:
            stack.callback(server.stop)
        yield made


def _ask_all(base: str, normal: int, streaming: int) -> list[httpx.Response]:
    """``normal`` plain and ``streaming`` streaming requests at once, each read to its end."""
    out: list[httpx.Response] = []
    lock = threading.Lock()

    def one(stream: bool) -> None:
        try:
            res = httpx.post(
                base + "/v1/chat/completions",
                json={**ASK, "stream": stream},
                headers=SUB,
                timeout=60,
                **PLAIN,
            )
        except httpx.TransportError as exc:  # a dropped connection fails the test below
            res = httpx.Response(599, text=repr(exc), headers={"x-stream": str(stream)})
        with lock:
            out.append(res)

    threads = [threading.Thread(target=one, args=(False,)) for _ in range(normal)]
    threads += [threading.Thread(target=one, args=(True,)) for _ in range(streaming)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(90)
    return out


def _until_asked(servers: list[FakeServer], requests: int, asking: threading.Thread) -> None:
    """Until every member has been asked by each of ``requests`` requests (60 s at most):
    they are then all in the server, waiting on their members."""
    deadline = time.monotonic() + 60
    while any(s.requests_received < requests for s in servers):
        assert asking.is_alive(), "the requests ended before every member was asked"
        assert time.monotonic() < deadline, [s.requests_received for s in servers]
        time.sleep(0.01)


def _sigterm_during(
    tmp_path: Path, servers: list[FakeServer], *, shutdown_s: int
) -> tuple[list[httpx.Response], str, int, str]:
    """4 plain and 2 streaming requests, SIGTERM once each has asked every member: the
    responses, the server's log, its exit code and its journal."""
    journal = str(tmp_path / "journal.sqlite")
    proc, base = spawn_server(
        tmp_path,
        journal,
        extra_env={SHUTDOWN_ENV: str(shutdown_s)},
        policy={"panel": _panel(servers)},
    )
    try:
        wait_ready(tmp_path, proc, base)
        got: list[list[httpx.Response]] = []
        asking = threading.Thread(target=lambda: got.append(_ask_all(base, 4, 2)))
        asking.start()
        _until_asked(servers, 6, asking)
        proc.terminate()
        asking.join(90)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            stop_server(proc)
    log = (tmp_path / "server.log").read_text(encoding="utf-8", errors="replace")
    return got[0], log, proc.returncode, journal


def _events(res: httpx.Response) -> list[str]:
    return [line[6:] for line in res.text.splitlines() if line.startswith("data: ")]


@pytest.mark.slow
@pytest.mark.parametrize("members", [8.0], indirect=True)
def test_sigterm_ends_requests_waiting_on_members_with_a_retryable_503(
    tmp_path: Path, members: list[FakeServer]
) -> None:
    responses, log, code, journal = _sigterm_during(tmp_path, members, shutdown_s=2)
    assert len(responses) == 6
    for res in responses:
        assert res.status_code == 503, (res.status_code, res.text, log[-3000:])
        assert res.headers["retry-after"] == "1"
        assert res.headers["x-should-retry"] == "true"
        # A streaming request too: JSON, as OpenAI answers a stream refused before it
        # starts (the SDK reads an error status's body as JSON; from an event stream it
        # kept neither the code nor the message).
        assert res.headers["content-type"] == "application/json", res.text
        error = res.json()["error"]
        assert set(error) == {"message", "type", "param", "code"}
        assert error["code"] == "shutting_down" and error["type"] == "server_error"
    assert sum(json.loads(r.request.content)["stream"] for r in responses) == 2
    assert code == 0, log[-3000:]
    assert "Traceback" not in log and "graceful shutdown exceeded" not in log, log[-3000:]
    with open_journal(journal) as store:
        assert store.runs() == []  # ended before their decisions: nothing journalled


@pytest.mark.slow
@pytest.mark.parametrize("members", [1.5], indirect=True)
def test_sigterm_answers_requests_whose_members_answer_within_the_grace(
    tmp_path: Path, members: list[FakeServer]
) -> None:
    responses, log, code, journal = _sigterm_during(tmp_path, members, shutdown_s=4)
    assert [r.status_code for r in responses] == [200] * 6, [r.text for r in responses]
    runs = set()
    for res in responses:
        if res.headers["content-type"].startswith("text/event-stream"):
            events = _events(res)
            assert events[-1] == "[DONE]"
            last = json.loads(events[-2])
            assert last["choices"][0]["finish_reason"] in ("stop", "escalated")
            runs.add(last["dissensus"]["run_id"])
        else:
            runs.add(res.json()["dissensus"]["run_id"])
    assert code == 0, log[-3000:]
    assert "Traceback" not in log and "graceful shutdown exceeded" not in log, log[-3000:]
    with open_journal(journal) as store:
        assert {r.run_id for r in store.runs()} == runs
        for run_id in runs:
            assert store.get(run_id, "run/finished") is not None and store.verify(run_id).ok


@pytest.mark.slow
def test_a_request_timed_out_after_its_hand_off_names_its_journalled_case(
    tmp_path: Path,
) -> None:
    """``--timeout 0.15``, two fast members, 60 identical requests at once: some time out
    while their decision is being journalled. No case is journalled that its client does
    not learn about, and no client of a journalled case is told to ask again."""
    with ExitStack() as stack:
        base, settings = serve_panel(stack, tmp_path, request_timeout_s=0.15)

        async def ask_all() -> list[httpx.Response]:
            async with httpx.AsyncClient(base_url=base, headers=SUB, timeout=60) as client:
                return list(
                    await asyncio.gather(
                        *(client.post("/v1/chat/completions", json=ASK) for _ in range(60))
                    )
                )

        responses = asyncio.run(ask_all())
        known: set[str] = set()
        named = 0
        with httpx.Client(base_url=base, headers=SUB, timeout=60) as client:
            for res in responses:
                if res.status_code == 200:
                    known.add(res.json()["dissensus"]["run_id"])
                    continue
                body = res.json()
                if res.status_code == 408:  # a loaded machine: the body was not read in time
                    assert body["error"]["code"] == "request_timeout", body
                    assert "dissensus" not in body
                    continue
                assert res.status_code == 504, res.text
                if body["error"]["code"] == "timeout":  # before the hand-off: nothing journalled
                    assert "dissensus" not in body
                    continue
                named += 1
                assert body["error"]["code"] == "timeout_case_journalled", body
                assert res.headers["x-should-retry"] == "false"
                case = body["dissensus"]
                assert case["links"]["case"] == f"/v1/cases/{case['case_id']}"
                assert case["case_id"] in body["error"]["message"]
                # Readable at once: the poll waits for a decision still being journalled.
                status = client.get(case["links"]["case"])
                assert status.status_code == 200, status.text
                assert status.json()["run_id"] == case["run_id"]
                known.add(case["run_id"])
    with open_journal(settings.journal) as store:
        journalled = {r.run_id for r in store.runs()}
        assert journalled == known, (len(journalled), len(known), named)
        for run_id in journalled:
            assert store.get(run_id, "run/finished") is not None and store.verify(run_id).ok
    print(f"\n60 requests: {len(known)} journalled, {named} of them named by a 504")


def serve_panel(
    stack: ExitStack, tmp_path: Path, latency_s: float = 0.0, **extra: Any
) -> tuple[str, ServeSettings]:
    """A live service whose panel is two loopback members answering after ``latency_s``
    (stopped with ``stack``): its base URL and settings (``extra``: more settings)."""
    servers = [_fake(latency_s) for _ in range(2)]
    for server in servers:
        stack.callback(server.stop)
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        json.dumps({"reading": {"similarity": "tfidf"}, "panel": _panel(servers)}),
        encoding="utf-8",
    )
    settings = ServeSettings(
        journal=str(tmp_path / "journal.sqlite"),
        policy=str(policy),
        tokens=str(write_tokens(tmp_path / "tokens.txt")),
        **extra,
    )
    return stack.enter_context(live_server(lambda: create_app(settings))), settings


def _library_chat(servers: list[FakeServer], journal: Journal) -> PanelChat:
    policy = policy_from_dict({"reading": {"similarity": "tfidf"}, "panel": _panel(servers)})
    return PanelChat(policy, journal=journal)


@pytest.mark.parametrize("members", [5.0], indirect=True)
def test_a_call_cancelled_while_members_answer_journals_nothing(
    tmp_path: Path, members: list[FakeServer]
) -> None:
    handed: list[str] = []

    async def main(chat: PanelChat) -> None:
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(
                chat.acomplete(ASK, on_decide=lambda case, run: handed.append(case)), 0.5
            )
        await chat.aclose()

    with Journal(str(tmp_path / "j.sqlite")) as journal:
        asyncio.run(main(_library_chat(members, journal)))
        assert journal.runs() == [] and handed == []


@pytest.mark.parametrize("members", [0.0], indirect=True)
@pytest.mark.parametrize("then", ["acase", "aclose"])
def test_a_call_cancelled_after_the_hand_off_still_journals_its_whole_case(
    tmp_path: Path, members: list[FakeServer], then: str
) -> None:
    """Cancelled the moment its decision is handed over, then read back at once
    (``acase(wait=True)`` waits for the decision) or closed at once (``aclose`` waits for
    it rather than cancelling it): the case is journalled whole either way."""
    handed: list[tuple[str, str]] = []

    async def main(chat: PanelChat) -> None:
        task: asyncio.Task[Any] | None = None

        def cancel(case_id: str, run_id: str) -> None:
            handed.append((case_id, run_id))
            assert task is not None
            task.cancel()  # the caller gives up the moment the decision is handed over

        task = asyncio.ensure_future(chat.acomplete(ASK, on_decide=cancel))
        with pytest.raises(asyncio.CancelledError):
            await task
        if then == "acase":
            status = await chat.acase(handed[0][0], wait=True)
            assert (status.case_id, status.run_id) == handed[0]
            assert status.status in ("committed", "escalated")
        await chat.aclose()

    with Journal(str(tmp_path / "j.sqlite")) as journal:
        asyncio.run(main(_library_chat(members, journal)))
        run_id = handed[0][1]
        assert [r.run_id for r in journal.runs()] == [run_id]
        assert journal.get(run_id, "run/finished") is not None and journal.verify(run_id).ok


@pytest.mark.parametrize("members", [5.0], indirect=True)
def test_adrain_ends_calls_waiting_on_members_and_refuses_new_ones(
    tmp_path: Path, members: list[FakeServer]
) -> None:
    async def main(chat: PanelChat) -> tuple[ChatError, ChatError, float]:
        waiting = asyncio.ensure_future(chat.acomplete(ASK))
        await asyncio.sleep(0.3)
        start = time.monotonic()
        await chat.adrain(0.3)
        with pytest.raises(ChatError) as ended:
            await waiting
        took = time.monotonic() - start
        with pytest.raises(ChatError) as refused:
            await chat.acomplete(ASK)
        await chat.aclose()
        return ended.value, refused.value, took

    with Journal(str(tmp_path / "j.sqlite")) as journal:
        ended, refused, took = asyncio.run(main(_library_chat(members, journal)))
        assert journal.runs() == []
    assert (ended.status, ended.code) == (503, SHUTTING_DOWN) and "ended" in ended.message
    assert (refused.status, refused.code) == (503, SHUTTING_DOWN)
    assert 0.25 < took < 3


def test_the_sdk_does_not_retry_a_panel_that_cannot_answer(tmp_path: Path) -> None:
    """``min_answers: 4`` with three members able to answer: one ``502``, each member
    asked once (the SDK's two retries would ask them three times)."""
    with ExitStack() as stack:
        healthy = [_fake() for _ in range(3)]
        broken = _fake(rate=1.0, kinds=["server_error"])
        for server in [*healthy, broken]:
            stack.callback(server.stop)
        policy = tmp_path / "policy.yaml"
        section = _panel([*healthy, broken], min_answers=4, deadline_s=3)
        policy.write_text(
            json.dumps({"reading": {"similarity": "tfidf"}, "panel": section}), encoding="utf-8"
        )
        settings = ServeSettings(
            journal=str(tmp_path / "journal.sqlite"),
            policy=str(policy),
            tokens=str(write_tokens(tmp_path / "tokens.txt")),
        )
        base = stack.enter_context(live_server(lambda: create_app(settings)))
        raw = httpx.post(base + "/v1/chat/completions", json=ASK, headers=SUB, timeout=60)
        assert raw.status_code == 502 and raw.headers["x-should-retry"] == "false"
        assert raw.json()["error"]["code"] == "panel_unavailable"
        asked = [s.requests_received for s in healthy]
        client = openai.OpenAI(base_url=f"{base}/v1", api_key="tok-sub", max_retries=2)
        try:
            with pytest.raises(openai.InternalServerError) as caught:
                client.chat.completions.create(**ASK)
        finally:
            client.close()
        assert caught.value.status_code == 502
        assert [s.requests_received - before for s, before in zip(healthy, asked, strict=True)] == [
            1,
            1,
            1,
        ]
