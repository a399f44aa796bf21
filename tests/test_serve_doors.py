"""The service's door: the CLI's records, decided off the server's event loop.

* ``dissensus serve --policy examples/llmbar-policy.yaml`` gives the records ``dissensus
  decide`` gives for the bundled panels, learned acceptance included (the service once
  ignored it).
* While a run embeds, the server's loop keeps answering: a similarity function that
  blocks its thread until the test lets it go must not keep ``/healthz`` from answering.
* A policy's deadline stops a server run ``incomplete`` (partial, resumable), not ``failed``.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

import slow_embed
from cli_helpers import cli
from dissensus.serve import ServeSettings
from pipeline_cases import panel, write_jsonl
from serve_helpers import auth, client_for, write_tokens

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.anyio


def _fresh(tmp: Path) -> list[dict[str, Any]]:
    """Two panels whose texts no embedding cache has seen."""
    fresh = uuid.uuid4().hex
    return [
        panel(f"p{i}", ["1", "1", "2"], reasoning=[f"{fresh} {i} {k}" for k in range(3)])
        for i in range(2)
    ]


async def _embedding_started() -> None:
    """Until the run reaches the gated embedding (on its own thread), 4 s at most."""
    for _ in range(400):
        if slow_embed.GATE_STARTED.is_set():
            return
        await asyncio.sleep(0.01)


async def _settled(client: httpx.AsyncClient, link: str) -> dict[str, Any]:
    """The run's document once it stopped running (10 s at most)."""
    doc: dict[str, Any] = {}
    for _ in range(1000):
        doc = (await client.get(link, headers=auth("sub"))).json()
        if doc["status"] != "running":
            break
        await asyncio.sleep(0.01)
    return doc


def _settings(tmp: Path, policy: Path) -> ServeSettings:
    return ServeSettings(
        journal=str(tmp / "serve.sqlite"),
        policy=str(policy),
        tokens=str(write_tokens(tmp / "tokens.txt")),
        # The doors are compared by their records, not their speed: a loaded machine must
        # not turn a slow synchronous decide into a 504 "poll the run".
        request_timeout_s=900.0,
    )


def test_the_service_gives_the_clis_records_under_the_llmbar_policy(tmp_path: Path) -> None:
    policy = ROOT / "examples" / "llmbar-policy.yaml"
    with open(ROOT / "examples" / "llmbar-swap.jsonl", encoding="utf-8") as handle:
        rows = [json.loads(next(handle)) for _ in range(6)]
    panels = write_jsonl(tmp_path / "p.jsonl", list(rows))
    done = cli("decide", panels, "--policy", policy, "--journal", tmp_path / "c.sqlite", "--json")
    assert done.code == 0, done.err
    expected = [json.loads(line) for line in done.out.splitlines()]

    async def serve() -> list[dict[str, Any]]:
        async with client_for(_settings(tmp_path, policy)) as client:
            response = await client.post("/v1/decide", json=rows, headers=auth("sub"))
        records: list[dict[str, Any]] = response.json()["records"]
        return records

    got = asyncio.run(serve())
    drop = ("review_id",)  # the run id differs
    assert [{k: v for k, v in r.items() if k not in drop} for r in got] == [
        {k: v for k, v in r.items() if k not in drop} for r in expected
    ]
    assert all(r["acceptance"] is not None for r in got)


async def test_the_loop_answers_while_a_run_embeds(tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        yaml.safe_dump(
            {"reading": {"similarity": "slow_embed:gated", "theta_s": 0.5}, "allow_code": True}
        ),
        encoding="utf-8",
    )
    slow_embed.GATE.clear()
    slow_embed.GATE_STARTED.clear()
    slow_embed.GATE_LOG.clear()
    rows = _fresh(tmp_path)
    order: list[str] = []
    async with client_for(_settings(tmp_path, policy)) as client:
        started = await client.post(
            "/v1/decide", params={"async": "true"}, json=rows, headers=auth("sub")
        )
        assert started.status_code == 202
        await _embedding_started()
        assert slow_embed.GATE_STARTED.is_set()
        health = await client.get("/healthz")
        order.append("healthz")
        order.extend(slow_embed.GATE_LOG)  # still empty: the embedding has not returned
        slow_embed.GATE.set()
        link = started.json()["links"]["run"]
        doc = await _settled(client, link)
    assert health.status_code == 200
    assert order == ["healthz"]
    assert slow_embed.GATE_LOG and doc["status"] == "finished" and doc["done"] == 2


