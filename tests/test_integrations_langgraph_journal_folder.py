"""The LangGraph node's relative journal is the one it checked when it was made.

The node opens its journal per call; a relative path was opened against the working
folder of each call, so a node made in one folder and run after the application moved
to another (a notebook's ``%cd``) decided into a new journal there, created unseen, and
the review item was absent from the journal the node had checked. The path is now
resolved when the node is made, as the Inspect reducer resolves its journal.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypedDict

import pytest

from dissensus.pipeline import policy_from_dict
from dissensus.pipeline.review import list_items
from dissensus.store import open_journal

CONFLICT = {
    "id": "refund",
    "outputs": [
        {"agent": "a", "decision": "1", "reasoning": "Reply 1 is safe.", "values": {"s": 1.0}},
        {"agent": "b", "decision": "2", "reasoning": "Reply 2 is fast.", "values": {"t": 1.0}},
    ],
}


def test_a_relative_journal_stays_where_the_node_was_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("langgraph")
    from langgraph.graph import END, START, StateGraph

    from dissensus.integrations.langgraph import decision_node

    class State(TypedDict, total=False):
        dissensus: dict[str, Any]

    made, later = tmp_path / "made", tmp_path / "later"
    made.mkdir()
    later.mkdir()
    monkeypatch.chdir(made)
    node = decision_node(
        policy=policy_from_dict({"reading": {"similarity": "tfidf"}}),
        journal="j.sqlite",
        panel=lambda state: CONFLICT,
        on_escalate="route",
    )
    graph = StateGraph(State)
    graph.add_node("decide", node)
    graph.add_edge(START, "decide")
    graph.add_edge("decide", END)
    app = graph.compile()

    monkeypatch.chdir(later)
    record = app.invoke({})["dissensus"]
    assert record["action"] == "escalate"
    assert not (later / "j.sqlite").exists()
    with open_journal(str(made / "j.sqlite")) as journal:
        assert [st.item.review_id for st in list_items(journal)] == [record["review_id"]]
