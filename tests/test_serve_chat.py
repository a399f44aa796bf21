"""``POST /v1/chat/completions`` with the official ``openai`` SDK as the client.

A panel of four ``replay:`` members (synthetic arithmetic answers, :mod:`chat_helpers`)
and a learned acceptance file calibrated on the same panels: the door commits some
answers and escalates others, a reviewer resolves an escalation, the client polls it,
and every request's run verifies with ``dissensus runs verify``. Also: streaming, the
library call, OpenAI-shaped errors, and equality with ``decide()`` on the panel the door
journalled.
"""

from __future__ import annotations

import asyncio
import html
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from chat_helpers import (
    MEMBERS,
    answers,
    fanned_panels,
    items,
    write_acceptance,
    write_members,
    write_policy,
)
from cli_helpers import cli
from dissensus.panels import Members, PanelChat
from dissensus.pipeline import decide, load_policy
from dissensus.pipeline.durable import case_step
from dissensus.pipeline.policy import PanelSettings, policy_from_dict
from dissensus.pipeline.steps import CaseInput
from dissensus.serve import ServeSettings, create_app
from dissensus.store.journal import Journal
from serve_helpers import auth, client_for, login, write_tokens

pytest.importorskip("sklearn")
openai = pytest.importorskip("openai")

ITEMS = items(90)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("chat")
    write_policy(root)
    policy, _ = load_policy(root / "policy.yaml")
    write_members(root, ITEMS, policy.panel)
    panels = fanned_panels(root, ITEMS, policy.panel)
    write_acceptance(root, panels, [it.gold for it in ITEMS])
    write_tokens(root / "tokens.txt")
    return root


@pytest.fixture(scope="module")
def server(world: Path) -> Iterator[str]:
    from chat_helpers import live_server

    settings = ServeSettings(
        journal=str(world / "journal.sqlite"),
        policy=str(world / "policy.yaml"),
        tokens=str(world / "tokens.txt"),
    )
    with live_server(lambda: create_app(settings)) as url:
        yield url


def _sdk(url: str, token: str = "sub") -> Any:
    return openai.OpenAI(base_url=f"{url}/v1", api_key=f"tok-{token}", max_retries=0)


def _ask(client: Any, question: str, **extra: Any) -> Any:
    return client.chat.completions.create(
        model="dissensus-panel", messages=[{"role": "user", "content": question}], **extra
    )


@pytest.fixture(scope="module")
def asked(server: str) -> list[tuple[int, Any]]:
    client = _sdk(server)
    try:
        return [(i, _ask(client, ITEMS[i].question)) for i in range(12)]
    finally:
        client.close()


def test_sdk_gets_committed_answers(asked: list[tuple[int, Any]]) -> None:
    committed = [(i, c) for i, c in asked if c.choices[0].finish_reason == "stop"]
    assert committed, "no request was committed"
    for i, completion in committed:
        ext = completion.model_extra["dissensus"]
        assert ext["status"] == "committed"
        assert ext["action"] in ("auto", "auto_explain", "concord")
        assert ext["basis"] == "learned" and ext["acceptance"] is not None
        member = ext["answered_by"]
        assert member in MEMBERS
        # The content is the full text of a member that gave the committed decision.
        assert completion.choices[0].message.content == answers(ITEMS[i])[member]
        by_name = {m["name"]: m for m in ext["members"]}
        assert by_name[member]["decision"] == ext["decision"]
        assert completion.id == f"chatcmpl-{ext['run_id']}"
        assert completion.usage.total_tokens > 0


