"""What the chat door makes of its members' answers and of the requests OpenAI clients send.

* An answer the server cut off (``finish_reason`` ``length``, at the completion cap a
  client's ``max_tokens`` lowers) or stopped (``content_filter``) abstains: a truncated
  "125" is not a vote for "12".
* A member whose server asks to be retried after the request's deadline fails at once.
* A structured answer that is not JSON abstains; the member is not asked again.
* An escalation's content says why from what the members gave (a split, or agreement
  the policy did not let commit), ``GET /v1/models`` lists no model without a panel, assistant messages with
  ``content: null`` or a refusal are read, ``stream_options.include_usage`` gets its
  usage chunk, and a panel the service's ``--timeout`` or budget cannot serve is named
  when the server starts.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from contextlib import ExitStack
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from chat_helpers import live_server
from dissensus.llm.base import BackendResponse
from dissensus.llm.fakeserver import FakeServer, FaultPlan, ServerSettings
from dissensus.llm.function import FunctionBackend
from dissensus.llm.openai_backend import OpenAIBackend
from dissensus.llm.scripted import ScriptedRules
from dissensus.panels import ChatCompletion, Members, PanelChat, parse_request
from dissensus.pipeline import Policy
from dissensus.pipeline.policy import policy_from_dict
from dissensus.serve import ServeSettings, create_app
from dissensus.serve.chat import start_warnings
from dissensus.store.journal import Journal
from serve_helpers import write_tokens
from test_serve_chat_shutdown import serve_panel
from test_serve_load import spawn_server, stop_server, wait_ready

ASK = {"model": "m", "messages": [{"role": "user", "content": "How many apples?"}]}
SUB = {"Authorization": "Bearer tok-sub"}
NAMES = ["a", "b", "c"]


def _chat(journal: Journal, backends: dict[str, Any], **panel: Any) -> PanelChat:
    section = {
        "answer": "number",
        "members": [{"name": n, "model": "scripted:x", "family": f"f{n}"} for n in backends],
        **panel,
    }
    policy = policy_from_dict({"reading": {"similarity": "tfidf"}, "panel": section})
    return PanelChat(policy, journal=journal, members=Members(policy.panel, backends))


def _answering(text: str, finish: str = "stop") -> FunctionBackend:
    return FunctionBackend(
        lambda request, mode: BackendResponse(
            text=text, model="f", prompt_tokens=5, completion_tokens=5, finish_reason=finish
        )
    )


def _complete(tmp_path: Path, backends: dict[str, Any], body: Any = None, **panel: Any) -> Any:
    with Journal(str(tmp_path / "j.sqlite")) as journal:
        chat = _chat(journal, backends, **panel)
        try:
            return chat.complete(body or ASK)
        finally:
            chat.close()


def test_answers_cut_off_at_the_cap_or_filtered_abstain(tmp_path: Path) -> None:
    done = _complete(
        tmp_path,
        {
            "a": _answering("The answer is 12", "length"),
            "b": _answering("The answer is 12", "content_filter"),
            "c": _answering("The answer is 12", "length"),
        },
    )
    reports = {m.name: m for m in done.dissensus.members}
    assert {m.status for m in reports.values()} == {"abstained"}
    assert all(m.decision is None for m in reports.values())
    assert "finish_reason 'length'" in (reports["a"].why or "")
    assert "finish_reason 'content_filter'" in (reports["b"].why or "")
    assert done.dissensus.status == "escalated" and done.dissensus.decision is None


class _Refusing(BaseHTTPRequestHandler):
    """An OpenAI-compatible server whose model declines: ``content`` null, a ``refusal``
    that holds a number (which must not be read as a vote)."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        message = {
            "role": "assistant",
            "content": None,
            "refusal": "I can't help with 12 of those.",
        }
        body = json.dumps(
            {
                "id": "x",
                "object": "chat.completion",
                "created": 0,
                "model": "m",
                "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 5, "completion_tokens": 5, "total_tokens": 10},
            }
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.mark.parametrize("answer", ["number", "structured"])
def test_a_refusal_abstains_saying_the_member_refused(tmp_path: Path, answer: str) -> None:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Refusing)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
        refusing = OpenAIBackend("m", base_url=url, api_key="sk-test", timeout_s=5)
        done = _complete(
            tmp_path,
            {"a": refusing, "b": _answering("The answer is 12"), "c": _answering("12")},
            answer=answer,
            **({"options": ["12", "13"]} if answer == "structured" else {}),
        )
    finally:
        httpd.shutdown()
    report = next(m for m in done.dissensus.members if m.name == "a")
    assert (report.status, report.decision) == ("abstained", None)
    assert report.why is not None and "refused" in report.why


