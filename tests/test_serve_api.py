"""The HTTP service in-process (httpx over ASGI): every endpoint, status code and error body."""

from __future__ import annotations

import asyncio
import gc
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest.mock import patch

import httpx
import pytest
import yaml

from dissensus.cli.route import record_of
from dissensus.concord.bounds import compute_bound
from dissensus.guard import guard_case
from dissensus.io.jsonl import parse_line
from dissensus.outputs import RouteRecord
from dissensus.pipeline import execute_run, load_policy, start_run
from dissensus.serve import ServeSettings, check_exposure, create_app
from dissensus.serve import runs as serve_runs
from dissensus.serve.auth import hash_token
from dissensus.states import RuleSet, Thresholds, get_backend, read_panels
from dissensus.store import Journal
from dissensus.types import Panel, VoteCase
from pipeline_cases import panel, write_jsonl
from serve_helpers import TOKENS, auth, client_for, escalating, heap_frozen, settings, write_tokens
from test_review_queue import clock_ahead

pytestmark = pytest.mark.anyio

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module", autouse=True)
def _heap_frozen() -> Iterator[None]:
    """The per-test garbage collection walks only this module's objects (see serve_helpers)."""
    yield from heap_frozen()


def _count_events(path: Path) -> int:
    with Journal(path) as journal:
        return sum(info.n_events for info in journal.runs())


def _strip_run(record: dict[str, Any]) -> dict[str, Any]:
    out = dict(record)
    out.pop("review_id", None)
    return out


async def test_health_ready_docs(tmp_path: Path) -> None:
    async with client_for(settings(tmp_path)) as client:
        assert (await client.get("/healthz")).json() == {"status": "ok"}
        assert (await client.get("/readyz")).json() == {"status": "ready"}
        docs = await client.get("/docs")
        assert docs.status_code == 200 and "swagger" in docs.text.lower()
        paths = (await client.get("/openapi.json")).json()["paths"]
        for path in (
            "/v1/decide",
            "/v1/runs/{run_id}/events",
            "/v1/review/{review_id}/resolve",
            "/v1/bound",
        ):
            assert path in paths
        missing = await client.get("/v1/nothing-here", headers=auth("adm"))
        assert missing.status_code == 404 and set(missing.json()) == {"error", "field"}


def _referenced_urls(html: str) -> list[str]:
    """Every ``src``/``href`` attribute and ``url:``/``spec-url`` value of a page."""
    return re.findall(r"""(?:src|href|spec-url)=["']([^"']+)["']|url: *["']([^"']+)["']""", html)


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
async def test_api_docs_load_only_local_files(tmp_path: Path, page: str) -> None:
    async with client_for(settings(tmp_path)) as client:
        res = await client.get(page)
        assert res.status_code == 200, res.text
        urls = [a or b for a, b in _referenced_urls(res.text)]
        assert len(urls) >= 3, urls  # script, style sheet or icon, schema
        assert "/openapi.json" in urls
        assert not re.search(r"https?://|//[a-z]", res.text, re.IGNORECASE), "a remote URL"
        for url in urls:
            assert url.startswith("/") and not url.startswith("//"), url
            fetched = await client.get(url)
            assert fetched.status_code == 200, url
            assert len(fetched.content) > 1000, url
        if page == "/docs":
            assert "/docs-assets/swagger-ui-bundle.js" in urls
            assert "/docs-assets/swagger-ui.css" in urls


async def test_api_docs_without_the_assets_package_say_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dissensus.serve import api_docs

    monkeypatch.setattr(api_docs, "assets_dir", lambda: None)
    async with client_for(settings(tmp_path)) as client:
        res = await client.get("/docs")
        assert res.status_code == 503
        assert "fastapi-offline" in res.json()["error"]
        assert (await client.get("/openapi.json")).status_code == 200


async def test_decide_records_equal_the_cli_pipeline(tmp_path: Path) -> None:
    rows = [
        escalating("e1"),
        panel("ok", ["1", "1", "1"], swap=["1", "1", "1"]),
        panel("split", ["1", "2", "2"]),
    ]
    s = settings(tmp_path)
    async with client_for(s) as client:
        one = await client.post("/v1/decide", json=rows[0], headers=auth("sub"))
        assert one.status_code == 200, one.text
        assert one.json()["action"] == "escalate" and one.headers["X-Dissensus-Run"]
        many = await client.post("/v1/decide", json=rows, headers=auth("sub"))
        assert many.status_code == 200
        body = many.json()
        assert body["status"] == "finished" and body["rejected"] == 0 and len(body["records"]) == 3
    # The same panels through the CLI's calls, on the same policy.
    policy, policy_dir = load_policy(s.policy)
    journal = Journal(tmp_path / "cli.sqlite")
    info = start_run(
        journal,
        str(write_jsonl(tmp_path / "in.jsonl", list(rows))),
        policy,
        policy_file=s.policy,
        policy_dir=policy_dir,
    )

    async def drain() -> list[dict[str, Any]]:
        return [r.model_dump(mode="json") async for r in execute_run(journal, info.run_id)]

    expected = await drain()
    journal.close()
    assert [_strip_run(r) for r in body["records"]] == [_strip_run(r) for r in expected]
    assert _strip_run(one.json()) == _strip_run(expected[0])


