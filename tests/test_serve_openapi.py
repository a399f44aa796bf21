"""The OpenAPI schema (``/openapi.json``) describes what the server really answers: every
operation's answer as a model, streams and exports with their own media types, and the
answers a client generated from it reads."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dissensus.serve import create_app
from dissensus.serve.api_schema import (
    DecideStarted,
    ErrorBody,
    ModelList,
    OpenAIErrorBody,
    Ready,
    RouteAnswer,
    VoteAnswer,
)
from pipeline_cases import panel
from serve_helpers import auth, client_for, escalating, heap_frozen, settings

pytestmark = pytest.mark.anyio

SUCCESS = ("200", "201", "202", "204")

MEDIA = {
    ("get", "/v1/runs/{run_id}/events"): {"text/event-stream"},
    ("get", "/v1/runs/{run_id}/export"): {"application/x-ndjson"},
    ("post", "/v1/chat/completions"): {"application/json", "text/event-stream"},
}
"""The media types of a success other than JSON alone."""

OPENAI = {"/v1/chat/completions", "/v1/cases/{case_id}", "/v1/models", "/v1/models/{model}"}
"""The OpenAI-compatible paths: every refusal there is OpenAI's error body."""

REPO = Path(__file__).resolve().parent.parent

JSON = {"Content-Type": "application/json"}


