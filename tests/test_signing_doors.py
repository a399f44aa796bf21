"""Every door seals its runs as the CLI does: with ``DISSENSUS_SIGNING_KEY`` set, a run
decided through the library, the LangGraph node, the Inspect reducer or the MCP server
ends with a ``run.sealed`` event that ``dissensus runs verify --public-key`` accepts;
unset, nothing is sealed; set but unusable, the door is refused when it is made, naming
the variable and never the key. A :class:`Journal` the caller made keeps its own signer.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from cli_helpers import cli
from dissensus.errors import ConfigError
from dissensus.pipeline import adecide, decide
from dissensus.signing import SIGNING_KEY_ENV, Signer
from dissensus.store import SEAL_TYPE, Journal, open_journal
from pipeline_cases import panel, write_jsonl

KEY = Signer.generate()
POLICY = {"reading": {"similarity": "tfidf", "theta_s": 0.3}}
BAD_KEY = "-----BEGIN PRIVATE KEY-----\nnot-a-key-at-all\n-----END PRIVATE KEY-----"


def _agree(pid: str = "p1") -> dict[str, Any]:
    return panel(pid, ["1", "1", "1"], evidence=[[{"source": f"kb:{i}"}] for i in range(3)],
                 reasoning=["Option 1 states the refund window of 30 days."] * 3)  # fmt: skip


@pytest.fixture
def pub(tmp_path: Path) -> Path:
    path = tmp_path / "pub.pem"
    path.write_text(KEY.public_key.pem(), encoding="utf-8")
    return path


@pytest.fixture
def signed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SIGNING_KEY_ENV, KEY.private_pem())


@pytest.fixture
def unsigned(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(SIGNING_KEY_ENV, raising=False)


def _runs(path: Path) -> list[str]:
    with Journal(path) as journal:
        return [r.run_id for r in journal.runs()]


def _assert_sealed(path: Path, run_id: str, pub: Path) -> dict[str, Any]:
    """The run's last event is a seal that ``dissensus runs verify`` accepts; its payload."""
    with Journal(path) as journal:
        last = list(journal.events(run_id))[-1]
        assert last.type == SEAL_TYPE
        assert journal.verify(run_id, public_key=KEY.public_key).signature == "signed"
        payload = dict(last.payload)
    got = cli("runs", "verify", run_id, "--journal", str(path), "--public-key", str(pub), "--json")
    assert got.code == 0, got.err
    assert json.loads(got.out)["signature"] == "signed"
    return payload


def _assert_unsealed(path: Path) -> None:
    with Journal(path) as journal:
        for run in journal.runs():
            assert not list(journal.events(run.run_id, type=SEAL_TYPE))


def _cli_seal(tmp_path: Path, pub: Path) -> dict[str, Any]:
    """The seal ``dissensus decide`` writes for the same panel, with the same key."""
    source = write_jsonl(tmp_path / "one.jsonl", [_agree()])
    policy = tmp_path / "cli-policy.json"
    policy.write_text(json.dumps(POLICY), encoding="utf-8")
    journal = tmp_path / "cli.sqlite"
    got = cli("decide", str(source), "--policy", str(policy), "--journal", str(journal),
              "--run-id", "C", "--json", env={SIGNING_KEY_ENV: KEY.private_pem()})  # fmt: skip
    assert got.code == 0, got.err
    return _assert_sealed(journal, "C", pub)


# -- the library ---------------------------------------------------------------------------


@pytest.mark.usefixtures("signed")
def test_the_library_seals_a_journal_it_opens_as_the_cli_does(tmp_path: Path, pub: Path) -> None:
    path = tmp_path / "lib.sqlite"
    decide(_agree(), POLICY, journal=str(path), run_id="L")
    asyncio.run(adecide(_agree("p2"), POLICY, journal=path, run_id="A"))
    seal = _assert_sealed(path, "L", pub)
    _assert_sealed(path, "A", pub)
    cli_seal = _cli_seal(tmp_path, pub)
    assert set(seal) == set(cli_seal) == {"run", "n_events", "head", "signature"}
    assert seal["n_events"] == cli_seal["n_events"]  # the same run, event for event
    assert seal["signature"]["key_id"] == cli_seal["signature"]["key_id"]


