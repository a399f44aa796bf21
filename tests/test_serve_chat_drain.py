"""The chat door's shutdown when a decision waits on a model follow-up.

Three members split yes / no / yes with the same reasoning (convergent disagreement),
the policy's route for that is ``seek_context`` with a live re-ask by a follow-up model,
and that model's server never answers (or asks to be retried much later). The drain
cuts the follow-up's calls off at the end of its grace, so the pipeline ends the case as
it ends any failed follow-up (journalled, escalated) and the request is answered; a
decision that still does not end is given up on with a ``503`` naming its case, and the
server exits within its graceful time either way. Meanwhile ``GET /v1/cases/{id}``
(``acase``) answers at once that the case is being decided.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from dissensus.llm.fakeserver import FakeServer, FaultPlan, ServerSettings
from dissensus.llm.function import FunctionBackend
from dissensus.llm.scripted import ScriptedRules
from dissensus.panels import ChatError, Members, PanelChat
from dissensus.panels.door import UNFINISHED
from dissensus.pipeline.policy import policy_from_dict
from dissensus.serve.server import SHUTDOWN_ENV
from dissensus.store import open_journal
from dissensus.store.journal import Journal
from test_serve_load import PLAIN, spawn_server, stop_server, wait_ready

VOTES = {"a": "yes", "b": "no", "c": "yes"}
REASON = "The claim holds in every case we checked."
ASK = {"model": "m", "messages": [{"role": "user", "content": "Does the claim hold?"}]}
SUB = {"Authorization": "Bearer tok-sub"}


def _follow_up(kind: str, **plan: Any) -> FakeServer:
    """The follow-up model's server: every request meets fault ``kind``."""
    faults = FaultPlan(rate=1.0, kinds=[kind], **plan)
    return FakeServer(ScriptedRules(default="yes"), ServerSettings(faults=faults)).start()


@pytest.fixture
def hanging() -> Iterator[FakeServer]:
    server = _follow_up("hang", hang_s=300.0)
    yield server
    server.stop()


def _policy() -> dict[str, Any]:
    return {
        "reading": {"similarity": "tfidf"},
        "routing": {"convergent_disagreement_without_values": "seek_context"},
        "seek_context": {"model": "openai:fake-model"},
    }


def _library_chat(journal: Journal) -> PanelChat:
    def answer(name: str) -> Any:
        return lambda request, mode: json.dumps({"decision": VOTES[name], "reasoning": REASON})

    section = {
        "answer": "structured",
        "options": ["yes", "no"],
        "members": [{"name": n, "model": "scripted:x", "family": f"f{n}"} for n in VOTES],
    }
    policy = policy_from_dict({**_policy(), "panel": section})
    members = Members(policy.panel, {n: FunctionBackend(answer(n), model_id=n) for n in VOTES})
    return PanelChat(policy, journal=journal, members=members)


async def _handed_off(chat: PanelChat) -> tuple[asyncio.Future[Any], str]:
    """A request whose decision has been handed over (and is waiting on its follow-up)."""
    handed: list[str] = []
    task = asyncio.ensure_future(chat.acomplete(ASK, on_decide=lambda c, r: handed.append(c)))
    while not handed:
        await asyncio.sleep(0.01)
    return task, handed[0]


