"""The LangGraph node's answers: only one given now resolves, bad text is refused, bad config named.

A resumed node is handed every answer given to it so far, oldest first; these tests hold
that an answer refused once (for a reason that has gone since: a claim released, another
reviewer named in the config) never resolves the case later.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dissensus.pipeline.review import claim, find_item
from dissensus.store import Journal
from integrations_graph import POLICY, _panel, build


@pytest.fixture(autouse=True, scope="module")
def _langgraph() -> Iterator[None]:
    pytest.importorskip("langgraph")
    yield


def _memory() -> Any:
    from langgraph.checkpoint.memory import InMemorySaver

    return InMemorySaver()


def _resume(answer: Any) -> Any:
    from langgraph.types import Command

    return Command(resume=answer)


def _config(thread: str, reviewer: str | None = "kim") -> dict[str, Any]:
    conf: dict[str, Any] = {"thread_id": thread}
    if reviewer is not None:
        conf["reviewer"] = reviewer
    return {"configurable": conf}


def _answer(value: dict[str, Any], decision: str, note: str) -> dict[str, str]:
    return {"decision": decision, "note": note, "content_sha256": value["content_sha256"]}


def _resolutions(path: Path, review_id: str) -> list[dict[str, Any]]:
    with Journal(path) as journal:
        run = find_item(journal, review_id).item.run_id
        return [e.payload for e in journal.events(run) if e.type == "review.resolved"]


def test_an_answer_refused_for_a_claim_never_resolves_for_the_claim_holder(
    tmp_path: Path,
) -> None:
    """kim's answer is refused (lee holds the claim); lee's resume resolves with lee's
    answer, not with kim's replayed one recorded under lee's name."""
    path = tmp_path / "j.sqlite"
    app = build(_memory(), str(path))
    kim, lee = _config("t-claim", "kim"), _config("t-claim", "lee")
    value = app.invoke({"case": "c1", "kind": "conflict"}, kim)["__interrupt__"][0].value
    with Journal(path) as journal:
        claim(journal, value["review_id"], "lee", ttl=600)
    refused = app.invoke(_resume(_answer(value, "1", "kim's answer")), kim)
    assert "claimed by lee" in refused["__interrupt__"][0].value["error"]
    out = app.invoke(_resume(_answer(value, "2", "lee's answer")), lee)
    assert "__interrupt__" not in out
    assert out["dissensus"]["resolution"] == {
        "decision": "2",
        "note": "lee's answer",
        "reviewer": "lee",
    }
    assert [(r["decision"], r["note"]) for r in _resolutions(path, value["review_id"])] == [
        ("2", "lee's answer")
    ]


def test_an_answer_refused_for_a_claim_stays_refused_once_the_claim_is_released(
    tmp_path: Path,
) -> None:
    path = tmp_path / "j.sqlite"
    app = build(_memory(), str(path))
    config = _config("t-release")
    value = app.invoke({"case": "c2", "kind": "conflict"}, config)["__interrupt__"][0].value
    with Journal(path) as journal:
        claim(journal, value["review_id"], "lee", ttl=600)
    app.invoke(_resume(_answer(value, "1", "first answer, refused")), config)
    with Journal(path) as journal:
        assert journal.release_claim(value["review_id"], "lee")
    out = app.invoke(_resume(_answer(value, "2", "second answer")), config)
    assert (out["dissensus"]["decision"], out["dissensus"]["resolution"]["note"]) == (
        "2",
        "second answer",
    )


# Refusals whose reason is gone by the time the accepted answer comes: a claim by lee
# (released before the last answer) or, for the unnamed resume, any claim at all. Each
# refused answer is otherwise valid, so a replayed one would resolve if it were tried.
_REFUSALS = st.lists(
    st.tuples(
        st.sampled_from(["claimed", "stale", "payload", "surrogate"]),
        st.sampled_from(["1", "2", "3"]),
    ),
    min_size=1,
    max_size=4,
)
_threads = itertools.count()


@settings(max_examples=12, deadline=None)
@given(refusals=_REFUSALS, final=st.sampled_from(["1", "2", "3"]))
def test_a_refused_answer_never_resolves_later(
    tmp_path_factory: pytest.TempPathFactory, refusals: list[tuple[str, str]], final: str
) -> None:
    path = tmp_path_factory.mktemp("answers") / "j.sqlite"
    app = build(_memory(), str(path))
    config = _config(f"t-prop-{next(_threads)}")
    value = app.invoke({"case": "c3", "kind": "conflict"}, config)["__interrupt__"][0].value
    with Journal(path) as journal:
        claim(journal, value["review_id"], "lee", ttl=600)
    for k, (kind, decision) in enumerate(refusals):
        answer: Any = _answer(value, decision, f"refused answer {k}")
        if kind == "stale":
            answer["content_sha256"] = "0" * 64
        elif kind == "payload":
            answer = {"decision": decision}
        elif kind == "surrogate":
            answer["note"] = json.loads(f'"refused answer {k} \\ud83d"')
        out = app.invoke(_resume(answer), config)
        assert out["__interrupt__"][0].value["error"]
    with Journal(path) as journal:
        assert find_item(journal, value["review_id"]).resolution is None
        assert journal.release_claim(value["review_id"], "lee")
    out = app.invoke(_resume(_answer(value, final, "the accepted answer")), config)
    assert out["dissensus"]["resolution"] == {
        "decision": final,
        "note": "the accepted answer",
        "reviewer": "kim",
    }
    assert len(_resolutions(path, value["review_id"])) == 1


def test_a_note_that_is_not_unicode_text_is_refused_naming_the_field(tmp_path: Path) -> None:
    """A lone surrogate (a ``\\ud83d`` JSON escape) is refused like any bad answer; the
    next answer resolves with its own text, not a mangled copy of the refused one."""
    path = tmp_path / "j.sqlite"
    app = build(_memory(), str(path))
    config = _config("t-surrogate")
    value = app.invoke({"case": "c4", "kind": "conflict"}, config)["__interrupt__"][0].value
    bad = {**_answer(value, "2", ""), "note": json.loads('"copied text \\ud83d"')}
    again = app.invoke(_resume(bad), config)["__interrupt__"][0].value
    assert again["error"].startswith("field 'note': ") and "lone surrogate" in again["error"]
    assert _resolutions(path, value["review_id"]) == []
    out = app.invoke(_resume(_answer(value, "2", "fine")), config)
    assert out["dissensus"]["resolution"] == {"decision": "2", "note": "fine", "reviewer": "kim"}


def test_an_upper_case_copy_of_the_hash_is_the_same_hash(tmp_path: Path) -> None:
    app = build(_memory(), str(tmp_path / "j.sqlite"))
    config = _config("t-upper")
    value = app.invoke({"case": "c5", "kind": "conflict"}, config)["__interrupt__"][0].value
    answer = {**_answer(value, "1", "ok"), "content_sha256": value["content_sha256"].upper()}
    out = app.invoke(_resume(answer), config)
    assert (out["dissensus"]["action"], out["dissensus"]["decision"]) == ("human", "1")


@pytest.mark.parametrize("journal", ["", "   ", ":memory:", " :memory: "])
def test_a_throw_away_journal_is_refused_when_the_node_is_made(journal: str) -> None:
    from dissensus.errors import ConfigError
    from dissensus.integrations.langgraph import decision_node

    with pytest.raises(ConfigError, match="field 'journal': the journal must be a file"):
        decision_node(journal=journal, panel=_panel)


def _broken(config: Any) -> str:
    raise KeyError("who")


def _numbered(config: Any) -> Any:
    return 42


def _escaped(config: Any) -> Any:
    return "kim\x1b[31m"


def _long(config: Any) -> Any:
    return "k" * 300


def _configured_number(config: Any) -> Any:
    """The default resolver, with ``configurable.reviewer`` a number (was journalled as "7")."""
    from dissensus.integrations.langgraph import config_reviewer

    return config_reviewer({"configurable": {"reviewer": 7}})


@pytest.mark.parametrize(
    ("resolver", "says"),
    [
        (_broken, "the reviewer resolver _broken failed: KeyError: 'who'"),
        (_numbered, "the reviewer resolver _numbered returned int, not a name"),
        # A name no resolution may hold was the reviewer's error, asked again and again.
        (_escaped, "the name the reviewer resolver _escaped returned may not hold control"),
        (_long, "the name the reviewer resolver _long returned is 300 characters long"),
        (_configured_number, "the reviewer resolver _configured_number returned int"),
    ],
)
def test_a_reviewer_resolver_that_fails_is_a_config_error_naming_it(
    tmp_path: Path, resolver: Any, says: str
) -> None:
    """The run fails naming the resolver; fixed and resumed, the held answer is tried."""
    from langgraph.graph import END, START, StateGraph

    from dissensus.errors import ConfigError
    from dissensus.integrations.langgraph import config_reviewer, decision_node
    from integrations_graph import State, _agent

    path = tmp_path / "j.sqlite"
    checkpoints = _memory()

    def graph(reviewer: Any) -> Any:
        g = StateGraph(State)
        g.add_node("a", _agent("a", "kb:1"))
        g.add_node("b", _agent("b", "kb:2"))
        node = decision_node(policy=POLICY, journal=str(path), panel=_panel, reviewer=reviewer)
        g.add_node("decide", node)
        g.add_edge(START, "a")
        g.add_edge(START, "b")
        g.add_edge(["a", "b"], "decide")
        g.add_edge("decide", END)
        return g.compile(checkpointer=checkpoints)

    config = _config("t-resolver")
    app = graph(resolver)
    value = app.invoke({"case": "c6", "kind": "conflict"}, config)["__interrupt__"][0].value
    with pytest.raises(ConfigError, match="field 'reviewer': " + says):
        app.invoke(_resume(_answer(value, "2", "held")), config)
    assert _resolutions(path, value["review_id"]) == []
    out = graph(config_reviewer).invoke(None, config)
    assert out["dissensus"]["resolution"] == {"decision": "2", "note": "held", "reviewer": "kim"}


@pytest.mark.parametrize("kind", ["directory", "missing folder", "number"])
def test_a_journal_that_cannot_be_opened_is_refused_when_the_node_is_made(
    tmp_path: Path, kind: str
) -> None:
    from dissensus.errors import ConfigError
    from dissensus.integrations.langgraph import decision_node

    (tmp_path / "jdir").mkdir()
    journal: Any = {
        "directory": str(tmp_path / "jdir"),
        "missing folder": str(tmp_path / "nowhere" / "j.sqlite"),
        "number": 5,
    }[kind]
    with pytest.raises(ConfigError) as caught:
        decision_node(policy=POLICY, journal=journal, panel=_panel)
    assert caught.value.field == "journal"


def _routed(tmp_path: Path, key: str) -> Any:
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.graph import START, StateGraph

    from dissensus.integrations.langgraph import decision_node
    from integrations_graph import State, _agent

    graph = StateGraph(State)
    graph.add_node("a", _agent("a", "kb:1"))
    graph.add_node("b", _agent("b", "kb:2"))
    node = decision_node(
        policy=POLICY,
        journal=str(tmp_path / "j.sqlite"),
        panel=_panel,
        on_escalate="route",
        key=key,
    )
    graph.add_node("decide", node)
    graph.add_edge(START, "a")
    graph.add_edge(START, "b")
    graph.add_edge(["a", "b"], "decide")
    return graph.compile(checkpointer=InMemorySaver())


def test_a_key_the_state_lacks_is_warned_of_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    app = _routed(tmp_path, "decision")  # State has no "decision"
    with caplog.at_level("WARNING", logger="dissensus.integrations.langgraph"):
        for thread in ("t1", "t2"):
            out = app.invoke({"case": "c4", "kind": "conflict"}, _config(thread))
            assert "decision" not in out  # what LangGraph does with it
    said = [r.getMessage() for r in caplog.records if r.name == "dissensus.integrations.langgraph"]
    assert len(said) == 1 and "the graph's state has no key 'decision'" in said[0]


def test_a_key_in_the_state_is_not_warned_of(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    app = _routed(tmp_path, "other")  # in State, and empty when the node first runs
    with caplog.at_level("DEBUG", logger="dissensus.integrations.langgraph"):
        out = app.invoke({"case": "c4", "kind": "conflict"}, _config("t1"))
    assert out["other"]["action"] == "escalate"
    assert not [r for r in caplog.records if r.name == "dissensus.integrations.langgraph"]


@pytest.mark.parametrize("blank", ["", "   "])
def test_a_blank_reviewer_name_is_unset_not_journalled(tmp_path: Path, blank: str) -> None:
    """``configurable.reviewer`` empty or blank (an unset variable) leaves the resolution
    unnamed, as an empty ``--reviewer`` does; it was journalled as the reviewer ``''``."""
    path = tmp_path / "j.sqlite"
    app = build(_memory(), str(path))
    config = {"configurable": {"thread_id": "t-blank", "reviewer": blank}}
    value = app.invoke({"case": "c7", "kind": "conflict"}, config)["__interrupt__"][0].value
    out = app.invoke(_resume(_answer(value, "2", "fine")), config)
    assert out["dissensus"]["resolution"] == {"decision": "2", "note": "fine", "reviewer": None}


def test_a_busy_journal_fails_the_run_and_the_held_answer_is_tried_on_resume(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A journal locked by another writer while an answer is resolved was shown to the
    reviewer as the error of their answer (``journal ... is locked by another writer``),
    which no answer could mend. The run fails with the journal's error, nothing is
    journalled, and resumed once the lock is gone, the held answer resolves the case."""
    import sqlite3

    from dissensus.store import JournalError

    monkeypatch.setenv("DISSENSUS_JOURNAL_BUSY_TIMEOUT", "0.5")
    path = tmp_path / "j.sqlite"
    app = build(_memory(), str(path))
    config = _config("t-busy")
    value = app.invoke({"case": "c8", "kind": "conflict"}, config)["__interrupt__"][0].value
    lock = sqlite3.connect(path, isolation_level=None)
    try:
        lock.execute("BEGIN IMMEDIATE")
        with pytest.raises(JournalError, match="locked"):
            app.invoke(_resume(_answer(value, "2", "checked twice")), config)
    finally:
        lock.execute("ROLLBACK")
        lock.close()
    assert _resolutions(path, value["review_id"]) == []
    out = app.invoke(None, config)
    assert out["dissensus"]["resolution"] == {
        "decision": "2",
        "note": "checked twice",
        "reviewer": "kim",
    }