async def test_decide_list_rejects_items_with_the_cli_field_paths(tmp_path: Path) -> None:
    bad_agents = panel("few", ["1"])
    bad_conf = panel("conf", ["1", "2"])
    bad_conf["outputs"][1]["confidence"] = 3
    rows: list[Any] = [escalating("ok"), bad_agents, "not an object", bad_conf, {"id": "x"}]
    async with client_for(settings(tmp_path)) as client:
        res = await client.post("/v1/decide", json=rows, headers=auth("sub"))
    assert res.status_code == 200
    body = res.json()
    assert [r["id"] for r in body["records"]] == ["ok"]
    expected = []
    for i, row in enumerate(rows):
        parsed = parse_line(Panel, json.dumps(row), file="-", line=i + 1)
        if not isinstance(parsed, Panel):
            expected.append({"index": i, "field": parsed.field, "error": parsed.message})
    assert body["rejects"] == expected
    assert [r["field"] for r in body["rejects"]] == [
        "outputs",
        "<root>",
        "outputs.1.confidence",
        "outputs",
    ]


async def test_decide_errors(tmp_path: Path) -> None:
    s = settings(tmp_path, max_panels=5)
    async with client_for(s) as client:
        single = await client.post("/v1/decide", json=panel("few", ["1"]), headers=auth("sub"))
        assert single.status_code == 422 and single.json()["field"] == "outputs"
        bad_json = await client.post(
            "/v1/decide",
            content=b"{nope",
            headers={**auth("sub"), "content-type": "application/json"},
        )
        assert bad_json.status_code == 400 and bad_json.json()["field"] == "<json>"
        empty = await client.post("/v1/decide", json=[], headers=auth("sub"))
        assert empty.status_code == 422 and empty.json()["field"] == "<root>"
        scalar = await client.post("/v1/decide", json=3, headers=auth("sub"))
        assert scalar.status_code == 422
        too_many = await client.post(
            "/v1/decide", json=[escalating(f"p{i}") for i in range(6)], headers=auth("sub")
        )
        assert too_many.status_code == 413 and too_many.json()["field"] == "<root>"
        assert (await client.get("/v1/runs", headers=auth("sub"))).json() == []
    assert _count_events(Path(s.journal)) == 0


async def test_async_decide_polls_and_streams_events(tmp_path: Path) -> None:
    rows = [escalating(f"p{i}") for i in range(4)] + [panel("few", ["1"])]
    async with client_for(settings(tmp_path)) as client:
        res = await client.post("/v1/decide?async=true", json=rows, headers=auth("sub"))
        assert res.status_code == 202
        run_id = res.json()["run_id"]
        assert res.json()["links"]["events"] == f"/v1/runs/{run_id}/events"
        events = await client.get(f"/v1/runs/{run_id}/events", headers=auth("sub"))
        assert events.headers["content-type"].startswith("text/event-stream")
        kinds = [
            line.removeprefix("event: ")
            for line in events.text.splitlines()
            if line.startswith("event: ")
        ]
        assert kinds.count("record") == 4 and kinds.count("reject") == 1 and kinds[-1] == "finished"
        for _ in range(100):
            doc = (await client.get(f"/v1/runs/{run_id}", headers=auth("sub"))).json()
            if doc["status"] == "finished":
                break
            await asyncio.sleep(0.05)
        assert doc["status"] == "finished" and doc["done"] == 4 and doc["rejected"] == 1
        assert doc["rejects"][0]["index"] == 4 and doc["rejects"][0]["field"] == "outputs"
        # A finished run streams its records from the journal.
        again = await client.get(f"/v1/runs/{run_id}/events", headers=auth("sub"))
        assert again.text.count("event: record") == 4
        unknown = await client.get("/v1/runs/nope/events", headers=auth("sub"))
        assert unknown.status_code == 404


async def test_runs_list_verify_export(tmp_path: Path) -> None:
    s = settings(tmp_path)
    async with client_for(s) as client:
        run_id = (
            await client.post(
                "/v1/decide", json=[escalating("a"), escalating("b")], headers=auth("sub")
            )
        ).json()["run_id"]
        runs = (await client.get("/v1/runs", headers=auth("sub"))).json()
        assert [r["run_id"] for r in runs] == [run_id] and runs[0]["finished"] is True
        report = (await client.get(f"/v1/runs/{run_id}/verify", headers=auth("sub"))).json()
        assert report["ok"] is True and report["problems"] == []
        export = await client.get(f"/v1/runs/{run_id}/export", headers=auth("sub"))
        assert export.headers["content-type"].startswith("application/x-ndjson")
        lines = [json.loads(x) for x in export.text.splitlines()]
        assert len(lines) == report["n_events"] and lines[-1]["hash"] == report["head_hash"]
        started = next(x for x in lines if x["type"] == "run.started")
        assert started["payload"]["submitted_by"] == "sub-name"
        for path in ("", "/verify", "/export"):
            missing = await client.get(f"/v1/runs/nope{path}", headers=auth("sub"))
            assert missing.status_code == 404 and "nope" in missing.json()["error"]
    with Journal(s.journal) as journal:
        assert journal.verify(run_id).ok