def test_a_committed_answer_sent_again_with_its_key_is_replayed(
    server: str, asked: list[tuple[int, Any]]
) -> None:
    i = next(i for i, c in asked if c.choices[0].finish_reason == "stop")
    client = _sdk(server)
    try:
        key = {"Idempotency-Key": f"committed-{i}"}
        first = _ask(client, ITEMS[i].question, extra_headers=key)
        again = client.chat.completions.with_raw_response.create(
            model="dissensus-panel",
            messages=[{"role": "user", "content": ITEMS[i].question}],
            extra_headers=key,
        )
    finally:
        client.close()
    replayed = again.parse()
    assert again.headers["Idempotent-Replayed"] == "true"
    assert first.choices[0].finish_reason == replayed.choices[0].finish_reason == "stop"
    assert replayed.choices[0].message.content == first.choices[0].message.content
    ours, theirs = first.model_extra["dissensus"], replayed.model_extra["dissensus"]
    assert (theirs["case_id"], theirs["decision"]) == (ours["case_id"], ours["decision"])
    assert theirs["answered_by"] == ours["answered_by"]
    assert theirs["replayed"] is True and ours["replayed"] is False


def test_sdk_recognises_escalations_and_polls_the_resolution(
    server: str, asked: list[tuple[int, Any]]
) -> None:
    escalated = [c for _, c in asked if c.choices[0].finish_reason == "escalated"]
    assert escalated, "no request was escalated"
    ext = escalated[0].model_extra["dissensus"]
    assert ext["status"] == "escalated" and ext["decision"] is None
    assert ext["review_id"] == ext["case_id"]
    assert ext["links"]["review"] == f"/review/case/{ext['review_id']}"
    assert ext["case_id"] in escalated[0].choices[0].message.content
    with httpx.Client(base_url=server) as http:
        polled = http.get(ext["links"]["case"], headers=auth("sub")).json()
        assert polled["status"] == "escalated" and polled["answer"] is None
        item = http.get(f"/v1/review/{ext['review_id']}", headers=auth("rev")).json()
        choice = item["item"]["options"][0]
        done = http.post(
            f"/v1/review/{ext['review_id']}/resolve",
            headers=auth("rev"),
            json={"decision": choice, "note": "checked", "content_sha256": item["content_sha256"]},
        )
        assert done.status_code == 200, done.text
        polled = http.get(ext["links"]["case"], headers=auth("sub")).json()
    assert polled["status"] == "resolved"
    assert polled["decision"] == choice
    assert polled["record"]["resolution"]["reviewer"] == "rev-name"
    # The answer is the text of a member that gave the human's decision.
    assert polled["answer"] and polled["answered_by"] in MEMBERS


def test_every_run_verifies(world: Path, asked: list[tuple[int, Any]]) -> None:
    for _, completion in asked:
        run_id = completion.model_extra["dissensus"]["run_id"]
        result = cli("runs", "verify", run_id, "--journal", str(world / "journal.sqlite"))
        assert result.code == 0, result.out


def test_the_door_decides_as_decide_does(world: Path, asked: list[tuple[int, Any]]) -> None:
    """The panel the door journalled, decided by ``decide()``, gives the same record fields."""
    policy, policy_dir = load_policy(world / "policy.yaml")
    with Journal(str(world / "journal.sqlite")) as journal:
        for _, completion in asked[:6]:
            run_id = completion.model_extra["dissensus"]["run_id"]
            entered = case_step(journal, run_id, 1, "input")
            assert entered is not None
            panel = CaseInput.model_validate(entered).panel
            again = decide(panel, policy, policy_dir=policy_dir)
            ext = completion.model_extra["dissensus"]
            assert (again.action, again.basis, again.state, again.route) == (
                ext["action"],
                ext["basis"],
                ext["state"],
                ext["route"],
            )
            if ext["status"] == "committed":
                assert again.decision == ext["decision"]


def test_stream_has_openai_chunks_and_the_extension(server: str) -> None:
    client = _sdk(server)
    try:
        chunks = list(_ask(client, ITEMS[0].question, stream=True))
        whole = _ask(client, ITEMS[0].question)
    finally:
        client.close()
    text = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert text == whole.choices[0].message.content
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[-1].choices[0].finish_reason == whole.choices[0].finish_reason
    last = chunks[-1].model_extra["dissensus"]
    assert last["decision"] == whole.model_extra["dissensus"]["decision"]
    assert last["status"] == whole.model_extra["dissensus"]["status"]


