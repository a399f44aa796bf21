"""``POST /v1/chat/completions`` and ``GET /v1/cases/{id}`` against hostile or odd requests.

Through the whole service (``create_app``, its middleware and lifespan) on an in-process
ASGI client (one per module for the tests that change none of its settings), with
``scripted:`` members whose calls are counted: every refusal is OpenAI's error body with
the documented status, is given before any member is asked, and logs no traceback. Nulls
OpenAI accepts are "not given"; ``stream`` is a boolean.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from dissensus.errors import InputError
from dissensus.io.limits import MAX_FIELD_CHARS, MAX_PANEL_CHARS
from dissensus.panels import ChatError, PanelChat
from dissensus.panels.shapes import MAX_CONTENT_PARTS, MAX_MESSAGES
from dissensus.pipeline.durable import case_step
from dissensus.pipeline.review import split_ref
from dissensus.pipeline.steps import CaseInput
from dissensus.serve import ServeSettings, create_app
from dissensus.store import event_types as ev
from dissensus.store.events import NewEvent
from dissensus.store.journal import Journal
from serve_helpers import auth, write_tokens

pytestmark = pytest.mark.anyio

SHORT = "Seven apples in all. The answer is 7."
WORDY = "Let me count the apples one at a time. " * 60 + "The answer is 7."
"""About 2,400 characters: harmless alone, too much on a panel already near its bound."""


def _script(path: Path, rules: list[dict[str, Any]]) -> str:
    path.write_text(yaml.safe_dump({"rules": rules, "default": SHORT}), encoding="utf-8")
    return f"scripted:{path.name}"


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("hostile")
    plain = _script(root / "plain.yaml", [])
    chatty = _script(
        root / "chatty.yaml",
        [
            # An answer longer than one text field may be (dissensus.io.limits).
            {"match": {"contains": "ANSWER-LONG"}, "response": "x" * 40_000 + " The answer is 7."},
            {"match": {"contains": "ANSWER-WORDY"}, "response": WORDY},
        ],
    )
    policy = {
        "reading": {"similarity": "tfidf"},
        "panel": {
            "answer": "number",
            "max_request_chars": 300_000,
            "max_tokens": 20_000,  # member c's long answers are not cut at the cap
            "members": [
                {"name": "a", "model": plain, "family": "fa"},
                {"name": "b", "model": plain, "family": "fb"},
                {"name": "c", "model": chatty, "family": "fc"},
            ],
        },
    }
    (root / "policy.yaml").write_text(yaml.safe_dump(policy), encoding="utf-8")
    write_tokens(root / "tokens.txt")
    return root


class _Counted:
    """A member backend that counts its calls."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.calls = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def send(self, request: Any, *, json_mode: Any) -> Any:
        self.calls += 1
        return await self.inner.send(request, json_mode=json_mode)

    async def aclose(self) -> None:
        await self.inner.aclose()


class Service:
    """A service and its client; ``calls`` and ``runs()`` count from ``since()`` on."""

    def __init__(self, http: httpx.AsyncClient, app: Any, journal: Path) -> None:
        self.http = http
        self.app = app
        self.journal = journal
        self._calls_before = 0
        self._runs_before = 0

    def since(self) -> Service:
        """The same service, its members' calls and journalled runs counted from now."""
        view = Service(self.http, self.app, self.journal)
        view._calls_before, view._runs_before = self._all_calls(), self._all_runs()
        return view

    def _all_calls(self) -> int:
        return sum(b.calls for b in self.app.state.chat.members.backends.values())

    def _all_runs(self) -> int:
        with Journal(str(self.journal)) as journal:
            return len(journal.runs())

    @property
    def calls(self) -> int:
        return self._all_calls() - self._calls_before

    def runs(self) -> int:
        return self._all_runs() - self._runs_before

    async def post(self, body: Any, **kwargs: Any) -> httpx.Response:
        content = body if isinstance(body, str | bytes) else json.dumps(body)
        headers = {**auth("sub"), "Content-Type": "application/json"}
        return await self.http.post(
            "/v1/chat/completions", content=content, headers=headers, **kwargs
        )


@asynccontextmanager
async def service(world: Path, tmp: Path, **settings: Any) -> AsyncIterator[Service]:
    journal = tmp / "journal.sqlite"
    config = ServeSettings(
        journal=str(journal),
        policy=str(world / "policy.yaml"),
        tokens=str(world / "tokens.txt"),
        **settings,
    )
    app = create_app(config)
    members = app.state.chat.members
    members.backends = {name: _Counted(b) for name, b in members.backends.items()}
    transport = httpx.ASGITransport(app=app)
    client = httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1")
    async with app.router.lifespan_context(app), client as http:
        yield Service(http, app, journal)