def test_a_structured_answer_that_is_not_json_abstains_without_a_second_ask(
    tmp_path: Path,
) -> None:
    """A member asked for a structured answer who replies in prose is asked once, not
    re-asked (a member's answer is what it said once): its answer is an abstention."""
    asked = dict.fromkeys(NAMES, 0)

    def prose(name: str) -> FunctionBackend:
        def reply(request: Any, mode: Any) -> BackendResponse:
            asked[name] += 1
            return BackendResponse(
                text="I think it is 12.", model="f", prompt_tokens=5, completion_tokens=5
            )

        return FunctionBackend(reply)

    done = _complete(
        tmp_path, {n: prose(n) for n in NAMES}, answer="structured", options=["12", "13"]
    )
    assert asked == dict.fromkeys(NAMES, 1)
    assert [(m.status, m.decision) for m in done.dissensus.members] == [("abstained", None)] * 3
    assert done.usage.total_tokens == 30
    assert done.dissensus.decision is None


def test_a_small_max_tokens_of_the_request_gets_abstentions_not_truncated_votes(
    tmp_path: Path,
) -> None:
    """Members on loopback servers that stop at the request's cap, as servers do: "The
    answer is 125." cut to four tokens (16 characters) reads "The answer is 12"."""
    with ExitStack() as stack:
        servers = [FakeServer(ScriptedRules(default="The answer is 125.")).start() for _ in NAMES]
        for server in servers:
            stack.callback(server.stop)
        section = {
            "answer": "number",
            "members": [
                {"name": n, "model": "openai:m", "base_url": s.base_url, "family": f"f{n}"}
                for n, s in zip(NAMES, servers, strict=True)
            ],
        }
        policy = policy_from_dict({"reading": {"similarity": "tfidf"}, "panel": section})
        with Journal(str(tmp_path / "j.sqlite")) as journal:
            chat = PanelChat(policy, journal=journal)
            try:
                done = chat.complete({**ASK, "max_completion_tokens": 4})
            finally:
                chat.close()
    assert [m.status for m in done.dissensus.members] == ["abstained"] * 3
    assert all("finish_reason 'length'" in (m.why or "") for m in done.dissensus.members)
    assert done.dissensus.decision is None


def test_a_retry_after_past_the_deadline_fails_the_member_at_once(tmp_path: Path) -> None:
    limited = FakeServer(
        ScriptedRules(default="The answer is 7."),
        ServerSettings(faults=FaultPlan(rate=1.0, kinds=["rate_limit"], retry_after="100000")),
    ).start()
    try:
        section = {
            "answer": "number",
            "members": [{"name": n, "model": "scripted:x"} for n in ["slow", "a", "b"]],
            "deadline_s": 60,
            "max_retries": 2,
        }
        policy = policy_from_dict({"reading": {"similarity": "tfidf"}, "panel": section})
        backends: dict[str, Any] = {
            "slow": OpenAIBackend("m", base_url=limited.base_url, api_key="unused"),
            "a": _answering("The answer is 7."),
            "b": _answering("The answer is 7."),
        }

        async def main(chat: PanelChat) -> ChatCompletion:
            try:
                # Without the check the member sleeps out the 60 s deadline.
                return await asyncio.wait_for(chat.acomplete(ASK), 30)
            finally:
                await chat.aclose()

        with Journal(str(tmp_path / "j.sqlite")) as journal:
            chat = PanelChat(policy, journal=journal, members=Members(policy.panel, backends))
            done = asyncio.run(main(chat))
    finally:
        limited.stop()
    slow = next(m for m in done.dissensus.members if m.name == "slow")
    assert slow.status == "failed" and slow.attempts == 1
    assert "Retry-After 100000 s" in (slow.why or "") and "deadline" in (slow.why or "")
    assert limited.requests_received == 1


def test_an_escalation_says_why_from_what_the_members_gave(tmp_path: Path) -> None:
    agreed = _complete(tmp_path, {n: _answering("The answer is 7.") for n in NAMES})
    content = agreed.choices[0].message.content or ""
    assert agreed.dissensus.status == "escalated"
    assert "disagreement" not in content and "agreed on '7'" in content, content
    assert agreed.dissensus.case_id in content
    split = _complete(
        tmp_path,
        {n: _answering(f"The answer is {v}.") for n, v in zip(NAMES, ["3", "4", "5"], strict=True)},
    )
    assert "the panel's disagreement went to human review" in (
        split.choices[0].message.content or ""
    )