def test_a_drain_cuts_off_a_follow_up_that_hangs_and_the_case_escalates(
    tmp_path: Path, hanging: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", hanging.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "unused")

    async def main(chat: PanelChat) -> tuple[Any, str, str]:
        task, case_id = await _handed_off(chat)
        while hanging.requests_received == 0:  # the follow-up's call is in flight
            await asyncio.sleep(0.01)
        polled = await asyncio.wait_for(chat.acase(case_id), 30)  # at once, not waiting
        await chat.adrain(0.2, 5.0)
        done = await asyncio.wait_for(task, 60)  # without the cut: the 300 s hang
        await asyncio.wait_for(chat.aclose(), 60)
        return done, case_id, polled.status

    with Journal(str(tmp_path / "j.sqlite")) as journal:
        done, case_id, polled = asyncio.run(main(_library_chat(journal)))
        ext = done.dissensus
        assert polled == "deciding"
        assert (ext.case_id, ext.status, done.choices[0].finish_reason) == (
            case_id,
            "escalated",
            "escalated",
        )
        assert "re-ask failed" in ext.reason and "cut_off" in ext.reason, ext.reason
        assert case_id in (done.choices[0].message.content or "")
        assert journal.get(ext.run_id, "run/finished") is not None
        assert journal.verify(ext.run_id).ok
        assert ext.review_id is not None
    assert hanging.requests_received == 2  # both presentations, cut off, not retried


def test_a_decision_that_outlasts_the_cut_is_given_up_with_a_503_naming_its_case(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The follow-up's server answers 429 with ``Retry-After: 30``: the decision sleeps
    in the back-off, which no cut reaches. The request ends with the ``503`` naming the
    case (not to be sent again), and ``aclose`` stops the decision instead of waiting."""
    limited = _follow_up("rate_limit", retry_after="30")
    monkeypatch.setenv("OPENAI_BASE_URL", limited.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "unused")

    async def main(chat: PanelChat) -> tuple[ChatError, str]:
        task, case_id = await _handed_off(chat)
        while limited.requests_received == 0:
            await asyncio.sleep(0.01)
        await chat.adrain(0.1, 0.2)
        with pytest.raises(ChatError) as ended:
            await asyncio.wait_for(task, 60)
        await asyncio.wait_for(chat.aclose(), 60)  # without giving up: 30 s and more
        return ended.value, case_id

    try:
        with Journal(str(tmp_path / "j.sqlite")) as journal:
            error, case_id = asyncio.run(main(_library_chat(journal)))
            run_id = case_id.rpartition(".")[0]
            assert journal.get(run_id, "run/finished") is None  # partial, resumable
    finally:
        limited.stop()
    assert (error.status, error.code, error.type) == (503, UNFINISHED, "server_error")
    assert case_id in error.message and "do not send the request again" in error.message
    body = error.body()
    assert body["dissensus"]["case_id"] == case_id
    assert body["dissensus"]["links"]["case"] == f"/v1/cases/{case_id}"


@pytest.mark.slow
def test_sigterm_while_a_follow_up_hangs_answers_the_escalation_and_exits(
    tmp_path: Path, hanging: FakeServer
) -> None:
    """``dissensus serve`` with the members on loopback and the follow-up model hanging:
    SIGTERM once the follow-up is asked. The request is answered (its escalation, in
    OpenAI's shape), the case is journalled, no traceback, and the server exits of
    itself (it waited out every retry of the follow-up before: minutes)."""
    rules = ScriptedRules.model_validate(
        {
            "rules": [
                {"match": {"agent": n}, "json": {"decision": v, "reasoning": REASON}}
                for n, v in VOTES.items()
            ]
        }
    )
    member = FakeServer(rules).start()
    journal = str(tmp_path / "journal.sqlite")
    panel = {
        "answer": "structured",
        "options": ["yes", "no"],
        "members": [
            {"name": n, "model": "openai:m", "base_url": member.base_url, "family": f"f{n}"}
            for n in VOTES
        ],
    }
    proc, base = spawn_server(
        tmp_path,
        journal,
        extra_env={
            SHUTDOWN_ENV: "4",
            "OPENAI_BASE_URL": hanging.base_url,
            "OPENAI_API_KEY": "unused",
        },
        policy={**_policy(), "panel": panel},
    )
    try:
        wait_ready(tmp_path, proc, base)
        got: list[httpx.Response] = []

        def ask() -> None:
            got.append(
                httpx.post(
                    base + "/v1/chat/completions", json=ASK, headers=SUB, timeout=120, **PLAIN
                )
            )

        asking = threading.Thread(target=ask)
        asking.start()
        for _ in range(3000):
            if hanging.requests_received or not asking.is_alive():
                break
            time.sleep(0.01)
        assert hanging.requests_received >= 1
        proc.terminate()
        asking.join(120)
        code = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            stop_server(proc)
        member.stop()
    log = (tmp_path / "server.log").read_text(encoding="utf-8", errors="replace")
    assert "Traceback" not in log and "graceful shutdown exceeded" not in log, log[-3000:]
    assert code == 0, log[-3000:]
    res = got[0]
    assert res.status_code == 200, (res.status_code, res.headers, res.text)
    body = res.json()
    assert body["choices"][0]["finish_reason"] == "escalated"
    case_id, run_id = body["dissensus"]["case_id"], body["dissensus"]["run_id"]
    with open_journal(journal) as store:
        assert store.get(run_id, "run/finished") is not None and store.verify(run_id).ok
    assert case_id.startswith(run_id)
