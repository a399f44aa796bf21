"""The one-panel doors outside the service (LangGraph node, MCP ``decide``, Inspect reducer,
the chat door as a library) keep a shift watch: fed shifted cases one run at a time, they
journal an ``acceptance.shift`` flag, and under ``on_shift: escalate`` the cases after it
are held, as ``dissensus decide`` holds them on the same journal."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cli_helpers import cli
from dissensus.pipeline.shift import SHIFT_EVENT, latest_flag
from dissensus.pipeline.shift_watch import EVERY, ShiftWatch
from dissensus.pipeline.spec import RunSpec
from dissensus.store import Journal
from serve_helpers import heap_frozen
from shift_helpers import build_world


@pytest.fixture(scope="module", autouse=True)
def _frozen() -> Iterator[None]:
    yield from heap_frozen()


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_world(tmp_path_factory.mktemp("doors"))


def _rows(path: Path, n: int, skip: int = 0) -> list[dict[str, Any]]:
    lines = path.read_text(encoding="utf-8").splitlines()[skip : skip + n]
    return [json.loads(line) for line in lines]


def _held(record: dict[str, Any]) -> bool:
    return record["basis"] != "learned" and "acceptance held" in record["reason"]


def _flag(journal_path: Path, world: Path) -> dict[str, Any] | None:
    spec = RunSpec.from_policy(world / "hold.yaml")
    with Journal(journal_path) as journal:
        sha = spec.acceptance["sha256"] if spec.acceptance else None
        flag = latest_flag(journal, sha)
        return None if flag is None else dict(flag)


def _cli_records(world: Path, journal_path: Path, rows: list[dict[str, Any]]) -> list[Any]:
    """``dissensus decide`` of ``rows`` as one batch on the same journal: its records."""
    batch = journal_path.parent / "batch.jsonl"
    batch.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    done = cli(
        "decide", batch, "--policy", world / "hold.yaml", "--journal", journal_path, "--json"
    )
    assert done.code == 0, done.err
    return [json.loads(line) for line in done.out.splitlines() if line.strip()]


def _same_as_decide(world: Path, journal_path: Path, records: list[dict[str, Any]]) -> None:
    """The door's records after the flag are held, and ``dissensus decide`` of the same
    panels on the same journal gives the same actions and decisions."""
    rows = _rows(world / "same.jsonl", len(records), skip=30)
    assert records and all(_held(r) for r in records), records
    batch = _cli_records(world, journal_path, rows)
    assert all(_held(r) for r in batch)
    assert [(r["action"], r["decision"]) for r in batch] == [
        (r["action"], r["decision"]) for r in records
    ]


def test_the_langgraph_node_flags_shifted_cases_and_holds_the_rest(
    world: Path, tmp_path: Path
) -> None:
    pytest.importorskip("langgraph")
    from dissensus.integrations.langgraph import decision_node

    journal_path = tmp_path / "j.sqlite"
    node = decision_node(
        policy=world / "hold.yaml",
        journal=journal_path,
        panel=lambda s: s["panel"],
        on_escalate="route",
        shift_every=10,
    )
    assert node.shift_watch.every == 10
    assert (
        decision_node(
            policy=world / "hold.yaml", journal=journal_path, panel=dict
        ).shift_watch.every
        == EVERY
    )

    def decide(rows: list[dict[str, Any]], prefix: str) -> list[dict[str, Any]]:
        out = []
        for i, row in enumerate(rows):
            command = node({"panel": row}, {"configurable": {"thread_id": f"{prefix}{i}"}})
            out.append(command.update["dissensus"])
        return out

    shifted = decide(_rows(world / "shifted.jsonl", 30), "s")
    flag = _flag(journal_path, world)
    assert flag is not None and flag["shifted"] and flag["across_runs"] >= 10, flag
    # Before the flag nothing held; after it, every case held.
    assert not _held(shifted[0]) and _held(shifted[-1])
    _same_as_decide(world, journal_path, decide(_rows(world / "same.jsonl", 8, skip=30), "t"))


def test_a_node_with_shift_every_zero_never_checks(world: Path, tmp_path: Path) -> None:
    pytest.importorskip("langgraph")
    from dissensus.integrations.langgraph import decision_node

    journal_path = tmp_path / "j.sqlite"
    node = decision_node(
        policy=world / "hold.yaml",
        journal=journal_path,
        panel=lambda s: s["panel"],
        on_escalate="route",
        shift_every=0,
    )
    for i, row in enumerate(_rows(world / "shifted.jsonl", 25)):
        node({"panel": row}, {"configurable": {"thread_id": f"z{i}"}})
    with Journal(journal_path) as journal:
        assert not list(journal.events_of_type(SHIFT_EVENT))


def test_the_mcp_decide_tool_flags_shifted_cases_and_holds_the_rest(
    world: Path, tmp_path: Path
) -> None:
    pytest.importorskip("mcp")
    from mcp.client import Client

    from dissensus.integrations.mcp import build_server

    journal_path = tmp_path / "j.sqlite"
    built = build_server(
        root=world, journal=str(journal_path), policy=str(world / "hold.yaml"), shift_every=10
    )

    async def go(batches: list[list[dict[str, Any]]]) -> list[list[dict[str, Any]]]:
        from mcp_helpers import tool_data

        async with Client(built) as client:
            return [
                tool_data(await client.call_tool("decide", {"panels": panels}))
                for panels in batches
            ]

    # One call per panel, as an agent calls the tool, then one call of several.
    rows = _rows(world / "shifted.jsonl", 30)
    answers = asyncio.run(
        asyncio.wait_for(go([[r] for r in rows] + [_rows(world / "same.jsonl", 8, skip=30)]), 240)
    )
    flag = _flag(journal_path, world)
    assert flag is not None and flag["shifted"], flag
    assert not _held(answers[0][0]) and _held(answers[29][0])
    _same_as_decide(world, journal_path, answers[-1])


def _scores(row: dict[str, Any]) -> list[Any]:
    from inspect_ai.scorer import Score

    return [
        Score(
            value=o["decision"],
            explanation=o["reasoning"],
            metadata={"grader": o["agent"], "family": o.get("family")},
        )
        for o in row["outputs"]
    ]


def test_the_inspect_reducer_flags_shifted_cases_and_holds_the_rest(
    world: Path, tmp_path: Path
) -> None:
    pytest.importorskip("inspect_ai")
    from dissensus.integrations.inspect import dissensus_reducer

    journal_path = tmp_path / "j.sqlite"
    reduce = dissensus_reducer(
        policy=str(world / "hold.yaml"), journal=str(journal_path), shift_every=10
    )
    scores = [reduce(_scores(row)) for row in _rows(world / "shifted.jsonl", 30)]
    flag = _flag(journal_path, world)
    assert flag is not None and flag["shifted"], flag
    first, last = scores[0].metadata or {}, scores[-1].metadata or {}
    assert "acceptance held" not in first["reason"] and "acceptance held" in last["reason"]
    later = [reduce(_scores(row)).metadata or {} for row in _rows(world / "same.jsonl", 8, skip=30)]
    assert all("acceptance held" in m["reason"] for m in later)


def test_the_chat_door_as_a_library_flags_shifted_cases_and_holds_the_rest(
    world: Path, tmp_path: Path
) -> None:
    """The chat door's decision path (what follows the fan-out) steps its watch after
    each case; a request through ``complete`` takes that path."""
    from dissensus.panels import PanelChat
    from dissensus.pipeline import new_run_id
    from dissensus.types import Panel

    journal_path = tmp_path / "j.sqlite"
    with Journal(journal_path) as journal:
        chat = PanelChat(RunSpec.from_policy(world / "hold.yaml"), journal=journal, shift_every=10)
        try:
            assert chat.shift_watch.enabled

            def decide(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
                return [
                    chat._decider.submit(
                        chat._decide_watched(Panel.model_validate(r), chat.spec, new_run_id())
                    )
                    .result()
                    .model_dump(mode="json")
                    for r in rows
                ]

            shifted = decide(_rows(world / "shifted.jsonl", 30))
            assert not _held(shifted[0]) and _held(shifted[-1])
            later = decide(_rows(world / "same.jsonl", 8, skip=30))
        finally:
            chat.close()
    flag = _flag(journal_path, world)
    assert flag is not None and flag["shifted"], flag
    _same_as_decide(world, journal_path, later)


def test_a_chat_request_steps_the_door_watch_and_the_served_door_has_none(
    world: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from chat_helpers import escalated_chat_case

    stepped: list[object] = []
    monkeypatch.setattr(ShiftWatch, "enabled", property(lambda self: self.every > 0))
    monkeypatch.setattr(ShiftWatch, "step_quietly", lambda self, journal=None: stepped.append(1))
    escalated_chat_case(tmp_path / "j.sqlite", [{"role": "user", "content": "3 + 4?"}])
    assert stepped == [1]

    from dissensus.serve import ServeSettings, create_app

    app = create_app(
        ServeSettings(journal=str(tmp_path / "s.sqlite"), policy=str(world / "hold.yaml"))
    )
    assert app.state.chat.shift_watch.every == 0
    assert app.state.service.shift_watch.every == EVERY


def test_shift_every_must_be_a_count(world: Path) -> None:
    from dissensus.errors import ConfigError

    spec = RunSpec.from_policy(world / "hold.yaml")
    for bad in (-1, True, 2.5, "10"):
        with pytest.raises(ConfigError) as caught:
            ShiftWatch(spec, every=bad)  # type: ignore[arg-type]
        assert caught.value.field == "shift_every"