@pytest.fixture(scope="module", autouse=True)
def _heap_frozen() -> Iterator[None]:
    yield from heap_frozen()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def schema(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return create_app(settings(tmp_path_factory.mktemp("openapi"))).openapi()


def _operations(schema: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, item in schema["paths"].items():
        for method, operation in item.items():
            yield method, path, operation


def _says_something(schema: dict[str, Any]) -> bool:
    """Whether a JSON schema describes a value (more than a title)."""
    return bool({"$ref", "anyOf", "oneOf", "allOf", "type", "properties", "items"} & set(schema))


def test_every_operation_declares_its_answer(schema: dict[str, Any]) -> None:
    operations = list(_operations(schema))
    assert len(operations) == 26, [(m, p) for m, p, _ in operations]
    for method, path, operation in operations:
        successes = [s for s in SUCCESS if s in operation["responses"]]
        assert successes, (method, path)
        for status in successes:
            content = operation["responses"][status].get("content", {})
            expected = MEDIA.get((method, path), {"application/json"})
            assert set(content) == expected, (method, path, status, set(content))
            for media, body in content.items():
                assert _says_something(body["schema"]), (method, path, status, media)


def test_the_answers_written_by_hand_name_their_models(schema: dict[str, Any]) -> None:
    def refs(method: str, path: str, status: str = "200") -> set[str]:
        found = schema["paths"][path][method]["responses"][status]["content"]["application/json"]
        body = found["schema"]
        return {s["$ref"].rsplit("/", 1)[1] for s in body.get("anyOf", [body]) if "$ref" in s}

    assert refs("post", "/v1/decide") == {"CaseRecord", "DecideAnswer"}
    assert refs("post", "/v1/decide", "202") == {"DecideStarted"}
    assert refs("post", "/v1/route") == {"RouteRecord", "RouteAnswer"}
    assert refs("post", "/v1/vote") == {"GuardDecision", "VoteAnswer"}
    assert refs("post", "/v1/negotiate") == {"Certificate"}
    assert refs("post", "/v1/verify") == {"Verdict"}
    assert refs("post", "/v1/chat/completions") == {"ChatCompletion"}
    assert refs("get", "/v1/cases/{case_id}") == {"CaseStatus"}
    assert refs("get", "/v1/models") == {"ModelList"}
    assert refs("get", "/v1/models/{model}") == {"ModelObject"}
    assert refs("get", "/readyz") == {"Ready"}


async def test_the_answers_are_what_the_schema_declares(tmp_path: Path) -> None:
    vote_case = {
        "id": "q",
        "votes": [
            {"agent": a, "answer": "yes", "evidence_source": "wiki", "evidence_present": True}
            for a in "abc"
        ],
    }
    async with client_for(settings(tmp_path)) as client:
        ready = await client.get("/readyz")
        Ready.model_validate_json(ready.content, strict=True)
        started = await client.post(
            "/v1/decide", params={"async": "true"}, json=[escalating("a")], headers=auth("sub")
        )
        assert started.status_code == 202, started.text
        DecideStarted.model_validate_json(started.content, strict=True)
        routed = await client.post(
            "/v1/route", json=[panel("r", ["1", "1", "2"]), {"id": 3}], headers=auth("sub")
        )
        assert RouteAnswer.model_validate_json(routed.content).rejected == 1, routed.text
        voted = await client.post("/v1/vote", json=[vote_case, {}], headers=auth("sub"))
        assert VoteAnswer.model_validate_json(voted.content).rejected == 1, voted.text
        models = await client.get("/v1/models", headers=auth("sub"))
        ModelList.model_validate_json(models.content, strict=True)
        # Follow the run started above to its end (its event stream ends with the run).
        events = await client.get(started.json()["links"]["events"], headers=auth("sub"))
        assert events.headers["content-type"].startswith("text/event-stream")


def _ref(response: dict[str, Any]) -> str | None:
    content = response.get("content", {})
    if set(content) != {"application/json"}:
        return None
    ref = content["application/json"]["schema"].get("$ref", "")
    return str(ref).rsplit("/", 1)[-1] or None


def test_fastapi_s_validation_error_is_nowhere(schema: dict[str, Any]) -> None:
    """The server never answers ``{"detail": [...]}``: its 422 is ``{error, field}``."""
    text = json.dumps(schema)
    assert "HTTPValidationError" not in text
    assert "ValidationError" not in schema["components"]["schemas"]


def test_every_refusal_declares_the_body_the_server_sends(schema: dict[str, Any]) -> None:
    for method, path, operation in _operations(schema):
        errors = {s: r for s, r in operation["responses"].items() if int(s) >= 400}
        assert {"400", "403", "500"} <= set(errors), (method, path, sorted(errors))
        if path.startswith("/v1/"):
            assert "401" in errors, (method, path)
        expected = "OpenAIErrorBody" if path in OPENAI else "ErrorBody"
        for status, response in errors.items():
            assert _ref(response) == expected, (method, path, status, response)
            assert response["description"], (method, path, status)
    error = schema["components"]["schemas"]["ErrorBody"]
    assert set(error["required"]) == {"error", "field"}
    openai = schema["components"]["schemas"]["OpenAIError"]
    assert set(openai["required"]) == {"message", "type", "param", "code"}


def _documented() -> Iterator[tuple[str, str, set[str]]]:
    """``(method, path, statuses)`` of each row of docs/serve.md's endpoint table, each
    path parameter written ``{}``."""
    text = (REPO / "docs" / "serve.md").read_text(encoding="utf-8")
    table = text.split("## Endpoints", 1)[1].split("\n\n", 2)[1]
    for row in table.splitlines()[2:]:
        target = re.match(r"\| `(\w+) ([^`? ]+)", row)
        assert target, row
        statuses = set(re.findall(r"\d{3}", row.rstrip(" |").rsplit("|", 1)[1]))
        yield target.group(1).lower(), _shape(target.group(2)), statuses


def _shape(path: str) -> str:
    return re.sub(r"\{[^}]*\}(\.\{[^}]*\})?", "{}", path)


def test_the_statuses_docs_serve_md_lists_are_declared(schema: dict[str, Any]) -> None:
    declared = {
        (method, _shape(path)): set(operation["responses"])
        for method, path, operation in _operations(schema)
    }
    rows = list(_documented())
    assert len(rows) == 27, rows  # every operation, and decide's ?async=true
    for method, path, statuses in rows:
        assert statuses <= declared[(method, path)], (method, path, statuses)


async def test_the_refusals_are_what_the_schema_declares(tmp_path: Path) -> None:
    async with client_for(settings(tmp_path)) as client:
        refused = [
            await client.get("/v1/runs", params={"limit": 0}, headers=auth("sub")),
            await client.get("/v1/runs/nothing", headers=auth("sub")),
            await client.get("/v1/review", headers=auth("sub")),
            await client.post("/v1/decide", content=b"{", headers={**auth("sub"), **JSON}),
            await client.get("/v1/runs"),
        ]
        for res, status in zip(refused, (422, 404, 403, 400, 401), strict=True):
            assert res.status_code == status, res.text
            ErrorBody.model_validate_json(res.content, strict=True)
        chat = [
            await client.get("/v1/models"),
            await client.get("/v1/models/other", headers=auth("sub")),
            await client.get("/v1/cases/R.1", headers=auth("sub")),
            await client.post(
                "/v1/chat/completions", content=b"{", headers={**auth("sub"), **JSON}
            ),
        ]
        for res, status in zip(chat, (401, 404, 404, 400), strict=True):
            assert res.status_code == status, res.text
            OpenAIErrorBody.model_validate_json(res.content, strict=True)
        served = await client.get("/openapi.json")
        assert "HTTPValidationError" not in served.text
        assert "#/components/schemas/OpenAIErrorBody" in served.text