async def test_route_reads_with_the_policys_thresholds_by_default(tmp_path: Path) -> None:
    from dissensus.pipeline.policy import ReadingSettings
    from dissensus.serve.library_calls import route_thresholds

    policy = tmp_path / "route-policy.yaml"
    policy.write_text(
        yaml.safe_dump({"reading": {"similarity": "tfidf", "theta_s": 0.9, "theta_a": 0.6}}),
        encoding="utf-8",
    )
    rows = [escalating("a"), panel("b", ["1", "1", "2"])]
    async with client_for(settings(tmp_path, policy=str(policy))) as client:
        mine = (await client.post("/v1/route", json=rows, headers=auth("sub"))).json()
        given = await client.post(
            "/v1/route?theta_s=0.2&theta_a=0.9", json=rows, headers=auth("sub")
        )
    assert [(r["theta_s"], r["theta_a"]) for r in mine["records"]] == [(0.9, 0.6)] * 2
    assert [(r["theta_s"], r["theta_a"]) for r in given.json()["records"]] == [(0.2, 0.9)] * 2
    # another backend than the policy's reads with its own calibrated theta_s
    reading = ReadingSettings(similarity="all-MiniLM-L6-v2", theta_s=0.5, theta_a=0.6)
    assert route_thresholds(reading, "tfidf", theta_s=None, theta_a=None) == (None, 0.6)
    assert route_thresholds(reading, "minilm", theta_s=None, theta_a=None) == (0.5, 0.6)


async def test_route_matches_the_cli_record(tmp_path: Path) -> None:
    rows = [escalating("a"), panel("b", ["1", "1", "2"]), panel("bad", ["1"])]
    async with client_for(settings(tmp_path)) as client:
        res = await client.post(
            "/v1/route?similarity=tfidf&theta_s=0.3", json=rows, headers=auth("sub")
        )
        assert res.status_code == 200
        body = res.json()
        single = await client.post(
            "/v1/route?similarity=tfidf&theta_s=0.3", json=rows[0], headers=auth("sub")
        )
        unknown = await client.post(
            "/v1/route?similarity=pkg:fn", json=rows[0], headers=auth("sub")
        )
        assert unknown.status_code == 422 and unknown.json()["field"] == "similarity"
    panels = [Panel.model_validate(r) for r in rows[:2]]
    backend = get_backend("tfidf")
    readings = read_panels(panels, backend, Thresholds.for_model(backend.name, 0.3, None))
    rules = RuleSet.default()
    cli = [
        json.loads(json.dumps(record_of(r, rules.route(r, p.meta))))
        for p, r in zip(panels, readings, strict=True)
    ]
    assert body["records"] == cli and single.json() == cli[0]
    assert [
        RouteRecord.of(r, rules.route(r, p.meta)).model_dump()
        for p, r in zip(panels, readings, strict=True)
    ] == [record_of(r, rules.route(r, p.meta)) for p, r in zip(panels, readings, strict=True)]
    # The bad row is rejected with the CLI's own words for it (the JSONL reader's reject).
    bad = parse_line(Panel, json.dumps(rows[2]), file="-", line=3)
    assert not isinstance(bad, Panel) and bad.field == "outputs" and bad.message
    assert body["rejects"] == [{"index": 2, "field": "outputs", "error": bad.message}]