def _refused_then_released(tmp_path: Path, thread: str, *, by_id: bool) -> Any:
    """kim's answer refused for lee's claim, the claim then released: (app, config, value)."""
    path = tmp_path / "j.sqlite"
    app = build(_memory(), str(path))
    config = _config(thread)
    value = app.invoke({"case": "c9", "kind": "conflict"}, config)["__interrupt__"][0].value
    with Journal(path) as journal:
        claim(journal, value["review_id"], "lee", ttl=600)
    answer = _answer(value, "1", "kim's answer, refused")
    if by_id:
        answer = {app.get_state(config).interrupts[0].id: answer}
    refused = app.invoke(_resume(answer), config)
    assert "claimed by lee" in refused["__interrupt__"][0].value["error"]
    with Journal(path) as journal:
        assert journal.release_claim(value["review_id"], "lee")
    return app, config, value, path


@pytest.mark.parametrize("by_id", [False, True], ids=["resume", "resume-by-id"])
def test_a_refused_answer_is_not_tried_when_the_graph_is_resumed_with_none(
    tmp_path: Path, by_id: bool
) -> None:
    """``invoke(None, config)`` hands the node its refused answer again: it is dropped and
    the node asks again; it resolved the case once the claim was gone."""
    app, config, value, path = _refused_then_released(tmp_path, "t-none", by_id=by_id)
    for _ in range(2):
        out = app.invoke(None, config)
        assert "__interrupt__" in out, out.get("dissensus")
        assert "the last answer was not applied" in out["__interrupt__"][0].value["error"]
    assert _resolutions(path, value["review_id"]) == []
    out = app.invoke(_resume(_answer(value, "2", "kim's new answer")), config)
    assert out["dissensus"]["resolution"] == {
        "decision": "2",
        "note": "kim's new answer",
        "reviewer": "kim",
    }