def test_library_call_answers_like_the_endpoint(
    world: Path, asked: list[tuple[int, Any]], tmp_path: Path
) -> None:
    with Journal(str(tmp_path / "lib.sqlite")) as journal:
        chat = PanelChat.from_file(world / "policy.yaml", journal=journal)
        try:
            for i, completion in asked[:4]:
                body = {"model": "m", "messages": [{"role": "user", "content": ITEMS[i].question}]}
                mine = chat.complete(body)
                theirs = completion.model_extra["dissensus"]
                assert mine.dissensus.status == theirs["status"]
                assert mine.dissensus.decision == theirs["decision"]
                assert mine.choices[0].message.content == completion.choices[0].message.content
                assert chat.case(mine.dissensus.case_id).status == theirs["status"]
        finally:
            chat.close()


@pytest.mark.parametrize(
    ("body", "status", "param"),
    [
        ({"model": "m", "messages": []}, 400, "messages"),
        ({"model": "m", "messages": [{"role": "user", "content": "x"}], "n": 2}, 400, "n"),
        ({"model": "m", "messages": [{"role": "tool", "content": "x"}]}, 400, "messages.0.role"),
        ({"messages": [{"role": "user", "content": "x"}]}, 400, "model"),
        ([1, 2], 400, None),
    ],
)
def test_bad_requests_get_openai_error_bodies(
    server: str, body: Any, status: int, param: str | None
) -> None:
    with httpx.Client(base_url=server) as http:
        got = http.post("/v1/chat/completions", headers=auth("sub"), json=body)
    assert got.status_code == status
    error = got.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param


@pytest.mark.parametrize(
    ("raw", "param"),
    [
        (b"{", "<json>"),
        (b"", "<body>"),
        (b"\xff\xfe{}", "<encoding>"),
        (b"[" * 70 + b"]" * 70, "<depth>"),
        (b'{"n": NaN}', "<json>"),
    ],
)
def test_a_body_that_is_no_json_names_why_in_param(server: str, raw: bytes, param: str) -> None:
    """``param`` and ``code`` were null for these, where serve.md says ``param`` is the
    service's ``field`` and a 400's ``code`` is ``invalid_request``."""
    with httpx.Client(base_url=server) as http:
        got = http.post(
            "/v1/chat/completions",
            headers={**auth("sub"), "content-type": "application/json"},
            content=raw,
        )
    assert got.status_code == 400, got.text
    error = got.json()["error"]
    assert (error["param"], error["code"]) == (param, "invalid_request"), error


def test_sdk_raises_its_own_errors(server: str) -> None:
    with pytest.raises(openai.AuthenticationError) as unknown:
        _ask(_sdk(server, "nobody"), "x")
    with pytest.raises(openai.PermissionDeniedError) as denied:
        _ask(_sdk(server, "rev"), "x")
    # ``param`` names the header, as the service's own body names the field (it was null).
    assert (unknown.value.param, unknown.value.code) == ("Authorization", "invalid_api_key")
    assert (denied.value.param, denied.value.code) == ("Authorization", "forbidden")
    with httpx.Client(base_url=server) as http:
        case = http.get("/v1/cases/nothing.1", headers=auth("rev")).json()["error"]
    assert (case["type"], case["param"], case["code"]) == (
        "permission_error",
        "Authorization",
        "forbidden",
    )
    with pytest.raises(openai.BadRequestError):
        _sdk(server).chat.completions.create(
            model="m", messages=[{"role": "user", "content": "x"}], n=3
        )
    with pytest.raises(openai.NotFoundError):
        _sdk(server).with_options(max_retries=0).get("/cases/nothing.1", cast_to=httpx.Response)


def test_request_size_limit(world: Path, tmp_path: Path) -> None:
    data = {"panel": {**json.loads(json.dumps(_panel(world))), "max_request_chars": 10}}
    policy = policy_from_dict(data)
    with Journal(str(tmp_path / "j.sqlite")) as journal:
        chat = PanelChat(policy, journal=journal, policy_dir=world)
        from dissensus.panels import ChatError

        with pytest.raises(ChatError) as caught:
            chat.complete({"model": "m", "messages": [{"role": "user", "content": "x" * 11}]})
        chat.close()
    assert caught.value.status == 413 and caught.value.code == "request_too_large"