async def test_vote_negotiate_verify_bound(tmp_path: Path) -> None:
    case = {
        "id": "q1",
        "votes": [
            {
                "agent": "a",
                "answer": "yes",
                "evidence_source": "wiki",
                "evidence_present": True,
                "family": "f1",
            },
            {
                "agent": "b",
                "answer": "yes",
                "evidence_source": "wiki",
                "evidence_present": True,
                "family": "f1",
            },
            {
                "agent": "c",
                "answer": "no",
                "evidence_source": "kb",
                "evidence_present": True,
                "family": "f2",
            },
        ],
    }
    problem = yaml.safe_load(
        (REPO / "examples" / "concord" / "region-table.yaml").read_text(encoding="utf-8")
    )
    async with client_for(settings(tmp_path)) as client:
        vote = await client.post("/v1/vote", json=case, headers=auth("sub"))
        assert vote.status_code == 200
        assert vote.json() == guard_case(VoteCase.model_validate(case)).model_dump(mode="json")
        votes = await client.post(
            "/v1/vote", json=[case, {"id": "x", "votes": []}], headers=auth("sub")
        )
        assert (
            votes.json()["rejects"][0]["index"] == 1
            and votes.json()["rejects"][0]["field"] == "votes"
        )
        parametric = {
            "id": "q2",
            "votes": [
                {
                    "agent": a,
                    "answer": "yes",
                    "evidence_source": "parametric",
                    "evidence_present": False,
                    "family": "f1",
                }
                for a in "abc"
            ],
        }
        refused_vote = await client.post(
            "/v1/vote?strict=true", json=parametric, headers=auth("sub")
        )
        assert refused_vote.status_code == 409 and "invariant 1" in refused_vote.json()["error"]
        bad_vote = await client.post("/v1/vote", json={"id": "x", "votes": []}, headers=auth("sub"))
        assert bad_vote.status_code == 422 and bad_vote.json()["field"] == "votes"

        cert = await client.post("/v1/negotiate", json=problem, headers=auth("sub"))
        assert cert.status_code == 200, cert.text
        assert cert.json()["status"] == "certified"
        verdict = await client.post("/v1/verify", json=cert.json(), headers=auth("sub"))
        assert verdict.json()["valid"] is True
        forged = cert.json()
        forged["floor"] = 0.99
        assert (await client.post("/v1/verify", json=forged, headers=auth("sub"))).json()[
            "valid"
        ] is False
        function_agent = dict(
            problem,
            agents=[*problem["agents"][:2], {"id": "f", "kind": "function", "score": "os:getcwd"}],
        )
        refused = await client.post("/v1/negotiate", json=function_agent, headers=auth("sub"))
        assert refused.status_code == 422 and refused.json()["field"] == "agents.2.kind"
        with_model = await client.post(
            "/v1/negotiate", json=dict(problem, model="scripted:/etc/passwd"), headers=auth("sub")
        )
        assert with_model.status_code == 422 and with_model.json()["field"] == "model"
        no_anchor = await client.post(
            "/v1/negotiate",
            json={k: v for k, v in problem.items() if k != "anchors"},
            headers=auth("sub"),
        )
        assert no_anchor.status_code == 422 and no_anchor.json()["field"] == "anchors"

        bound = await client.get("/v1/bound?agents=5&rounds=6", headers=auth("sub"))
        assert (
            bound.json() == compute_bound(5, 6).model_dump() and bound.json()["model_calls"] == 51
        )
        bad = await client.get("/v1/bound?agents=0&rounds=6", headers=auth("sub"))
        assert bad.status_code == 422 and bad.json()["field"] == "agents"


async def test_review_claim_resolve_conflicts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = settings(tmp_path, claim_ttl_s=30.0)
    async with client_for(s) as client:
        run = (
            await client.post(
                "/v1/decide", json=[escalating("a"), escalating("b")], headers=auth("sub")
            )
        ).json()
        rid = run["records"][0]["review_id"]
        listed = (await client.get("/v1/review", headers=auth("rev"))).json()
        assert [x["review_id"] for x in listed] == [rid, run["records"][1]["review_id"]]
        assert [
            x["review_id"]
            for x in (await client.get("/v1/review?limit=1", headers=auth("rev"))).json()
        ] == [rid]
        assert (
            await client.get(f"/v1/review?run={run['run_id']}&reason=value", headers=auth("rev"))
        ).status_code == 200
        assert (await client.get("/v1/review?run=nope", headers=auth("rev"))).status_code == 404
        shown = (await client.get(f"/v1/review/{rid}", headers=auth("rev"))).json()
        sha = shown["content_sha256"]
        assert shown["status"] == "open" and shown["item"]["options"] == ["1", "2"]

        claim = await client.post(f"/v1/review/{rid}/claim", headers=auth("rev"))
        assert claim.status_code == 200 and claim.json()["reviewer"] == "rev-name"
        taken = await client.post(f"/v1/review/{rid}/claim", headers=auth("rev2"))
        assert taken.status_code == 409 and taken.json()["claimed_by"] == "rev-name"
        blocked = await client.post(
            f"/v1/review/{rid}/resolve",
            json={"decision": "1", "note": "checked", "content_sha256": sha},
            headers=auth("rev2"),
        )
        assert blocked.status_code == 409 and blocked.json()["claimed_by"] == "rev-name"
        clock_ahead(monkeypatch, 31)  # the claim expires (the journal's clock moves on)
        assert (
            await client.post(f"/v1/review/{rid}/claim", headers=auth("rev2"))
        ).status_code == 200

        stale = await client.post(
            f"/v1/review/{rid}/resolve",
            json={"decision": "1", "note": "checked", "content_sha256": "0" * 64},
            headers=auth("rev2"),
        )
        assert stale.status_code == 409 and stale.json()["field"] == "content_sha256"
        ok = await client.post(  # upper-case hex is the same hash, as in the integrations
            f"/v1/review/{rid}/resolve",
            json={"decision": "2", "note": "policy says 2", "content_sha256": sha.upper()},
            headers=auth("rev2"),
        )
        assert ok.status_code == 200, ok.text
        assert ok.json()["action"] == "human" and ok.json()["resolution"]["reviewer"] == "rev2-name"
        again = await client.post(
            f"/v1/review/{rid}/resolve",
            json={"decision": "1", "note": "checked", "content_sha256": sha},
            headers=auth("rev"),
        )
        assert again.status_code == 409
        assert (
            again.json()["resolved_by"] == "rev2-name"
            and again.json()["resolved_at"] in again.json()["error"]
        )
        assert "rev2-name" in again.json()["error"]
        late_claim = await client.post(f"/v1/review/{rid}/claim", headers=auth("rev"))
        assert late_claim.status_code == 409 and late_claim.json()["resolved_by"] == "rev2-name"

        resolved = (await client.get("/v1/review?status=resolved", headers=auth("rev"))).json()
        assert [x["review_id"] for x in resolved] == [rid]
        detail = (await client.get(f"/v1/review/{rid}", headers=auth("rev"))).json()
        assert (
            detail["resolution"]["reviewer"] == "rev2-name"
            and detail["resolution"]["note"] == "policy says 2"
        )
        assert [h["type"] for h in detail["history"]] == ["review.resolved"]
        assert detail["history"][0]["reviewer"] == "rev2-name"
        final = (await client.get(f"/v1/runs/{run['run_id']}", headers=auth("sub"))).json()
        assert (
            final["records"][0]["action"] == "human" and final["records"][1]["action"] == "escalate"
        )
        for bad in ("nodot", "nope.1", f"{run['run_id']}.99"):
            missing = await client.get(f"/v1/review/{bad}", headers=auth("rev"))
            assert missing.status_code == 404, bad
        assert (await client.get(f"/v1/runs/{run['run_id']}/verify", headers=auth("sub"))).json()[
            "ok"
        ]