def test_the_refused_answer_sent_again_is_that_answer(tmp_path: Path) -> None:
    """LangGraph resumed with no new answer hands the node its last answer again, which
    cannot be told from the same answer sent again: both are the refused answer."""
    app, config, value, path = _refused_then_released(tmp_path, "t-same", by_id=False)
    again = app.invoke(_resume(_answer(value, "1", "kim's answer, refused")), config)
    assert "__interrupt__" in again, again.get("dissensus")
    assert "the last answer was not applied" in again["__interrupt__"][0].value["error"]
    assert _resolutions(path, value["review_id"]) == []


def test_an_answer_by_id_is_tried_not_the_last_answer_sent_without_one(tmp_path: Path) -> None:
    """After an answer sent with ``Command(resume=value)`` was refused, LangGraph hands the
    node that value again after an answer sent by interrupt id: the answer by id is the one
    tried (the older one resolved the case instead)."""
    app, config, value, path = _refused_then_released(tmp_path, "t-mixed", by_id=False)
    pending = app.get_state(config).interrupts[0].id
    out = app.invoke(_resume({pending: _answer(value, "2", "by id")}), config)
    assert out["dissensus"]["resolution"] == {"decision": "2", "note": "by id", "reviewer": "kim"}
    assert len(_resolutions(path, value["review_id"])) == 1


