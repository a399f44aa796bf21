"""One policy, one decision, through every door.

The same panels go through every door that decides — the CLI, :func:`decide`,
:func:`adecide` (concurrently, one journal), the service (synchronous and
``?async=true``), the LangGraph node, MCP ``decide``, and a run interrupted and resumed
(the Ray engine in ``make test-ray``) — under two policies:

(a) ``examples/llmbar-policy.yaml``: learned acceptance from a path relative to the
    policy, recorded re-asks, MiniLM;
(b) a policy with a guard calibration file and a scripted model for ``seek_context``
    (both relative to the policy), on panels that reach every route.

For every case the decision fields must be identical to the CLI's. The last test shows
the comparison has teeth: dropping one setting of either policy changes these fields on
these panels, so a door that dropped it would fail here.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from cli_helpers import cli
from dissensus.pipeline import Policy, RunSpec, adecide, decide
from dissensus.pipeline import batch as run_loop
from dissensus.pipeline.batch import execute_run, resume_run, start_run
from dissensus.serve import ServeSettings
from dissensus.store import Journal
from dissensus.types import Panel
from pipeline_cases import CRASH_ANSWERS, mixed_batch, write_jsonl, write_script
from serve_helpers import auth, client_for, write_tokens

ROOT = Path(__file__).resolve().parents[1]
LLMBAR_POLICY = ROOT / "examples" / "llmbar-policy.yaml"
N_LLMBAR = 10

FIELDS = ("id", "action", "decision", "auto", "basis", "reason")
ACCEPTANCE = ("score", "threshold", "file_sha256")

Records = dict[str, dict[str, Any]]


def decision_fields(record: dict[str, Any]) -> dict[str, Any]:
    """The fields every door must agree on."""
    out = {f: record[f] for f in FIELDS}
    acceptance = record.get("acceptance") or {}
    out.update({f"acceptance.{k}": acceptance.get(k) for k in ACCEPTANCE})
    return out


def by_id(records: list[dict[str, Any]]) -> Records:
    return {r["id"]: decision_fields(r) for r in records}


def mismatches(reference: Records, other: Records) -> list[str]:
    """Every case and field where ``other`` differs from ``reference``."""
    problems = [f"{pid}: missing" for pid in reference if pid not in other]
    problems += [f"{pid}: extra" for pid in other if pid not in reference]
    for pid, fields in reference.items():
        got = other.get(pid)
        if got is None:
            continue
        problems += [
            f"{pid}: {k} {fields[k]!r} != {got[k]!r}" for k in fields if fields[k] != got[k]
        ]
    return problems


# -- the two policies and their panels --------------------------------------------------


def guard_calibration_file(path: Path) -> Path:
    """A guard calibration (``dissensus calibrate``): 20 cases with evidence, 20 without."""
    from dissensus.guard import fit_reliability
    from dissensus.types import Vote, VoteCase

    def vote(agent: str, answer: str, source: str) -> Vote:
        present = source != "parametric"
        return Vote(agent=agent, answer=answer, evidence_source=source, evidence_present=present)

    sources = ["kb:policies", "web:faq", "kb:tickets"]
    cases = [
        VoteCase(
            id=str(i),
            votes=[
                vote(agent, "1" if (i + k) % 5 else "2", sources[k] if i < 20 else "parametric")
                for k, agent in enumerate(("a1", "a2", "a3"))
            ],
            gold="1",
        )
        for i in range(40)
    ]
    path.write_text(fit_reliability(cases).model_dump_json(), encoding="utf-8")
    return path


def scripted_policy(folder: Path) -> Path:
    """Policy (b): guard calibration and a scripted follow-up model, both relative paths."""
    folder.mkdir(parents=True, exist_ok=True)
    guard_calibration_file(folder / "guard.json")
    write_script(folder / "reask.yaml", CRASH_ANSWERS)
    data = {
        "reading": {"similarity": "tfidf", "theta_s": 0.3},
        "routing": {"convergent_disagreement_without_values": "seek_context"},
        "guard": {"calibration": "guard.json"},
        "acceptance": {"min_families": 2},
        "seek_context": {"model": "scripted:reask.yaml"},
        "concurrency": 2,
    }
    path = folder / "policy.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def scripted_panels() -> list[dict[str, Any]]:
    return [row for row in mixed_batch() if isinstance(row, dict)]


def llmbar_panels() -> list[dict[str, Any]]:
    with open(ROOT / "examples" / "llmbar-swap.jsonl", encoding="utf-8") as handle:
        return [json.loads(next(handle)) for _ in range(N_LLMBAR)]


# -- the doors --------------------------------------------------------------------------


def via_cli(policy: Path, rows: list[dict[str, Any]], tmp: Path) -> list[dict[str, Any]]:
    panels = write_jsonl(tmp / "cli-panels.jsonl", list(rows))
    # From another working directory: the policy's relative paths are the policy's.
    result = cli(
        "decide",
        panels,
        "--policy",
        policy,
        "--journal",
        tmp / "cli.sqlite",
        "--json",
        cwd=tmp,
    )
    assert result.code == 0, result.err
    return [json.loads(line) for line in result.out.splitlines() if line.strip()]


def via_decide(policy: Path, rows: list[dict[str, Any]], tmp: Path) -> list[dict[str, Any]]:
    with Journal(tmp / "decide.sqlite") as journal:
        return [
            decide(Panel.model_validate(r), policy, journal=journal).model_dump(mode="json")
            for r in rows
        ]


def via_adecide(policy: Path, rows: list[dict[str, Any]], tmp: Path) -> list[dict[str, Any]]:
    spec = RunSpec.from_policy(policy)

    async def go() -> list[dict[str, Any]]:
        with Journal(tmp / "adecide.sqlite") as journal:
            records = await asyncio.gather(
                *(adecide(Panel.model_validate(r), spec, journal=journal) for r in rows)
            )
        return [r.model_dump(mode="json") for r in records]

    return asyncio.run(go())


def _service(policy: Path, tmp: Path) -> ServeSettings:
    return ServeSettings(
        journal=str(tmp / "serve.sqlite"),
        policy=str(policy),
        tokens=str(write_tokens(tmp / "tokens.txt")),
        # The doors are compared by their records, not their speed: a loaded machine must
        # not turn a slow synchronous decide into a 504 "poll the run".
        request_timeout_s=900.0,
    )


def via_service(policy: Path, rows: list[dict[str, Any]], tmp: Path) -> list[dict[str, Any]]:
    async def go() -> list[dict[str, Any]]:
        async with client_for(_service(policy, tmp)) as client:
            response = await client.post("/v1/decide", json=rows, headers=auth("sub"))
            assert response.status_code == 200, response.text
            body = response.json()
            assert body["status"] == "finished", body
            records: list[dict[str, Any]] = body["records"]
            return records

    return asyncio.run(go())


def via_service_async(policy: Path, rows: list[dict[str, Any]], tmp: Path) -> list[dict[str, Any]]:
    async def go() -> list[dict[str, Any]]:
        async with client_for(_service(policy, tmp)) as client:
            started = await client.post(
                "/v1/decide", params={"async": "true"}, json=rows, headers=auth("sub")
            )
            assert started.status_code == 202, started.text
            link = started.json()["links"]["run"]
            # Generous: this compares records, not speed (a loaded CI machine is slow).
            deadline = time.monotonic() + 900
            while time.monotonic() < deadline:
                doc = (await client.get(link, headers=auth("sub"))).json()
                if doc["status"] != "running":
                    assert doc["status"] == "finished", doc
                    records: list[dict[str, Any]] = doc["records"]
                    return records
                await asyncio.sleep(0.05)
            raise AssertionError("the run did not finish")

    return asyncio.run(go())


def via_langgraph(policy: Path, rows: list[dict[str, Any]], tmp: Path) -> list[dict[str, Any]]:
    from typing import TypedDict

    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.graph import END, START, StateGraph

    from dissensus.integrations.langgraph import decision_node

    class State(TypedDict, total=False):
        panel: dict[str, Any]
        dissensus: dict[str, Any]

    graph = StateGraph(State)
    node = decision_node(
        policy=str(policy),
        journal=tmp / "langgraph.sqlite",
        panel=lambda state: state["panel"],
        on_escalate="route",
    )
    graph.add_node("decide", node)
    graph.add_edge(START, "decide")
    graph.add_edge("decide", END)
    app = graph.compile(checkpointer=InMemorySaver())
    out = []
    for i, row in enumerate(rows):
        state = app.invoke({"panel": row}, {"configurable": {"thread_id": f"t{i}"}})
        out.append(state["dissensus"])
    return out


def via_mcp(policy: Path, rows: list[dict[str, Any]], tmp: Path) -> list[dict[str, Any]]:
    from mcp.client import Client

    from dissensus.integrations.mcp import build_server

    server = build_server(journal=str(tmp / "mcp.sqlite"), policy=str(policy))

    async def go() -> list[dict[str, Any]]:
        async with Client(server) as client:
            result = await client.call_tool("decide", {"panels": rows})
        assert not result.is_error, result
        data = result.structured_content
        assert data is not None
        records: list[dict[str, Any]] = data.get("result", data)
        return records

    return asyncio.run(go())


def via_resume(policy: Path, rows: list[dict[str, Any]], tmp: Path) -> list[dict[str, Any]]:
    """A run stopped after two records (cases in flight cancelled), then resumed."""
    panels = write_jsonl(tmp / "resume-panels.jsonl", list(rows))

    async def first(journal: Journal) -> int:
        seen = 0
        records = execute_run(journal, "R")
        async for _ in records:
            seen += 1
            if seen == 2:
                break
        await records.aclose()  # type: ignore[attr-defined]
        return seen

    async def rest(journal: Journal) -> list[dict[str, Any]]:
        return [r.model_dump(mode="json") async for r in resume_run(journal, "R")]

    # One case per block: the last block commits with run.finished, so a run of one
    # block is finished before its records are handed out.
    block_cases = run_loop.BLOCK_CASES
    run_loop.BLOCK_CASES = 1
    try:
        with Journal(tmp / "resume.sqlite") as journal:
            start_run(journal, str(panels), policy, run_id="R")
            assert asyncio.run(first(journal)) == 2
            assert journal.get("R", "run/finished") is None  # really interrupted
            return asyncio.run(rest(journal))
    finally:
        run_loop.BLOCK_CASES = block_cases


DOORS: dict[str, Callable[[Path, list[dict[str, Any]], Path], list[dict[str, Any]]]] = {
    "decide()": via_decide,
    "adecide() concurrently": via_adecide,
    "service": via_service,
    "service ?async=true": via_service_async,
    "langgraph node": via_langgraph,
    "mcp decide": via_mcp,
    "interrupted and resumed": via_resume,
}


def _check_every_door(policy: Path, rows: list[dict[str, Any]], tmp: Path) -> Records:
    reference = by_id(via_cli(policy, rows, tmp))
    assert len(reference) == len(rows)
    failures = {}
    for name, door in DOORS.items():
        folder = tmp / name.replace(" ", "_").replace("?", "").replace("(", "").replace(")", "")
        folder.mkdir()
        problems = mismatches(reference, by_id(door(policy, rows, folder)))
        if problems:
            failures[name] = problems
    assert not failures, json.dumps(failures, indent=1)
    return reference


@pytest.fixture(autouse=True)
def _no_model_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DISSENSUS_MODEL", raising=False)


def test_the_llmbar_policy_decides_alike_through_every_door(tmp_path: Path) -> None:
    reference = _check_every_door(LLMBAR_POLICY, llmbar_panels(), tmp_path)
    learned = [r for r in reference.values() if r["acceptance.file_sha256"] is not None]
    assert len(learned) == len(reference)  # learned acceptance judged every case
    assert {r["action"] for r in reference.values()} >= {"auto_explain", "escalate"}


def test_a_guard_calibration_and_a_scripted_model_decide_alike_through_every_door(
    tmp_path: Path,
) -> None:
    policy = scripted_policy(tmp_path / "policy")
    reference = _check_every_door(policy, scripted_panels(), tmp_path)
    bases = {r["basis"] for r in reference.values()}
    assert {"guard", "concord_certificate"} <= bases  # the routes these panels exist for
    assert any("live re-ask" in (r["reason"] or "") for r in reference.values())


def test_dropping_any_setting_changes_the_compared_fields(tmp_path: Path) -> None:
    """A door that dropped one of these settings would fail the tests above."""
    rows = llmbar_panels()
    full = by_id(via_decide(LLMBAR_POLICY, rows, tmp_path))
    spec = RunSpec.from_policy(LLMBAR_POLICY)
    without_acceptance = spec.model_copy(update={"acceptance": None})
    dropped = by_id(
        [decide(Panel.model_validate(r), without_acceptance).model_dump(mode="json") for r in rows]
    )
    assert mismatches(full, dropped)

    policy = scripted_policy(tmp_path / "policy")
    scripted = scripted_panels()
    full = by_id(via_decide(policy, scripted, tmp_path))
    spec = RunSpec.from_policy(policy)
    for name, changed in {
        "guard calibration": spec.model_copy(update={"guard_calibration": None}),
        "model": spec.model_copy(update={"model": None}),
    }.items():
        got = by_id(
            [decide(Panel.model_validate(r), changed).model_dump(mode="json") for r in scripted]
        )
        assert mismatches(full, got), name


def test_a_policy_object_resolves_relative_paths_under_its_folder(tmp_path: Path) -> None:
    """``decide(panel, Policy)`` with ``policy_dir``: the same files, the same decisions."""
    policy = scripted_policy(tmp_path / "policy")
    data = yaml.safe_load(policy.read_text(encoding="utf-8"))
    rows = scripted_panels()
    reference = by_id(via_decide(policy, rows, tmp_path))
    got = by_id(
        [
            decide(
                Panel.model_validate(r),
                Policy.model_validate(data),
                policy_dir=policy.parent,
            ).model_dump(mode="json")
            for r in rows
        ]
    )
    assert not mismatches(reference, got)


@pytest.mark.skipif(
    not os.environ.get("DISSENSUS_TEST_RAY"),
    reason="starts a local Ray instance (slow): set DISSENSUS_TEST_RAY=1 to run",
)
@pytest.mark.parametrize("which", ["llmbar", "scripted"])
def test_the_ray_engine_decides_alike(which: str, tmp_path: Path) -> None:
    from dissensus.engines.ray import RayOptions, decide_ray

    if which == "llmbar":
        policy, rows = LLMBAR_POLICY, llmbar_panels()
    else:
        policy, rows = scripted_policy(tmp_path / "policy"), scripted_panels()
    reference = by_id(via_cli(policy, rows, tmp_path))
    panels = write_jsonl(tmp_path / "ray-panels.jsonl", list(rows))

    async def go(journal: Journal) -> list[dict[str, Any]]:
        options = RayOptions(workers=2, lines_per_block=3)
        return [r.model_dump(mode="json") async for r in decide_ray(journal, "R", options=options)]

    with Journal(tmp_path / "ray.sqlite") as journal:
        start_run(journal, str(panels), policy, run_id="R")
        got = by_id(asyncio.run(go(journal)))
    assert not mismatches(reference, got)