async def test_confirm_audits_automatic_decisions(tmp_path: Path) -> None:
    async with client_for(settings(tmp_path)) as client:
        run = (
            await client.post(
                "/v1/decide",
                json=[panel("a", ["1", "1"], swap=["1", "1"]), escalating("b")],
                headers=auth("sub"),
            )
        ).json()
        auto, escalated = run["records"]
        assert auto["auto"] and not escalated["auto"]
        ref = f"{run['run_id']}.{auto['line']}"
        body = {"note": "checked", "reviewer": "forged"}
        assert (
            await client.post(f"/v1/cases/{ref}/confirm", json=body, headers=auth("rev"))
        ).status_code == 422  # extra fields (a reviewer name) are refused
        assert (
            await client.post(f"/v1/cases/{ref}/confirm", json={"note": "x"}, headers=auth("sub"))
        ).status_code == 403
        ok = await client.post(
            f"/v1/cases/{ref}/confirm",
            json={"note": "checked", "decision": "1"},  # a blind audit needs one
            headers=auth("rev"),
        )
        assert ok.status_code == 200
        assert ok.json()["agrees"] is True and ok.json()["reviewer"] == "rev-name"
        again = await client.post(
            f"/v1/cases/{ref}/confirm", json={"note": "again"}, headers=auth("rev2")
        )
        assert again.status_code == 409 and again.json()["confirmed_by"] == "rev-name"
        not_auto = await client.post(
            f"/v1/cases/{run['run_id']}.{escalated['line']}/confirm",
            json={"note": "x"},
            headers=auth("rev"),
        )
        assert not_auto.status_code == 400 and "review resolve" in not_auto.json()["error"]
    with Journal(tmp_path / "journal.sqlite") as journal:
        audits = list(journal.events(run["run_id"], type="review.confirmed"))
        assert [e.payload["reviewer"] for e in audits] == ["rev-name"]


async def test_security(tmp_path: Path) -> None:
    s = settings(tmp_path, max_body_bytes=200_000, max_panels=100)
    async with client_for(s) as client:
        run = (await client.post("/v1/decide", json=[escalating("a")], headers=auth("sub"))).json()
        rid = run["records"][0]["review_id"]
        sha = (await client.get(f"/v1/review/{rid}", headers=auth("rev"))).json()["content_sha256"]
        before = _count_events(Path(s.journal))

        none = await client.post("/v1/decide", json=escalating("x"))
        assert none.status_code == 401 and none.json()["field"] == "Authorization"
        assert none.headers["WWW-Authenticate"] == "Bearer"
        wrong = await client.post(
            "/v1/decide", json=escalating("x"), headers={"Authorization": "Bearer nope"}
        )
        assert wrong.status_code == 401
        basic = await client.get("/v1/runs", headers={"Authorization": "Basic dG9rLXN1Yg=="})
        assert basic.status_code == 401
        role = await client.post("/v1/decide", json=escalating("x"), headers=auth("rev"))
        assert role.status_code == 403
        assert (await client.get("/v1/review", headers=auth("sub"))).status_code == 403
        assert (
            await client.post(
                f"/v1/review/{rid}/resolve",
                json={"decision": "1", "note": "checked", "content_sha256": sha},
                headers=auth("sub"),
            )
        ).status_code == 403
        assert (await client.get("/v1/review", headers=auth("adm"))).status_code == 200
        forged = await client.post(
            f"/v1/review/{rid}/resolve",
            json={
                "decision": "1",
                "note": "checked",
                "content_sha256": sha,
                "reviewer": "the-boss",
            },
            headers=auth("rev"),
        )
        assert forged.status_code == 422 and forged.json()["field"] == "reviewer"
        no_note = await client.post(
            f"/v1/review/{rid}/resolve",
            json={"decision": "1", "content_sha256": sha},
            headers=auth("rev"),
        )
        assert no_note.status_code == 422 and no_note.json()["field"] == "note"
        big = await client.post(
            "/v1/decide",
            content=b"[" + b" " * 300_000 + b"]",
            headers={**auth("sub"), "content-type": "application/json"},
        )
        assert big.status_code == 413 and big.json()["field"] == "<body>"

        async def chunks() -> Any:
            for _ in range(30):
                yield b" " * 10_000

        chunked = await client.post(
            "/v1/decide",
            content=chunks(),
            headers={**auth("sub"), "content-type": "application/json"},
        )
        assert chunked.status_code == 413
        many = [{"id": f"p{i}", "outputs": []} for i in range(10_000)]
        flood = await client.post(
            "/v1/decide",
            content=json.dumps(many).encode(),
            headers={**auth("sub"), "content-type": "application/json"},
        )
        assert flood.status_code == 413
        assert _count_events(Path(s.journal)) == before
    # With a larger body limit, 10,000 panels hit the panel limit: 413 as well, nothing journalled.
    (tmp_path / "b").mkdir()
    s2 = settings(tmp_path / "b", max_panels=1000)
    async with client_for(s2) as client:
        # The count is checked before any panel is read: small panels make a small body.
        flood = await client.post("/v1/decide", json=many, headers=auth("sub"))
        assert flood.status_code == 413 and "10000" in flood.json()["error"]
    assert _count_events(Path(s2.journal)) == 0