def test_an_empty_note_is_refused_naming_the_field(tmp_path: Path) -> None:
    path = tmp_path / "j.sqlite"
    app = build(_memory(), str(path))
    config = _config("t-empty-note")
    value = app.invoke({"case": "c10", "kind": "conflict"}, config)["__interrupt__"][0].value
    again = app.invoke(_resume(_answer(value, "2", "  ")), config)["__interrupt__"][0].value
    assert again["error"] == "field 'note': the note must not be empty"
    out = app.invoke(_resume(_answer(value, "2", "now with a reason")), config)
    assert out["dissensus"]["resolution"]["note"] == "now with a reason"


def test_the_replay_guard_reads_langgraphs_task_config_and_says_when_it_cannot(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The installed LangGraph hands a running node the task scratchpad the replay guard
    reads; a config without it (another LangGraph) leaves the guard off, with one warning
    per process saying so, never silently."""
    from langchain_core.runnables import RunnableConfig
    from langgraph.graph import START, StateGraph

    from dissensus.integrations import langgraph as module

    seen: dict[str, Any] = {}

    def look(state: dict[str, Any], config: RunnableConfig) -> dict[str, Any]:
        seen.update(config.get("configurable") or {})
        return {}

    look.__annotations__["config"] = RunnableConfig  # read by LangGraph, not as a string

    graph = StateGraph(dict)
    graph.add_node("look", look)
    graph.add_edge(START, "look")
    graph.compile().invoke({"x": 1})
    pad = seen[module._CONFIG_KEY_SCRATCHPAD]
    assert isinstance(pad.resume, list) and callable(pad.get_null_resume)

    monkeypatch.setattr(module, "_UNGUARDED_WARNED", __import__("threading").Event())
    with caplog.at_level("WARNING", logger="dissensus.integrations.langgraph"):
        assert module._fresh_answer({"configurable": {}}) == -1
        assert module._fresh_answer({"configurable": {"thread_id": "t"}}) == -1
    warned = [r.getMessage() for r in caplog.records if "__pregel_scratchpad" in r.getMessage()]
    assert len(warned) == 1 and "tries the newest answer" in warned[0]