async def test_a_deadline_stops_a_server_run_incomplete(tmp_path: Path) -> None:
    """The embedding holds its thread past the deadline; once it returns, the run stops."""
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        yaml.safe_dump(
            {
                "reading": {"similarity": "slow_embed:gated", "theta_s": 0.5},
                "allow_code": True,
                "deadline_s": 0.2,
            }
        ),
        encoding="utf-8",
    )
    slow_embed.GATE.clear()
    slow_embed.GATE_STARTED.clear()
    rows = _fresh(tmp_path)
    async with client_for(_settings(tmp_path, policy)) as client:
        started = await client.post(
            "/v1/decide", params={"async": "true"}, json=rows, headers=auth("sub")
        )
        link = started.json()["links"]["run"]
        await _embedding_started()
        await asyncio.sleep(0.4)  # past the policy's deadline of 0.2 s
        slow_embed.GATE.set()
        doc = await _settled(client, link)
    assert doc["status"] == "incomplete", doc
    assert "deadline" in (doc["error"] or "")
    from dissensus.store import open_journal

    with open_journal(tmp_path / "serve.sqlite") as journal:
        assert journal.get(doc["run_id"], "run/finished") is None
        stopped = journal.get(doc["run_id"], "run/stopped/0")
        assert stopped is not None and stopped.payload["reason"] == "deadline"


async def test_a_deadline_answers_a_waiting_decide_with_503_naming_the_run_once(
    tmp_path: Path,
) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        yaml.safe_dump(
            {
                "reading": {"similarity": "slow_embed:gated", "theta_s": 0.5},
                "allow_code": True,
                "deadline_s": 0.2,
            }
        ),
        encoding="utf-8",
    )
    slow_embed.GATE.clear()
    slow_embed.GATE_STARTED.clear()
    async with client_for(_settings(tmp_path, policy)) as client:
        waiting = asyncio.create_task(
            client.post("/v1/decide", json=_fresh(tmp_path), headers=auth("sub"))
        )
        await _embedding_started()
        await asyncio.sleep(0.4)  # past the policy's deadline of 0.2 s
        slow_embed.GATE.set()
        got = await waiting
    assert got.status_code == 503, got.text
    body = got.json()
    run_id = body["run_id"]
    assert body["error"].startswith(f"run {run_id}: deadline of 0.2 s reached")
    assert f"run {run_id}: run {run_id}" not in body["error"]