def test_no_panel_configured_is_a_404(tmp_path: Path) -> None:
    from dissensus.pipeline import Policy

    with Journal(str(tmp_path / "j.sqlite")) as journal:
        chat = PanelChat(Policy(), journal=journal)
        from dissensus.panels import ChatError

        with pytest.raises(ChatError) as caught:
            chat.complete({"model": "m", "messages": [{"role": "user", "content": "x"}]})
        chat.close()
    assert caught.value.status == 404


def _panel(world: Path) -> dict[str, Any]:
    policy, _ = load_policy(world / "policy.yaml")
    return policy.panel.model_dump(mode="json")


@pytest.mark.parametrize(
    ("section", "field"),
    [
        ({"members": [{"name": "a", "model": "scripted:x"}]}, "panel"),
        (
            {
                "members": [
                    {"name": "a", "model": "scripted:x"},
                    {"name": "a", "model": "scripted:y"},
                ]
            },
            "panel",
        ),
        ({"answer": "regex"}, "panel"),
        ({"options": ["yes", "YES"]}, "panel.options"),
        ({"members": [{"name": "bad name", "model": "scripted:x"}] * 2}, "panel.members.0.name"),
        ({"deadline_s": 0}, "panel.deadline_s"),
        (
            {"members": [{"name": "a", "model": "scripted:x", "base_url": "http://h/v1"}] * 2},
            "panel.members.0",
        ),
    ],
)
def test_bad_panel_sections_name_the_field(section: dict[str, Any], field: str) -> None:
    from dissensus.errors import ConfigError

    with pytest.raises(ConfigError) as caught:
        policy_from_dict({"panel": section}, file="p.yaml")
    assert caught.value.field == field


def test_panel_settings_default_is_off() -> None:
    assert PanelSettings().members == []


def test_message_shapes_of_the_sdk_are_read() -> None:
    """Text parts are joined, ``developer`` is a system message, other parts are refused."""
    from dissensus.panels import ChatError, parse_request

    request = parse_request(
        {
            "model": "m",
            "messages": [
                {"role": "developer", "content": "Answer with a number."},
                {
                    "role": "user",
                    "content": [{"type": "text", "text": "2 +"}, {"type": "text", "text": "2?"}],
                },
            ],
            "stream_options": {"include_usage": True},
            "top_p": 0.5,
        }
    )
    assert [m.text() for m in request.messages] == ["Answer with a number.", "2 +\n2?"]
    with pytest.raises(ChatError) as caught:
        parse_request(
            {
                "model": "m",
                "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}],
            }
        )
    assert caught.value.status == 400 and caught.value.param == "messages.0.content"
    assert "only text content parts" in caught.value.message


_ONE = [{"role": "user", "content": "x"}]


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        # What a panel cannot honour is refused, never ignored into another shape of answer.
        ({"functions": [{"name": "f", "parameters": {}}]}, "functions"),
        ({"function_call": {"name": "f"}}, "function_call"),
        ({"tool_choice": "required"}, "tool_choice"),
        ({"response_format": {"type": "json_object"}}, "response_format"),
        # The fields read are strict: a string is not read as a number.
        ({"n": "1"}, "n"),
        ({"max_tokens": "5"}, "max_tokens"),
        ({"temperature": "0.5"}, "temperature"),
        ({"seed": "1"}, "seed"),
        ({"seed": 10**40}, "seed"),
        ({"max_completion_tokens": True}, "max_completion_tokens"),
    ],
)
def test_fields_a_panel_cannot_honour_or_read_loosely_are_refused(
    extra: dict[str, Any], param: str
) -> None:
    from dissensus.panels import ChatError, parse_request

    with pytest.raises(ChatError) as caught:
        parse_request({"model": "m", "messages": _ONE, **extra})
    assert caught.value.status == 400 and caught.value.param == param