async def test_without_tokens_loopback_only(tmp_path: Path) -> None:
    s = settings(tmp_path, tokens=None)
    async with client_for(s) as client:
        res = await client.post("/v1/decide", json=escalating("a"))
        assert res.status_code == 200
        rid = res.json()["review_id"]
        sha = (await client.get(f"/v1/review/{rid}")).json()["content_sha256"]
        done = await client.post(
            f"/v1/review/{rid}/resolve",
            json={"decision": "1", "note": "checked", "content_sha256": sha},
        )
        assert done.json()["resolution"]["reviewer"] == "local"
    from dissensus.errors import ConfigError

    with pytest.raises(ConfigError, match="refusing"):
        check_exposure(ServeSettings(host="0.0.0.0"))
    check_exposure(ServeSettings(host="::1"))
    check_exposure(ServeSettings(host="0.0.0.0", tokens="t.txt"))


def test_cli_serve_refuses_public_host_without_tokens(tmp_path: Path) -> None:
    from dissensus.cli import main

    assert main(["serve", "--host", "0.0.0.0", "--journal", str(tmp_path / "j.sqlite")]) == 2


def test_serve_token_line_round_trips(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from dissensus.cli import main
    from dissensus.serve.auth import load_tokens

    assert main(["serve-token", "kim", "review"]) == 0
    out = capsys.readouterr().out
    token = out.split("token (shown once): ")[1].split()[0]
    line = out.split("tokens-file line:")[1].strip()
    path = tmp_path / "tokens.txt"
    path.write_text(line + "\n", encoding="utf-8")
    store = load_tokens(path)
    principal = store.authenticate(token)
    assert principal is not None and (principal.name, principal.role) == ("kim", "review")
    assert store.authenticate(token + "x") is None
    assert token not in path.read_text(encoding="utf-8")


def test_a_token_is_compared_with_every_line_of_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every line's hash is compared, in constant time, with the token's hash, whether
    the token is the first line's or no line's: the time taken tells nothing of which."""
    from dissensus.serve import auth as auth_module

    store = auth_module.load_tokens(write_tokens(tmp_path / "tokens.txt"))
    lines = sorted(bytes.fromhex(hash_token(f"tok-{t}")) for t in TOKENS)
    compared: list[tuple[bytes, bytes]] = []
    real = auth_module.hmac.compare_digest

    def counting(a: bytes, b: bytes) -> bool:
        compared.append((a, b))
        return real(a, b)

    monkeypatch.setattr(auth_module.hmac, "compare_digest", counting)
    first = next(iter(TOKENS))
    for token, holder in [(first, f"{first}-name"), ("adm", "adm-name"), ("nobody", None)]:
        compared.clear()
        principal = store.authenticate(f"tok-{token}")
        assert (principal.name if principal else None) == holder
        asked = bytes.fromhex(hash_token(f"tok-{token}"))
        assert sorted(compared) == [(line, asked) for line in lines]


def test_tokens_file_errors_name_line_and_field(tmp_path: Path) -> None:
    from dissensus.errors import ConfigError
    from dissensus.serve.auth import load_tokens

    cases = {
        "plaintoken kim review\n": "token_sha256",
        f"{'a' * 64} kim boss\n": "role",
        f"{'a' * 64} kim\n": "line",
        f"{'a' * 64} kim review\n{'b' * 64} kim review\n": "name",
    }
    for text, field in cases.items():
        path = tmp_path / "t.txt"
        path.write_text(text, encoding="utf-8")
        with pytest.raises(ConfigError) as err:
            load_tokens(path)
        assert err.value.field == field and "t.txt:" in str(err.value)


async def test_request_timeout_and_chunked_limit_middleware() -> None:
    from dissensus.serve.limits import RequestTimeout

    async def slow(scope: Any, receive: Any, send: Any) -> None:
        await asyncio.sleep(1)

    transport = httpx.ASGITransport(app=RequestTimeout(slow, 0.05))
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        res = await client.get("/x")
    assert res.status_code == 504 and res.json()["error"].startswith("request took longer")


async def test_decide_timeout_names_the_run_which_goes_on(tmp_path: Path) -> None:
    s = settings(tmp_path, request_timeout_s=0.001)
    app = create_app(s)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1"
    ) as client:
        # 200 panels take far longer than the 1 ms timeout even on a fast machine (20 once
        # finished before a loaded machine's event loop fired it).
        res = await client.post(
            "/v1/decide", json=[escalating(f"p{i}") for i in range(200)], headers=auth("sub")
        )
        assert res.status_code == 504
        run_id = res.json()["run_id"]
        # Polled through a server of usual --timeout on the same journal (404 until the
        # run's first write): a run read from the journal, as one that finished is, is
        # read in a worker thread, and that hop takes longer than 1 ms.
        async with client_for(settings(tmp_path)) as other:
            for _ in range(400):
                doc = (await other.get(f"/v1/runs/{run_id}", headers=auth("sub"))).json()
                if doc.get("status") == "finished":
                    break
                await asyncio.sleep(0.05)
        assert doc["status"] == "finished" and doc["done"] == 200


def test_item_validation_matches_the_jsonl_reader() -> None:
    """Property: an item is rejected with the field and message the CLI gives its line."""
    from hypothesis import given
    from hypothesis import strategies as st

    from dissensus.serve.http import validated as _validated

    scalars = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(max_size=5),
    )
    output = st.fixed_dictionaries(
        {
            "agent": st.one_of(st.sampled_from(["a", "b", ""]), scalars),
            "decision": st.one_of(st.sampled_from(["1", "2"]), scalars),
        },
        optional={
            "reasoning": st.one_of(st.just("because"), scalars),
            "confidence": st.one_of(st.floats(-1, 2), scalars),
        },
    )
    item = st.one_of(
        scalars,
        st.lists(scalars, max_size=2),
        st.fixed_dictionaries(
            {"id": st.one_of(st.just("x"), scalars)},
            optional={
                "outputs": st.lists(output, max_size=3),
                "meta": st.one_of(st.just({}), scalars),
            },
        ),
    )

    @given(st.lists(item, min_size=1, max_size=4))
    def check(items: list[Any]) -> None:
        good, rejects = _validated(Panel, items)
        expected = []
        for i, it in enumerate(items):
            parsed = parse_line(Panel, json.dumps(it), file="-", line=i + 1)
            if not isinstance(parsed, Panel):
                expected.append({"index": i, "field": parsed.field, "error": parsed.message})
        assert [r.model_dump() for r in rejects] == expected
        assert len(good) + len(rejects) == len(items)

    check()


def test_a_run_the_server_started_resumes_with_the_cli(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run interrupted before its cases were decided is finished by ``dissensus runs resume``
    (the CLI's command in this process; it installs signal handlers, so it runs in the main
    thread, between the two event loops of the service's side)."""
    from dissensus.cli import main

    gc.collect()  # as before every async test (see conftest): no leaked client in our loops
    s = settings(tmp_path)
    app = create_app(s)

    async def interrupted() -> str:
        with patch.object(serve_runs, "RUNS_PER_LOOP", 0):  # no place to decide: the run waits
            state = await app.state.service.runner.start(
                [json.dumps(escalating("a")), json.dumps(panel("few", ["1"]))],
                submitted_by="sub-name",
            )
        assert state.task is not None
        await asyncio.sleep(0.05)
        state.task.cancel()  # the server stops before deciding anything
        with pytest.raises(asyncio.CancelledError):
            await state.task
        # What a remote caller reads (the 503, the stream's last event) names the run and
        # the command, never the journal's file.
        assert state.status == "incomplete" and state.error is not None
        assert f"runs resume {state.run_id} --journal JOURNAL" in state.error, state.error
        assert str(s.journal) not in state.error and "journal.sqlite" not in state.error
        return str(state.run_id)

    async def shown(run_id: str) -> Any:
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1"
        ) as client:
            return (await client.get(f"/v1/runs/{run_id}", headers=auth("sub"))).json()

    run_id = asyncio.run(interrupted())
    capsys.readouterr()
    code = main(["runs", "resume", run_id, "--journal", s.journal, "--json"])
    out, err = capsys.readouterr()
    assert code == 3, err  # one rejected item
    lines = [json.loads(x) for x in out.splitlines() if x.startswith("{")]
    assert [r["id"] for r in lines] == ["a"] and lines[0]["action"] == "escalate"
    doc = asyncio.run(shown(run_id))
    assert (
        doc["status"] == "finished" and doc["done"] == 1 and doc["rejects"][0]["field"] == "outputs"
    )