async def test_an_interrupted_run_reports_its_whole_input_as_total(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a restart the server counts the run's input lines, not the records so far."""
    from dissensus.pipeline import batch
    from dissensus.pipeline.batch import execute_run, start_run
    from dissensus.store import Journal

    monkeypatch.setattr(batch, "BLOCK_CASES", 1)  # one case per batch: stopped after the first

    policy = tmp_path / "policy.yaml"
    policy.write_text(yaml.safe_dump({"reading": {"similarity": "tfidf"}}), encoding="utf-8")
    rows = [panel(f"t{i}", ["1", "2", "1"]) for i in range(5)]
    with Journal(tmp_path / "serve.sqlite") as journal:
        start_run(
            journal, None, policy, text="".join(json.dumps(r) + "\n" for r in rows), run_id="R"
        )
        records = execute_run(journal, "R")
        async for _ in records:
            break
        await records.aclose()  # type: ignore[attr-defined]
    async with client_for(_settings(tmp_path, policy)) as client:
        doc = (await client.get("/v1/runs/R", headers=auth("sub"))).json()
    assert doc["status"] == "incomplete"
    assert doc["total"] == 5 and doc["done"] < 5


async def test_runs_on_other_threads_share_the_warmed_backend_and_its_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server warms its backend (and the embedding cache's connection) on one thread;
    its runs decide on others."""
    monkeypatch.setenv("DISSENSUS_CACHE", str(tmp_path / "cache"))
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        yaml.safe_dump(
            {"reading": {"similarity": "slow_embed:counting", "theta_s": 0.5}, "allow_code": True}
        ),
        encoding="utf-8",
    )
    settings = _settings(tmp_path, policy)
    async with client_for(settings) as client:
        runner = client._transport.app.state.service.runner  # type: ignore[attr-defined]
        await asyncio.to_thread(runner.warm)  # as the server's start-up does
        for _ in range(2):
            response = await client.post("/v1/decide", json=_fresh(tmp_path), headers=auth("sub"))
            assert response.status_code == 200, response.text
            assert response.json()["status"] == "finished"


def test_a_bad_similarity_function_is_refused_before_serving_in_one_line(tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        'allow_code: true\nreading: {similarity: "no_such_module_xyz:fn"}\n', encoding="utf-8"
    )
    out = cli("serve", "--policy", policy, "--journal", tmp_path / "j.sqlite", "--port", "0")
    assert out.code == 2
    assert out.err.strip().splitlines() == [
        f"error: {policy}: field 'reading.similarity': cannot import module "
        "'no_such_module_xyz': ModuleNotFoundError: No module named 'no_such_module_xyz' "
        "(line 2)"
    ]


def test_a_configuration_error_at_start_up_ends_the_server_without_a_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from dissensus.errors import ConfigError
    from dissensus.serve import create_app
    from dissensus.serve.runs import Runner
    from dissensus.serve.server import listen, serve

    def refuse(self: Runner) -> None:
        raise ConfigError("the acceptance libraries are missing", field="acceptance.model")

    monkeypatch.setattr(Runner, "warm", refuse)
    app = create_app(ServeSettings(journal=str(tmp_path / "j.sqlite")))
    with pytest.raises(ConfigError, match="acceptance libraries are missing"):
        serve(app, app.state.service.runner, sock=listen("127.0.0.1", 0), shutdown_s=1)
    assert "Traceback" not in caplog.text and "startup failed" not in caplog.text


async def test_a_decide_stopped_by_the_server_before_any_write_is_a_retryable_503(
    tmp_path: Path,
) -> None:
    """Shutting down while a one-request run embeds (nothing journalled yet): 503 with
    Retry-After, since sending it again is safe; never a 500."""
    import httpx

    from dissensus.serve import create_app

    policy = tmp_path / "policy.yaml"
    policy.write_text(
        yaml.safe_dump(
            {"reading": {"similarity": "slow_embed:gated", "theta_s": 0.5}, "allow_code": True}
        ),
        encoding="utf-8",
    )
    slow_embed.GATE.clear()
    slow_embed.GATE_STARTED.clear()
    app = create_app(_settings(tmp_path, policy))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        waiting = asyncio.create_task(
            client.post("/v1/decide", json=_fresh(tmp_path)[0], headers=auth("sub"))
        )
        await _embedding_started()
        closing = asyncio.create_task(app.state.service.runner.close())
        await asyncio.sleep(0.1)
        slow_embed.GATE.set()
        got = await waiting
        await closing
    assert got.status_code == 503, got.text
    assert got.headers.get("retry-after")
    assert "before anything was journalled; submit it again" in got.json()["error"]


@pytest.mark.parametrize("where", ["meta", "extra"])
async def test_a_single_panel_nested_too_deep_is_a_400_and_journals_nothing(
    tmp_path: Path, where: str
) -> None:
    """One level deeper than a JSONL line may be, as a single panel: refused as the same
    panel in a list is (it was a 500 after journalling a run of one reject)."""
    row: dict[str, Any] = panel("deep", ["1", "2", "1"])
    deep: Any = 1
    for _ in range(63 if where == "meta" else 62):
        deep = [deep]
    if where == "meta":
        row["meta"] = {"d": deep}
    else:
        row["outputs"][0]["x"] = deep
    policy = tmp_path / "policy.yaml"
    policy.write_text(yaml.safe_dump({"reading": {"similarity": "tfidf"}}), encoding="utf-8")
    async with client_for(_settings(tmp_path, policy)) as client:
        for path in ("/v1/decide", "/v1/route"):
            for body in (row, [row]):
                got = await client.post(path, json=body, headers=auth("sub"))
                assert got.status_code == 400, (path, got.status_code, got.text)
                assert got.json()["field"] == "<depth>"
        runs = (await client.get("/v1/runs", headers=auth("sub"))).json()
    assert runs == []
    # The same line in a file: rejected for its depth by the CLI too.
    write_jsonl(tmp_path / "deep.jsonl", [row])
    done = cli("route", tmp_path / "deep.jsonl", "--json")
    assert "<depth>" in done.err