def test_what_sdks_send_by_default_is_still_read() -> None:
    from dissensus.panels import parse_request

    request = parse_request(
        {
            "model": "m",
            "messages": _ONE,
            "temperature": 0,
            "seed": -(2**63),
            "tool_choice": "none",
            "function_call": "auto",
            "functions": [],
            "response_format": {"type": "text"},
        }
    )
    assert request.temperature == 0 and request.seed == -(2**63)


def test_the_policys_options_and_the_question_let_the_follow_up_re_ask(tmp_path: Path) -> None:
    def script(name: str, decision: str) -> str:
        body = {"default": json.dumps({"decision": decision, "reasoning": f"It is {decision}."})}
        (tmp_path / name).write_text(json.dumps(body), encoding="utf-8")
        return f"scripted:{name}"

    members = [
        {"name": n, "model": script(f"{n}.yaml", d), "family": f"f{n}"}
        for n, d in (("a", "Paris"), ("b", "Lyon"), ("c", "Paris"))
    ]
    reask = {"default": json.dumps({"decision": "Paris", "reasoning": "Paris."})}
    (tmp_path / "reask.yaml").write_text(json.dumps(reask), encoding="utf-8")
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        json.dumps(
            {
                "reading": {"similarity": "tfidf"},
                "routing": {"defaults": {"DD": "seek_context", "CD": "seek_context"}},
                "seek_context": {"model": "scripted:reask.yaml"},
                "panel": {"answer": "structured", "options": ["Paris", "Lyon"], "members": members},
            }
        ),
        encoding="utf-8",
    )
    question = "What is the capital of France?"
    body = {"model": "m", "messages": [{"role": "system", "content": "Be brief."}]}
    body["messages"].append({"role": "user", "content": question})
    with Journal(str(tmp_path / "j.sqlite")) as journal:
        chat = PanelChat.from_file(policy, journal=journal)
        try:
            done = chat.complete(body)
        finally:
            chat.close()
        entered = case_step(journal, done.dissensus.run_id, 1, "input")
    assert "no explicit options" not in done.dissensus.reason
    assert "live re-ask" in done.dissensus.reason, done.dissensus.reason
    meta = CaseInput.model_validate(entered).panel.meta
    assert meta["question"] == question and meta["options"] == ["Paris", "Lyon"]
    assert [m["role"] for m in meta["messages"]] == ["system", "user"]


def test_the_policys_budget_bounds_the_members_and_the_follow_up(tmp_path: Path) -> None:
    members = []
    for n in "abc":
        reply = {"default": json.dumps({"decision": "Paris", "reasoning": f"{n}: Paris."})}
        (tmp_path / f"{n}.yaml").write_text(json.dumps(reply), encoding="utf-8")
        members.append({"name": n, "model": f"scripted:{n}.yaml", "family": f"f{n}"})
    policy = policy_from_dict(
        {
            "reading": {"similarity": "tfidf"},
            "budget": {"max_calls": 2},
            "panel": {"answer": "structured", "members": members},
        }
    )
    body = {"model": "m", "messages": [{"role": "user", "content": "Capital of France?"}]}
    with Journal(str(tmp_path / "j.sqlite")) as journal:
        chat = PanelChat(policy, journal=journal, policy_dir=tmp_path)
        try:
            done = chat.complete(body)
        finally:
            chat.close()
        started = journal.get(done.dissensus.run_id, "run/started")
    reports = {m.name: m for m in done.dissensus.members}
    assert sorted(m.status for m in reports.values()) == ["answered", "answered", "failed"]
    failed = next(m for m in reports.values() if m.status == "failed")
    assert "call budget exhausted" in (failed.why or "")
    assert done.usage is not None
    assert started is not None  # the decision's follow-ups get what the members left
    assert started.payload["policy"]["budget"]["max_calls"] == 0


