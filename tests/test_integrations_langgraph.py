"""The LangGraph decision node with the real langgraph: decide, route, interrupt, resume.

langgraph is imported by the tests, not at collection (every test worker would pay it).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from dissensus.integrations._review import content_sha256
from dissensus.pipeline.review import find_item, list_items, resolve
from dissensus.store import Journal
from integrations_graph import build
from integrations_graph import main as graph_main

if TYPE_CHECKING:
    from langgraph.types import Command

GRAPH = Path(__file__).with_name("integrations_graph.py")


@pytest.fixture(autouse=True, scope="module")
def _langgraph() -> Iterator[None]:
    pytest.importorskip("langgraph")
    pytest.importorskip("langgraph.checkpoint.sqlite")
    yield


def _memory() -> Any:
    from langgraph.checkpoint.memory import InMemorySaver

    return InMemorySaver()


def _resume(answer: Any) -> Command[Any]:
    from langgraph.types import Command

    return Command(resume=answer)


def _config(thread: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread, "reviewer": "kim@example.org"}}


def _answer(
    value: dict[str, Any], decision: str = "2", note: str = "the policy says 2"
) -> dict[str, str]:
    return {"decision": decision, "note": note, "content_sha256": value["content_sha256"]}


def test_agreement_backed_by_evidence_is_decided_and_routed(tmp_path: Path) -> None:
    app = build(_memory(), str(tmp_path / "j.sqlite"))
    out = app.invoke({"case": "c1", "kind": "agree"}, _config("t-auto"))
    record = out["dissensus"]
    assert (record["action"], record["decision"], record["auto"], record["basis"]) == (
        "auto",
        "1",
        True,
        "guard",
    )
    assert out.get("shipped") is True and "triaged" not in out
    assert "__interrupt__" not in out
    with Journal(tmp_path / "j.sqlite") as journal:
        assert list(list_items(journal)) == []
        run = journal.runs()[0].run_id
        assert journal.verify(run).ok


def test_escalation_interrupts_and_resumes_through_the_review_path(tmp_path: Path) -> None:
    path = tmp_path / "j.sqlite"
    app = build(_memory(), str(path))
    config = _config("t-esc")
    out = app.invoke({"case": "c2", "kind": "conflict"}, config)
    (pending,) = out["__interrupt__"]
    value = pending.value
    assert (
        value["options"] == ["1", "2"]
        and value["question"] == "Which reply states the refund policy?"
    )
    assert [(p["agent"], p["decision"]) for p in value["positions"]] == [("a", "1"), ("b", "2")]
    assert all(p["reasoning"] for p in value["positions"])
    with Journal(path) as journal:
        item = find_item(journal, value["review_id"]).item
        assert value["content_sha256"] == content_sha256(item)

    out = app.invoke(_resume(_answer(value)), config)
    record = out["dissensus"]
    assert (record["action"], record["decision"], record["auto"], record["basis"]) == (
        "human",
        "2",
        False,
        "human",
    )
    assert record["resolution"] == {
        "decision": "2",
        "note": "the policy says 2",
        "reviewer": "kim@example.org",
    }
    assert out.get("shipped") is True
    with Journal(path) as journal:
        status = find_item(journal, value["review_id"])
        assert status.resolution is not None and status.resolution.reviewer == "kim@example.org"
        events = [e.type for e in journal.events(status.item.run_id)]
        assert events[-2:] == ["review.resolved", "case.resolved"]
        assert journal.verify(status.item.run_id).ok


@pytest.mark.parametrize(
    ("answer", "says"),
    [
        ({"decision": "2", "note": "x"}, "content_sha256"),
        ({"decision": "", "note": "x", "content_sha256": "0" * 64}, "decision"),
        ({"decision": "2", "note": "x", "content_sha256": "0" * 64}, "changed since it was shown"),
    ],
)
def test_a_refused_answer_interrupts_again_with_the_reason(
    tmp_path: Path, answer: dict[str, str], says: str
) -> None:
    path = tmp_path / "j.sqlite"
    app = build(_memory(), str(path))
    config = _config("t-bad")
    first = app.invoke({"case": "c3", "kind": "conflict"}, config)["__interrupt__"][0]
    again = app.invoke(_resume(answer), config)["__interrupt__"][0]
    assert again.id != first.id and says in again.value["error"]
    with Journal(path) as journal:
        assert find_item(journal, first.value["review_id"]).resolution is None
    out = app.invoke(_resume(_answer(again.value, "1", "fine")), config)
    assert (out["dissensus"]["action"], out["dissensus"]["decision"]) == ("human", "1")


def test_route_mode_leaves_the_item_in_the_queue(tmp_path: Path) -> None:
    from langgraph.graph import END, START, StateGraph

    from dissensus.integrations.langgraph import decision_node
    from integrations_graph import POLICY, State, _agent, _panel

    path = tmp_path / "j.sqlite"
    graph = StateGraph(State)
    graph.add_node("a", _agent("a", "kb:1"))
    graph.add_node("b", _agent("b", "kb:2"))
    node = decision_node(
        policy=POLICY,
        journal=str(path),
        panel=_panel,
        on_escalate="route",
        goto={"escalate": "triage"},
    )
    graph.add_node("decide", node)
    graph.add_node("triage", lambda s: {"triaged": True})
    graph.add_edge(START, "a")
    graph.add_edge(START, "b")
    graph.add_edge(["a", "b"], "decide")
    graph.add_edge("triage", END)
    out = graph.compile(checkpointer=_memory()).invoke(
        {"case": "c4", "kind": "conflict"}, _config("t-route")
    )
    assert out["dissensus"]["action"] == "escalate" and out.get("triaged") is True
    with Journal(path) as journal:
        assert [s.item.review_id for s in list_items(journal)] == [out["dissensus"]["review_id"]]


def test_an_item_resolved_elsewhere_stands(tmp_path: Path) -> None:
    path = tmp_path / "j.sqlite"
    app = build(_memory(), str(path))
    config = _config("t-else")
    value = app.invoke({"case": "c5", "kind": "conflict"}, config)["__interrupt__"][0].value
    with Journal(path) as journal:
        resolve(journal, value["review_id"], decision="1", note="from the CLI", reviewer="lee")
    out = app.invoke(_resume(_answer(value)), config)
    assert out["dissensus"]["resolution"] == {
        "decision": "1",
        "note": "from the CLI",
        "reviewer": "lee",
    }


def test_a_resume_naming_no_reviewer_is_refused_while_someone_holds_a_claim(
    tmp_path: Path,
) -> None:
    """A resume whose config names no reviewer holds no claim: another reviewer's live
    claim refuses it (the node interrupts again, naming the holder); once the claim is
    released, the unnamed resolution is journalled."""
    from dissensus.pipeline.review import claim

    path = tmp_path / "j.sqlite"
    app = build(_memory(), str(path))
    config = {"configurable": {"thread_id": "t-claim"}}  # no reviewer
    value = app.invoke({"case": "c6", "kind": "conflict"}, config)["__interrupt__"][0].value
    with Journal(path) as journal:
        claim(journal, value["review_id"], "bob", ttl=60)
    again = app.invoke(_resume(_answer(value)), config)["__interrupt__"][0]
    assert "claimed by bob" in again.value["error"]
    with Journal(path) as journal:
        assert find_item(journal, value["review_id"]).resolution is None
        assert journal.release_claim(value["review_id"], "bob")
    # A new answer: the refused one sent again is that answer, never tried again.
    out = app.invoke(_resume(_answer(again.value, note="bob let go")), config)
    assert out["dissensus"]["resolution"]["reviewer"] is None


def _run(*args: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, str(GRAPH), *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def _run_here(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    """As :func:`_run`, in this process (a new graph and checkpoint connection each time)."""
    capsys.readouterr()
    graph_main(list(args))
    return json.loads(capsys.readouterr().out)  # type: ignore[no-any-return]


def test_sqlite_checkpoints_resume_in_a_fresh_process(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Started here, refused here by a new graph on the file, finished in a fresh process."""
    ck, jr = str(tmp_path / "ck.sqlite"), str(tmp_path / "j.sqlite")
    started = _run_here(capsys, "start", ck, jr, "t-proc")
    (pending,) = started["interrupts"]
    assert started["next"] == ["decide"] and "dissensus" not in started["values"]
    stale = {**_answer(pending["value"]), "content_sha256": "f" * 64}
    refused = _run_here(capsys, "resume", ck, jr, "t-proc", json.dumps({pending["id"]: stale}))
    (again,) = refused["interrupts"]
    assert "changed since it was shown" in again["value"]["error"]
    done = _run("resume", ck, jr, "t-proc", json.dumps({again["id"]: _answer(again["value"])}))
    assert done["interrupts"] == [] and done["values"]["shipped"] is True
    record = done["values"]["dissensus"]
    assert (record["action"], record["decision"], record["resolution"]["reviewer"]) == (
        "human",
        "2",
        "kim@example.org",
    )
    with Journal(jr) as journal:
        assert list(list_items(journal)) == []
        assert journal.verify(record["review_id"].rpartition(".")[0]).ok