@pytest.mark.usefixtures("unsigned")
def test_the_library_seals_nothing_without_the_key(tmp_path: Path) -> None:
    path = tmp_path / "lib.sqlite"
    decide(_agree(), POLICY, journal=str(path), run_id="L")
    assert _runs(path) == ["L"]
    _assert_unsealed(path)


@pytest.mark.usefixtures("signed")
def test_a_journal_object_keeps_its_own_signer(tmp_path: Path, pub: Path) -> None:
    path = tmp_path / "own.sqlite"
    with Journal(path) as journal:  # made without a signer: the caller's choice stands
        decide(_agree(), POLICY, journal=journal, run_id="J")
    _assert_unsealed(path)
    with open_journal(path) as journal:  # the door's way: the key of the environment
        decide(_agree("p2"), POLICY, journal=journal, run_id="K")
    _assert_sealed(path, "K", pub)
    with open_journal(path, signer=None) as journal:  # None: unsigned, whatever is set
        assert journal.signer is None


@pytest.mark.parametrize("value", [BAD_KEY, "   "], ids=["garbage", "blank"])
def test_an_unusable_key_is_a_configuration_error_naming_the_variable(
    value: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(SIGNING_KEY_ENV, value)
    path = tmp_path / "lib.sqlite"
    with pytest.raises(ConfigError, match=SIGNING_KEY_ENV) as caught:
        decide(_agree(), POLICY, journal=str(path))
    assert "not-a-key-at-all" not in str(caught.value)
    assert not path.exists()  # refused before the journal is opened
    with pytest.raises(ConfigError, match=SIGNING_KEY_ENV):
        decide(_agree(), POLICY)  # a throw-away journal too: never a silent unsigned run


# -- LangGraph -----------------------------------------------------------------------------


def _graph_config(thread: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread, "reviewer": "kim@example.org"}}


@pytest.mark.usefixtures("signed")
def test_the_langgraph_node_seals_what_it_decides_and_resolves(tmp_path: Path, pub: Path) -> None:
    pytest.importorskip("langgraph")
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.types import Command

    from integrations_graph import build

    path = tmp_path / "j.sqlite"
    app = build(InMemorySaver(), str(path))
    app.invoke({"case": "c1", "kind": "agree"}, _graph_config("t-auto"))
    (auto,) = _runs(path)
    _assert_sealed(path, auto, pub)

    config = _graph_config("t-esc")
    (pending,) = app.invoke({"case": "c2", "kind": "conflict"}, config)["__interrupt__"]
    value = pending.value
    answer = {
        "decision": "2",
        "note": "the policy says 2",
        "content_sha256": value["content_sha256"],
    }
    app.invoke(Command(resume=answer), config)
    (escalated,) = set(_runs(path)) - {auto}
    with Journal(path) as journal:
        types = [e.type for e in journal.events(escalated)]
    assert types[-3:] == ["review.resolved", "case.resolved", SEAL_TYPE]  # the resolution too
    _assert_sealed(path, escalated, pub)


@pytest.mark.usefixtures("unsigned")
def test_the_langgraph_node_seals_nothing_without_the_key(tmp_path: Path) -> None:
    pytest.importorskip("langgraph")
    from langgraph.checkpoint.memory import InMemorySaver

    from integrations_graph import build

    path = tmp_path / "j.sqlite"
    build(InMemorySaver(), str(path)).invoke({"case": "c1", "kind": "agree"}, _graph_config("t"))
    assert len(_runs(path)) == 1
    _assert_unsealed(path)


def test_the_langgraph_node_is_refused_when_made_with_an_unusable_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("langgraph")
    from dissensus.integrations.langgraph import decision_node

    monkeypatch.setenv(SIGNING_KEY_ENV, BAD_KEY)
    with pytest.raises(ConfigError, match=SIGNING_KEY_ENV) as caught:
        decision_node(policy=POLICY, journal=str(tmp_path / "j.sqlite"), panel=lambda s: s)
    assert "not-a-key-at-all" not in str(caught.value)