@pytest.fixture(scope="module")
async def shared(world: Path, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Service]:
    """One service of the default settings for the module's tests that change neither
    its settings nor anything but its journal (each counts its own calls and runs)."""
    async with service(world, tmp_path_factory.mktemp("shared")) as svc:
        yield svc


@pytest.fixture
def svc(shared: Service) -> Service:
    return shared.since()


@pytest.fixture
def quiet(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    """Fails the test if anything logged an error (a traceback)."""
    caplog.set_level(logging.WARNING)
    yield caplog
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert not errors, [r.getMessage() for r in errors]


def _openai_error(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"}
    error = body["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert isinstance(error["message"], str) and error["message"]
    return error  # type: ignore[no-any-return]


def _ask(
    content: str = "Tom has 3 apples and buys 4 more. How many?", **extra: Any
) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": content}], **extra}


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


# -- 1, 2: the JSON body ---------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        _nested(10_000),
        json.dumps(_ask())[:-1] + ', "extra": ' + _nested(10_000) + "}",
        json.dumps(_ask())[:-1] + ', "extra": ' + _nested(200) + "}",
        '{"model": "m", "extra": ' + '{"a": ' * 5_000 + "1" + "}" * 5_000 + "}",
    ],
    ids=["top-level", "in-an-extra-field", "deeper-than-64", "objects"],
)
async def test_deeply_nested_json_is_a_400(
    svc: Service, quiet: pytest.LogCaptureFixture, body: str
) -> None:
    got = await svc.post(body)
    error = _openai_error(got, 400)
    assert error["type"] == "invalid_request_error"
    assert "nested deeper than 64" in error["message"]
    assert svc.calls == 0


async def test_json_nested_within_the_bound_is_read(
    svc: Service, quiet: pytest.LogCaptureFixture
) -> None:
    body = json.dumps(_ask())[:-1] + ', "extra": ' + _nested(60) + "}"
    got = await svc.post(body)
    assert got.status_code == 200, got.text


@pytest.mark.parametrize("field", ["seed", "extra", "max_tokens"])
async def test_an_integer_of_too_many_digits_is_a_400(
    svc: Service, quiet: pytest.LogCaptureFixture, field: str
) -> None:
    body = json.dumps(_ask())[:-1] + f', "{field}": 1' + "0" * 4_400 + "}"
    got = await svc.post(body)
    error = _openai_error(got, 400)
    assert "integer of more than 4300 digits" in error["message"]
    assert svc.calls == 0


# -- 3: a chunked body over --max-body-bytes -----------------------------------------


async def test_a_chunked_body_over_the_limit_is_a_413(
    world: Path, tmp_path: Path, quiet: pytest.LogCaptureFixture
) -> None:
    body = json.dumps(_ask("x" * 20_000)).encode()

    async def chunks() -> AsyncIterator[bytes]:
        for start in range(0, len(body), 1_000):
            yield body[start : start + 1_000]

    async with service(world, tmp_path, max_body_bytes=4_096) as svc:
        headers = {**auth("sub"), "Content-Type": "application/json"}
        got = await svc.http.post("/v1/chat/completions", content=chunks(), headers=headers)
        assert "content-length" not in {k.lower() for k in got.request.headers}
        assert got.status_code == 413, got.text
        assert svc.calls == 0 and svc.runs() == 0


# -- 4: the pipeline's own bounds ----------------------------------------------------


@pytest.mark.parametrize(
    "messages",
    [
        [{"role": "user", "content": "x" * (MAX_FIELD_CHARS + 1)}],
        [{"role": "system", "content": "Count."}, {"role": "user", "content": "y" * 40_000}],
        [{"role": "user", "content": [{"type": "text", "text": "z" * 20_000}] * 2}],
        [{"role": "user", "content": "1" * 200}] * 1_400,
        [{"role": "user", "content": "w" * 30_000}] * 9,
    ],
    ids=["one-field", "second-message", "joined-parts", "many-messages", "whole-record"],
)
async def test_messages_over_the_pipelines_bounds_are_a_413_before_any_member(
    svc: Service, quiet: pytest.LogCaptureFixture, messages: list[Any]
) -> None:
    got = await svc.post({"model": "m", "messages": messages})
    error = _openai_error(got, 413)
    assert (error["type"], error["code"], error["param"]) == (
        "invalid_request_error",
        "request_too_large",
        "messages",
    )
    assert str(MAX_FIELD_CHARS) in error["message"] or str(MAX_PANEL_CHARS) in error["message"]
    assert svc.calls == 0 and svc.runs() == 0


async def test_more_messages_than_the_limit_is_a_400_before_any_member(
    svc: Service, quiet: pytest.LogCaptureFixture
) -> None:
    """Empty messages hold no text, so the character bounds alone let 65,000 through."""
    messages = [{"role": "user", "content": ""}] * (MAX_MESSAGES + 1)
    got = await svc.post({"model": "m", "messages": messages})
    error = _openai_error(got, 400)
    assert error["param"] == "messages" and str(MAX_MESSAGES) in error["message"]
    assert svc.calls == 0 and svc.runs() == 0


async def test_more_content_parts_than_the_limit_is_a_400_before_any_is_validated(
    svc: Service, quiet: pytest.LogCaptureFixture
) -> None:
    """Content parts were unbounded but by the body's size: 250,000 one-letter parts
    were validated (0.8 s holding the interpreter) before the character bound refused
    them. More than ``MAX_CONTENT_PARTS`` in all, over a message or several, is a 400."""
    part = {"type": "text", "text": "a"}
    one = [{"role": "user", "content": [part] * (MAX_CONTENT_PARTS + 1)}]
    spread = [{"role": "user", "content": [part] * 8}] * (MAX_CONTENT_PARTS // 8 + 1)
    for messages in (one, spread):
        got = await svc.post({"model": "m", "messages": messages})
        error = _openai_error(got, 400)
        assert error["param"] == "messages" and str(MAX_CONTENT_PARTS) in error["message"]
    fine = [{"role": "user", "content": [part] * MAX_CONTENT_PARTS}]
    assert (await svc.post({"model": "m", "messages": fine})).status_code == 200
    assert svc.calls == 3 and svc.runs() == 1


async def test_a_message_of_exactly_the_field_bound_is_decided(
    svc: Service, quiet: pytest.LogCaptureFixture
) -> None:
    got = await svc.post(_ask("q" * MAX_FIELD_CHARS))
    assert got.status_code == 200, got.text
    assert svc.calls == 3


async def test_a_member_answer_over_the_field_bound_is_a_failed_member(
    world: Path, tmp_path: Path, quiet: pytest.LogCaptureFixture
) -> None:
    async with service(world, tmp_path) as svc:
        got = await svc.post(_ask("ANSWER-LONG: Tom has 3 apples and buys 4 more."))
        assert got.status_code == 200, got.text
        ext = got.json()["dissensus"]
        by_name = {m["name"]: m for m in ext["members"]}
        assert by_name["a"]["status"] == by_name["b"]["status"] == "answered"
        assert by_name["c"]["status"] == "failed" and by_name["c"]["decision"] is None
        assert f"at most {MAX_FIELD_CHARS} per field" in by_name["c"]["why"]
        assert svc.calls == 3
        # The journalled panel says so too, without the text it could not hold.
        case = await svc.http.get(ext["links"]["case"], headers=auth("sub"))
        assert case.status_code == 200, case.text
    with Journal(str(tmp_path / "journal.sqlite")) as journal:
        entered = case_step(journal, ext["run_id"], 1, "input")
        assert entered is not None
        panel = CaseInput.model_validate(entered).panel
    reports = {m["name"]: m for m in panel.meta["members"]}
    assert reports["c"]["status"] == "failed" and "per field" in reports["c"]["why"]
    assert panel.meta["answers"]["c"] == ""
    assert [o.decision for o in panel.outputs] == ["7", "7", None]


async def test_a_panel_over_the_record_bound_after_the_answers_is_a_502(
    svc: Service, quiet: pytest.LogCaptureFixture
) -> None:
    # The request alone is within every bound (its last user message again as
    # meta.question); with member c's long answer (twice in the panel: its text and its
    # reasoning) the panel is over the record's bound.
    text = "ANSWER-WORDY " + "v" * 28_900
    last = "ANSWER-WORDY: how many?"
    messages = [{"role": "user", "content": text}] * 9 + [{"role": "user", "content": last}]
    own = 9 * (len(text) + 4) + 2 * len(last) + 4
    assert own < MAX_PANEL_CHARS < own + 2 * len(WORDY)
    got = await svc.post({"model": "m", "messages": messages})
    error = _openai_error(got, 502)
    assert (error["type"], error["code"]) == ("server_error", "panel_too_large")
    assert f"at most {MAX_PANEL_CHARS} per record" in error["message"]
    assert svc.calls == 3 and svc.runs() == 0


# -- 5: case ids ---------------------------------------------------------------------


async def test_case_ids_take_only_ascii_line_numbers(
    world: Path, tmp_path: Path, quiet: pytest.LogCaptureFixture
) -> None:
    async with service(world, tmp_path) as svc:
        done = await svc.post(_ask())
        assert done.status_code == 200, done.text
        run_id = done.json()["dissensus"]["run_id"]
        good = await svc.http.get(f"/v1/cases/{run_id}.1", headers=auth("sub"))
        assert good.status_code == 200, good.text
        for line in ["9" * 4_301, "\u00b9", "\u0661", "01", "+1", " 1", "1_0", "", "-1"]:
            got = await svc.http.get(f"/v1/cases/{run_id}.{line}", headers=auth("sub"))
            error = _openai_error(got, 404)
            assert (error["type"], error["code"]) == ("invalid_request_error", "unknown_case")
        for path in ["%ED%A0%80.1", "%00.1", "x" * 4_000 + ".1", f"{run_id}.1.1"]:
            got = await svc.http.get(f"/v1/cases/{path}", headers=auth("sub"))
            error = _openai_error(got, 404)
            assert error["code"] == "unknown_case"
    with Journal(str(tmp_path / "journal.sqlite")) as journal:
        chat = PanelChat.from_file(world / "policy.yaml", journal=journal)
        try:
            for case_id in ["\ud800.1", f"{run_id}.\u0661", f"{run_id}.01"]:
                with pytest.raises(ChatError) as caught:
                    await chat.acase(case_id)
                assert caught.value.status == 404
            assert (await chat.acase(f"{run_id}.1")).run_id == run_id
        finally:
            await chat.aclose()


@pytest.mark.parametrize("digits", [10, 18])
async def test_a_case_id_is_read_as_every_door_reads_a_case_reference(
    world: Path, tmp_path: Path, quiet: pytest.LogCaptureFixture, digits: int
) -> None:
    # The chat door reads ``<run>.<line>`` with ``split_ref``, as the review doors do: a
    # line of up to 18 digits names a case (a parser of its own, stopping at 9 digits,
    # called a case the journal holds at line 1234567890 unknown at this door alone).
    line = int("1234567890" * 2) % 10**digits
    async with service(world, tmp_path) as svc:
        done = await svc.post(_ask())
        assert done.status_code == 200, done.text
        run_id = done.json()["dissensus"]["run_id"]
    far = "far"
    with Journal(str(tmp_path / "journal.sqlite")) as journal:
        entered = case_step(journal, run_id, 1, "input")
        record = next(iter(journal.events(run_id, type=ev.CASE_RECORD)))
        assert entered is not None
        journal.create_run(far, kind="decide", meta={})
        journal.append_batch(
            far,
            [
                NewEvent(ev.CASE_INPUT, entered, f"case/{line}/input", str(line)),
                NewEvent(
                    ev.CASE_RECORD,
                    {**record.payload, "line": line, "review_id": None},
                    f"case/{line}/record",
                    str(line),
                ),
            ],
        )
    case_id = f"{far}.{line}"
    assert split_ref(case_id, "case reference") == (far, line)
    async with service(world, tmp_path) as svc:
        got = await svc.http.get(f"/v1/cases/{case_id}", headers=auth("sub"))
        assert got.status_code == 200, got.text
        assert (got.json()["run_id"], got.json()["case_id"]) == (far, case_id)
        for beyond in [f"{far}.{'1' * 19}", f"{far}.0{line}"]:
            with pytest.raises(InputError):
                split_ref(beyond, "case reference")
            got = await svc.http.get(f"/v1/cases/{beyond}", headers=auth("sub"))
            assert _openai_error(got, 404)["code"] == "unknown_case"
    with Journal(str(tmp_path / "journal.sqlite")) as journal:
        chat = PanelChat.from_file(world / "policy.yaml", journal=journal)
        try:
            status, first = await chat.acase(case_id), await chat.acase(f"{run_id}.1")
            assert (status.run_id, status.case_id) == (far, case_id)
            assert (status.status, status.decision) == (first.status, first.decision)
            assert status.record is not None and status.record.line == line
        finally:
            await chat.aclose()


# -- 6, 7: stream, and the nulls OpenAI accepts --------------------------------------


@pytest.mark.parametrize("value", ["true", 1, "yes", 0, "false", [], {}])
async def test_stream_must_be_a_boolean(
    svc: Service, quiet: pytest.LogCaptureFixture, value: Any
) -> None:
    got = await svc.post(_ask(stream=value))
    error = _openai_error(got, 400)
    assert (error["type"], error["param"]) == ("invalid_request_error", "stream")
    assert svc.calls == 0


@pytest.mark.parametrize(("value", "streamed"), [(True, True), (False, False), (None, False)])
async def test_stream_follows_the_validated_request(
    svc: Service, quiet: pytest.LogCaptureFixture, value: Any, streamed: bool
) -> None:
    got = await svc.post(_ask(stream=value))
    assert got.status_code == 200, got.text
    kind = got.headers["content-type"]
    if streamed:
        assert kind.startswith("text/event-stream")
        assert got.text.rstrip().endswith("data: [DONE]")
    else:
        assert kind.startswith("application/json")
        assert got.json()["object"] == "chat.completion"


@pytest.mark.parametrize(
    "field",
    [
        "stream",
        "n",
        "temperature",
        "seed",
        "max_tokens",
        "max_completion_tokens",
        "stop",
        "user",
        "tools",
        "top_p",
        "stream_options",
    ],
)
async def test_null_is_not_given(svc: Service, quiet: pytest.LogCaptureFixture, field: str) -> None:
    got = await svc.post(_ask(**{field: None}))
    assert got.status_code == 200, got.text
    assert got.json()["object"] == "chat.completion"


async def test_all_nulls_together(svc: Service, quiet: pytest.LogCaptureFixture) -> None:
    fields = ["stream", "n", "temperature", "seed", "max_tokens", "max_completion_tokens"]
    got = await svc.post(_ask(**dict.fromkeys(fields)))
    assert got.status_code == 200, got.text
    assert svc.calls == 3


async def test_the_services_max_field_chars_holds_for_chat_messages(
    world: Path, tmp_path: Path, quiet: pytest.LogCaptureFixture
) -> None:
    """``--max-field-chars`` bounds every string of a panel sent to ``/v1/decide``; a chat
    message became ``meta.question`` under the pipeline's own 32,768 instead."""
    async with service(world, tmp_path, max_field_chars=50) as svc:
        got = await svc.post(_ask("How many apples? " * 4))  # 68 characters
        error = _openai_error(got, 413)
        assert error["code"] == "request_too_large" and "at most 50 per field" in error["message"]
        assert svc.calls == 0 and svc.runs() == 0
        fits = await svc.post(_ask("Tom has 3 apples and buys 4 more. How many?"))
        assert fits.status_code == 200, fits.text


@pytest.mark.parametrize(
    "extra",
    [
        {"logprobs": True},
        {"top_logprobs": 3},
        {"modalities": ["text", "audio"]},
        {"audio": {"voice": "alloy", "format": "wav"}},
    ],
    ids=["logprobs", "top_logprobs", "audio-modality", "audio"],
)
async def test_what_a_panel_cannot_honour_is_refused_not_ignored(
    svc: Service, quiet: pytest.LogCaptureFixture, extra: dict[str, Any]
) -> None:
    error = _openai_error(await svc.post(_ask(**extra)), 400)
    assert error["param"] == next(iter(extra)), error
    assert svc.calls == 0 and svc.runs() == 0


@pytest.mark.parametrize(
    "extra",
    [{"logprobs": False}, {"top_logprobs": 0}, {"modalities": ["text"]}, {"logprobs": None}],
)
async def test_settings_a_panel_honours_anyway_are_read(
    svc: Service, quiet: pytest.LogCaptureFixture, extra: dict[str, Any]
) -> None:
    got = await svc.post(_ask(**extra))
    assert got.status_code == 200, got.text
    assert got.json()["choices"][0]["logprobs"] is None


async def test_a_large_body_is_parsed_off_the_event_loop(
    world: Path, tmp_path: Path, quiet: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A body over INLINE_BODY_BYTES is parsed in a worker thread, as /v1/decide's are: a
    body of millions of tiny values held the server's loop for seconds."""
    import threading

    from dissensus.serve import chat as chat_route
    from dissensus.serve.http import INLINE_BODY_BYTES

    loop_thread = threading.get_ident()
    parsed_on: list[int] = []
    real = chat_route._json

    def spy(raw: bytes) -> Any:
        parsed_on.append(threading.get_ident())
        return real(raw)

    monkeypatch.setattr(chat_route, "_json", spy)
    async with service(world, tmp_path) as svc:
        small = await svc.post(_ask())
        padding = "x" * (INLINE_BODY_BYTES + 10)
        large = await svc.post(_ask(user=padding))
        assert small.status_code == 200 and large.status_code == 200, large.text
    assert parsed_on[0] == loop_thread and parsed_on[1] != loop_thread, parsed_on