def test_graceful_shutdown_time_comes_from_the_environment() -> None:
    from dissensus.errors import ConfigError
    from dissensus.serve.server import GRACEFUL_SHUTDOWN_S, SHUTDOWN_ENV, graceful_shutdown_s

    assert graceful_shutdown_s({}) == GRACEFUL_SHUTDOWN_S == 5
    assert graceful_shutdown_s({SHUTDOWN_ENV: " 12 "}) == 12
    for bad in ("0", "-3", "2.5", "soon"):
        with pytest.raises(ConfigError) as err:
            graceful_shutdown_s({SHUTDOWN_ENV: bad})
        assert err.value.field == SHUTDOWN_ENV and repr(bad) in str(err.value)


def test_served_connections_send_without_waiting_for_acks() -> None:
    """Connections accepted on the service's socket have Nagle's algorithm off: a response
    written in two parts must not wait for the client's delayed ACK (about 40 ms each)."""
    import socket

    from dissensus.serve.server import listen

    async def go() -> int:
        accepted: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            sock = writer.get_extra_info("socket")
            accepted.set_result(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            writer.close()

        sock = listen("127.0.0.1", 0)
        server = await asyncio.start_server(on_connect, sock=sock)
        try:
            port = sock.getsockname()[1]
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            flag = await asyncio.wait_for(accepted, 30)
            writer.close()
            return flag
        finally:
            server.close()
            await server.wait_closed()

    assert asyncio.run(go()) != 0


def _hold_run_lock(path: str, run: str, held: Any, go: Any) -> None:
    """Another process executing ``run``: it holds the run's lock until told to exit."""
    import os

    j = Journal(path)
    assert j.acquire_run_lock(run) is None
    held.set()
    go.wait(120)
    os._exit(0)


async def test_a_run_another_process_executes_is_running(tmp_path: Path) -> None:
    import multiprocessing

    s = settings(tmp_path)
    with Journal(s.journal) as j:
        j.create_run("elsewhere", kind="decide", meta={})
    fork = multiprocessing.get_context("fork")
    held, go = fork.Event(), fork.Event()
    child = fork.Process(target=_hold_run_lock, args=(s.journal, "elsewhere", held, go))
    child.start()
    try:
        assert held.wait(120)
        async with client_for(s) as client:
            doc = (await client.get("/v1/runs/elsewhere", headers=auth("sub"))).json()
            assert doc["status"] == "running"
            listed = (await client.get("/v1/runs", headers=auth("sub"))).json()
            assert [(r["run_id"], r["status"], r["finished"]) for r in listed] == [
                ("elsewhere", "running", False)
            ]
            go.set()
            child.join(timeout=300)
            # Its process is gone without finishing it: stopped, resumable.
            doc = (await client.get("/v1/runs/elsewhere", headers=auth("sub"))).json()
            assert doc["status"] == "incomplete"
            listed = (await client.get("/v1/runs", headers=auth("sub"))).json()
            assert listed[0]["status"] == "incomplete"
    finally:
        go.set()
        child.join(timeout=300)


def test_the_port_listens_before_the_application_starts() -> None:
    """A client that connects as soon as ``dissensus serve`` prints its start-up line (the
    application may still be loading an embedding model) waits in the backlog; it was
    refused (connection refused for seconds with a MiniLM policy)."""
    import socket as sockets

    from dissensus.serve.server import listen

    server = listen("127.0.0.1", 0)
    try:
        client = sockets.create_connection(server.getsockname(), timeout=2)
        client.close()
    finally:
        server.close()


def test_the_events_of_a_run_executed_elsewhere_are_a_snapshot(tmp_path: Path) -> None:
    """A run another live process holds (the CLI, another replica) is not followed: its
    stream is what is journalled so far, then one ``running`` event, and it ends."""
    import os
    import socket
    import sqlite3

    s = settings(tmp_path)
    inp = write_jsonl(tmp_path / "in.jsonl", [escalating("a"), escalating("b")])
    with Journal(s.journal) as journal:
        policy, policy_dir = load_policy(s.policy)
        info = start_run(
            journal, str(inp), policy, policy_file=str(s.policy), policy_dir=policy_dir
        )

        async def run() -> None:
            async for _ in execute_run(journal, info.run_id):
                pass

        asyncio.run(run())
    with sqlite3.connect(s.journal) as db:  # unfinished, and held by a live process here
        db.execute("DELETE FROM events WHERE run_id = ? AND key = 'run/finished'", (info.run_id,))
        db.execute(
            "INSERT INTO run_locks VALUES (?, ?, ?, '2026-01-01')",
            (info.run_id, os.getppid(), socket.gethostname()),
        )

    async def events() -> str:
        async with client_for(s) as client:
            got = await client.get(f"/v1/runs/{info.run_id}/events", headers=auth("sub"))
            assert got.status_code == 200
            return got.text

    text = asyncio.run(events())
    kinds = re.findall(r"^event: (\w+)$", text, flags=re.M)
    assert kinds == ["record", "record", "running"], text