def test_two_pending_interrupts_are_resumed_by_id(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ck, jr = str(tmp_path / "ck.sqlite"), str(tmp_path / "j.sqlite")
    started = _run_here(capsys, "start", ck, jr, "t-two", "", "two")
    assert len(started["interrupts"]) == 2
    by_case = {i["value"]["case_id"]: i for i in started["interrupts"]}
    assert set(by_case) == {"t-two", "t-two-other"}
    answers = {
        by_case["t-two"]["id"]: _answer(by_case["t-two"]["value"], "2", "main case"),
        by_case["t-two-other"]["id"]: _answer(by_case["t-two-other"]["value"], "1", "other case"),
    }
    done = _run_here(capsys, "resume", ck, jr, "t-two", json.dumps(answers), "two")
    values = done["values"]
    assert done["interrupts"] == []
    assert (values["dissensus"]["decision"], values["dissensus"]["resolution"]["note"]) == (
        "2",
        "main case",
    )
    assert (values["other"]["decision"], values["other"]["resolution"]["note"]) == (
        "1",
        "other case",
    )
    with Journal(jr) as journal:
        assert list(list_items(journal)) == []


def test_the_node_runs_in_an_async_graph(tmp_path: Path) -> None:
    import asyncio

    app = build(_memory(), str(tmp_path / "j.sqlite"))
    config = _config("t-async")

    async def run() -> dict[str, Any]:
        first = await app.ainvoke({"case": "c6", "kind": "conflict"}, config)
        value = first["__interrupt__"][0].value
        return await app.ainvoke(_resume(_answer(value)), config)  # type: ignore[no-any-return]

    out = asyncio.run(run())
    assert (out["dissensus"]["action"], out["dissensus"]["decision"]) == ("human", "2")


def test_an_in_memory_journal_is_refused() -> None:
    from dissensus.errors import ConfigError
    from dissensus.integrations.langgraph import decision_node

    with pytest.raises(ConfigError, match="journal"):
        decision_node(journal=":memory:", panel=lambda s: s)
    with pytest.raises(ConfigError, match="on_escalate"):
        decision_node(journal="j.sqlite", panel=lambda s: s, on_escalate="ignore")  # type: ignore[arg-type]


def test_a_policy_whose_similarity_cannot_be_imported_fails_when_the_node_is_built(
    tmp_path: Path,
) -> None:
    from dissensus.errors import ConfigError
    from dissensus.integrations.langgraph import decision_node

    policy = tmp_path / "policy.yaml"
    policy.write_text(
        'allow_code: true\nreading: {similarity: "no_such_module_xyz:fn"}\n', encoding="utf-8"
    )
    with pytest.raises(ConfigError, match="cannot import module 'no_such_module_xyz'"):
        decision_node(policy=str(policy), journal=str(tmp_path / "j.sqlite"), panel=lambda s: s)


def test_a_bad_panel_is_an_input_error_as_in_decide(tmp_path: Path) -> None:
    from dissensus.errors import InputError
    from dissensus.integrations.langgraph import decision_node
    from dissensus.pipeline import decide

    bad = {"id": "p", "outputs": [{"agent": "a", "decision": 3}]}
    with pytest.raises(InputError) as lib:
        decide(bad, journal=str(tmp_path / "lib.sqlite"))
    node = decision_node(journal=str(tmp_path / "j.sqlite"), panel=lambda s: s)
    with pytest.raises(InputError) as door:
        node(bad, {"configurable": {"thread_id": "t"}})
    assert str(door.value) == str(lib.value)
    with pytest.raises(InputError, match="not int"):
        node(7, {"configurable": {"thread_id": "t"}})


@pytest.mark.parametrize(
    ("goto", "says"),
    [
        ({"escalated": "triage"}, "goto names no action a record can have: 'escalated'"),
        ({"auto": ""}, "goto['auto'] must be a node name"),
    ],
)
def test_a_goto_that_could_never_route_is_refused_when_the_node_is_made(
    tmp_path: Path, goto: dict[str, str], says: str
) -> None:
    from dissensus.errors import ConfigError
    from dissensus.integrations.langgraph import decision_node
    from integrations_graph import POLICY, _panel

    with pytest.raises(ConfigError, match=re.escape(says)):
        decision_node(policy=POLICY, journal=str(tmp_path / "j.sqlite"), panel=_panel, goto=goto)