def test_the_sdk_retrieves_the_model_it_lists(server: str) -> None:
    sdk = _sdk(server)
    listed = sdk.models.list().data
    assert [m.id for m in listed] == ["dissensus-panel"]
    assert sdk.models.retrieve("dissensus-panel") == listed[0]
    for unknown in ("gpt-4o", "org/dissensus-panel", "dissensus-panel/x"):
        with pytest.raises(openai.NotFoundError) as caught:
            sdk.models.retrieve(unknown)
        assert caught.value.code == "model_not_found" and caught.value.param == "model"
        assert caught.value.type == "invalid_request_error"
    with pytest.raises(openai.AuthenticationError):
        _sdk(server, "nobody").models.retrieve("dissensus-panel")
    with pytest.raises(openai.PermissionDeniedError):
        _sdk(server, "rev").models.retrieve("dissensus-panel")


class _Member:
    """A member backend answering ``text`` with ``finish`` as its finish reason, or failing."""

    provider = "test"

    def __init__(self, text: str | None, finish: str | None = "stop") -> None:
        self.model_id = "scripted"
        self.text, self.finish = text, finish

    async def send(self, request: Any, *, json_mode: Any) -> Any:
        from dissensus.llm.base import BackendError, BackendResponse

        if self.text is None:
            raise BackendError("broken", kind="client_error", retryable=False)
        return BackendResponse(
            text=self.text,
            model="scripted",
            prompt_tokens=5,
            completion_tokens=5,
            finish_reason=self.finish,
        )

    async def aclose(self) -> None:
        return None


def test_a_cut_off_answer_is_no_agreeing_reasoning(tmp_path: Path) -> None:
    # One real vote, one answer cut off at the cap that echoes it, two broken members:
    # the cut-off text is no reasoning agreeing with the vote, so learned acceptance
    # does not commit a panel of one voice; the reviewer still sees what was said.
    # The acceptance of 120 items (not the module's 90) scored the panel 0.987 when the
    # cut-off text counted as reasoning: more than a unanimous panel of four scores.
    world = tmp_path / "world"
    world.mkdir()
    write_policy(world)
    policy, _ = load_policy(world / "policy.yaml")
    calibration = items(120)
    write_members(world, calibration, policy.panel)
    panels = fanned_panels(world, calibration, policy.panel)
    write_acceptance(world, panels, [it.gold for it in calibration])
    write_tokens(world / "tokens.txt")
    said = "Counting gives seven. The answer is 7."
    cut = "The answer is 7."
    backends = {
        "solver-a": _Member(said),
        "solver-b": _Member(cut, "length"),
        "solver-c": _Member(None),
        "solver-d": _Member(None),
    }
    members = Members(policy.panel, backends)
    question = "Item 5: Tom has 3 apples and buys 4 more. How many apples does he have?"
    body = {"model": "m", "messages": [{"role": "user", "content": question}]}
    journal_path = tmp_path / "j.sqlite"
    with Journal(str(journal_path)) as journal:
        chat = PanelChat(policy, journal=journal, members=members, policy_dir=world)
        try:
            done = chat.complete(body)
        finally:
            chat.close()
        entered = case_step(journal, done.dissensus.run_id, 1, "input")
    assert done.dissensus.status == "escalated", done.dissensus
    reports = {m.name: m for m in done.dissensus.members}
    assert reports["solver-b"].status == "abstained" and "length" in (reports["solver-b"].why or "")
    panel = CaseInput.model_validate(entered).panel
    reasoning = {o.agent: o.reasoning for o in panel.outputs}
    assert reasoning["solver-b"] == "" and reasoning["solver-a"] == said
    assert panel.meta["answers"]["solver-b"] == cut
    review_id = done.dissensus.review_id
    assert review_id is not None
    served = ServeSettings(
        journal=str(journal_path),
        policy=str(world / "policy.yaml"),
        tokens=str(world / "tokens.txt"),
    )

    async def page() -> str:
        async with client_for(served) as client:
            assert (await login(client, "rev")).status_code == 303
            return (await client.get(f"/review/case/{review_id}")).text

    shown = html.unescape(asyncio.run(page()))
    assert cut in shown and "not read as reasoning" in shown