# -- Inspect -------------------------------------------------------------------------------


def _reduce(journal: Path | None) -> Any:
    from inspect_ai.scorer import Score

    from dissensus.integrations.inspect import dissensus_reducer

    reducer = dissensus_reducer(
        graders=["g1", "g2", "g3"],
        policy=POLICY,
        journal=None if journal is None else str(journal),
        shift_every=0,
    )
    scores = [
        Score(value="C", explanation="right", metadata={"grader": g, "evidence": [{"source": g}]})
        for g in ("g1", "g2", "g3")
    ]
    return reducer(scores)


@pytest.mark.usefixtures("signed")
def test_the_inspect_reducer_seals_each_reduction(tmp_path: Path, pub: Path) -> None:
    pytest.importorskip("inspect_ai")
    path = tmp_path / "j.sqlite"
    assert _reduce(path).value == "C"
    (run,) = _runs(path)
    _assert_sealed(path, run, pub)


@pytest.mark.usefixtures("unsigned")
def test_the_inspect_reducer_seals_nothing_without_the_key(tmp_path: Path) -> None:
    pytest.importorskip("inspect_ai")
    path = tmp_path / "j.sqlite"
    assert _reduce(path).value == "C"
    assert len(_runs(path)) == 1
    _assert_unsealed(path)


@pytest.mark.parametrize("in_memory", [False, True], ids=["path", "memory"])
def test_the_inspect_reducer_is_refused_when_made_with_an_unusable_key(
    in_memory: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("inspect_ai")
    from dissensus.integrations.inspect import dissensus_reducer

    monkeypatch.setenv(SIGNING_KEY_ENV, BAD_KEY)
    journal = None if in_memory else str(tmp_path / "j.sqlite")
    with pytest.raises(ConfigError, match=SIGNING_KEY_ENV) as caught:
        dissensus_reducer(graders=["g1", "g2", "g3"], policy=POLICY, journal=journal)
    assert "not-a-key-at-all" not in str(caught.value)


# -- MCP -----------------------------------------------------------------------------------


def _mcp(tmp_path: Path, calls: list[tuple[str, dict[str, Any]]]) -> list[Any]:
    from mcp.client import Client

    from dissensus.integrations.mcp import build_server

    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps(POLICY), encoding="utf-8")
    built = build_server(journal=str(tmp_path / "j.sqlite"), policy=str(policy), root=tmp_path)

    async def go() -> list[Any]:
        async with Client(built) as client:
            return [await client.call_tool(name, args) for name, args in calls]

    return asyncio.run(asyncio.wait_for(go(), timeout=120))


@pytest.mark.usefixtures("signed")
def test_the_mcp_decide_tool_seals_its_runs(tmp_path: Path, pub: Path) -> None:
    pytest.importorskip("mcp")
    (decided,) = _mcp(tmp_path, [("decide", {"panels": [_agree()]})])
    assert not decided.is_error
    path = tmp_path / "j.sqlite"
    (run,) = _runs(path)
    _assert_sealed(path, run, pub)


@pytest.mark.usefixtures("unsigned")
def test_the_mcp_decide_tool_seals_nothing_without_the_key(tmp_path: Path) -> None:
    pytest.importorskip("mcp")
    (decided,) = _mcp(tmp_path, [("decide", {"panels": [_agree()]})])
    assert not decided.is_error
    path = tmp_path / "j.sqlite"
    assert len(_runs(path)) == 1
    _assert_unsealed(path)


def test_the_mcp_server_is_refused_when_built_with_an_unusable_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("mcp")
    from dissensus.integrations.mcp import build_server

    monkeypatch.setenv(SIGNING_KEY_ENV, BAD_KEY)
    with pytest.raises(ConfigError, match=SIGNING_KEY_ENV) as caught:
        build_server(journal=str(tmp_path / "j.sqlite"), root=tmp_path)
    assert "not-a-key-at-all" not in str(caught.value)
