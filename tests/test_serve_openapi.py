"""The OpenAPI schema (``/openapi.json``) describes what the server really answers: every
operation's answer as a model, streams and exports with their own media types, and the
answers a client generated from it reads."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dissensus.serve import create_app
from dissensus.serve.api_schema import (
    DecideStarted,
    ModelList,
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