def test_assistant_messages_without_content_or_with_a_refusal_are_read() -> None:
    request = parse_request(
        {
            "model": "m",
            "messages": [
                {"role": "user", "content": "Look it up."},
                {"role": "assistant", "content": None, "tool_calls": []},
                {"role": "user", "content": "Then say it."},
                {"role": "assistant", "content": [{"type": "refusal", "refusal": "I cannot."}]},
                {"role": "assistant", "content": None, "refusal": "No."},
                {"role": "assistant"},
                {"role": "user", "content": "Please."},
            ],
        }
    )
    texts = [m.text() for m in request.messages]
    assert texts == ["Look it up.", "", "Then say it.", "I cannot.", "No.", "", "Please."]


def test_include_usage_gets_a_usage_chunk_of_its_own(tmp_path: Path) -> None:
    with ExitStack() as stack:
        base, _ = serve_panel(stack, tmp_path)
        got = httpx.post(
            base + "/v1/chat/completions",
            json={**ASK, "stream": True, "stream_options": {"include_usage": True}},
            headers=SUB,
            timeout=60,
        )
        plain = httpx.post(
            base + "/v1/chat/completions", json={**ASK, "stream": True}, headers=SUB, timeout=60
        )
    events = [line[6:] for line in got.text.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["total_tokens"] > 0
    assert chunks[-2]["choices"][0]["finish_reason"] in ("stop", "escalated")
    assert chunks[-2]["usage"] is None and chunks[-2]["dissensus"] is not None
    assert all(c["usage"] is None for c in chunks[:-1])
    # Without it, the usage rides on the last chunk, as before.
    last = [json.loads(line[6:]) for line in plain.text.splitlines() if line.startswith("data: {")]
    assert last[-1]["choices"] and last[-1]["usage"]["total_tokens"] > 0


def test_models_lists_none_without_a_panel(tmp_path: Path) -> None:
    settings = ServeSettings(
        journal=str(tmp_path / "journal.sqlite"), tokens=str(write_tokens(tmp_path / "t.txt"))
    )
    with live_server(lambda: create_app(settings)) as base:
        listed = httpx.get(base + "/v1/models", headers=SUB, timeout=30)
        one = httpx.get(base + "/v1/models/dissensus-panel", headers=SUB, timeout=30)
    assert listed.status_code == 200 and listed.json() == {"object": "list", "data": []}
    assert one.status_code == 404 and one.json()["error"]["code"] == "model_not_found"


def test_a_panel_the_service_cannot_serve_is_named_at_start(tmp_path: Path) -> None:
    policy = policy_from_dict(
        {
            "budget": {"max_calls": 2},
            "panel": {
                "answer": "number",
                "deadline_s": 30,
                "members": [{"name": n, "model": "scripted:x"} for n in NAMES],
            },
        }
    )
    with Journal(":memory:") as journal:
        chat = PanelChat(policy, journal=journal, members=Members(policy.panel, {}))
        lines = start_warnings(chat, 10.0)
        none = start_warnings(chat, None)
        empty = start_warnings(PanelChat(Policy(), journal=journal), 1.0)
    assert len(lines) == 2
    assert "--timeout 10 s is shorter than panel.deadline_s 30 s" in lines[0]
    assert "budget.max_calls 2 is below the panel's 3 members" in lines[1]
    assert len(none) == 1 and empty == []


@pytest.fixture
def member() -> Iterator[FakeServer]:
    server = FakeServer(ScriptedRules(default="The answer is 7.")).start()
    yield server
    server.stop()


@pytest.mark.slow
def test_dissensus_serve_warns_of_such_a_panel_on_stderr(
    tmp_path: Path, member: FakeServer
) -> None:
    panel = {
        "answer": "number",
        "members": [
            {"name": n, "model": "openai:m", "base_url": member.base_url} for n in ["a", "b"]
        ],
    }
    proc, base = spawn_server(
        tmp_path,
        str(tmp_path / "journal.sqlite"),
        policy={"budget": {"max_calls": 1}, "panel": panel},
    )
    try:
        wait_ready(tmp_path, proc, base)
    finally:
        stop_server(proc)
    log = (tmp_path / "server.log").read_text(encoding="utf-8")
    assert "warning: budget.max_calls 1 is below the panel's 2 members" in log, log
    assert "Traceback" not in log
