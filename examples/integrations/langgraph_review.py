"""Two function agents feed a dissensus decision node; an escalation waits for a human.

Run offline: ``python examples/integrations/langgraph_review.py`` (extra ``langgraph``).
The journal and the checkpoints are written to a temporary directory.
"""

from __future__ import annotations

import json
import operator
import tempfile
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command

from dissensus import Panel
from dissensus.integrations.langgraph import decision_node
from dissensus.pipeline import policy_from_dict


class State(TypedDict, total=False):
    case: str
    outputs: Annotated[list[dict[str, Any]], operator.add]
    dissensus: dict[str, Any]


def agent(name: str, decision: str, source: str | None) -> Any:
    def run(state: State) -> dict[str, Any]:
        out: dict[str, Any] = {
            "agent": name,
            "decision": decision,
            "reasoning": f"Reply {decision} states the refund window.",
        }
        if source:  # the agent looked it up: independent evidence for the guard
            out["evidence"] = [{"source": source}]
        else:  # no evidence, a value profile instead: a value conflict goes to a human
            out["values"] = {"safety": 1.0} if name == "legal" else {"speed": 1.0}
        return {"outputs": [out]}

    return run


def build(legal: str, support: str, evidence: bool, journal: str) -> Any:
    graph = StateGraph(State)
    graph.add_node("legal", agent("legal", legal, "kb:policies" if evidence else None))
    graph.add_node("support", agent("support", support, "kb:faq" if evidence else None))
    graph.add_node(
        "decide",
        decision_node(
            policy=policy_from_dict({"reading": {"similarity": "tfidf", "theta_s": 0.3}}),
            journal=journal,
            panel=lambda s: Panel(
                id=s["case"], meta={"question": "Which reply?"}, outputs=s["outputs"]
            ),
            goto={"auto": "send", "human": "send"},
        ),
    )
    graph.add_node("send", lambda s: {})
    graph.add_edge(START, "legal")
    graph.add_edge(START, "support")
    graph.add_edge(["legal", "support"], "decide")
    graph.add_edge("send", END)
    return graph.compile(checkpointer=InMemorySaver())


def main() -> None:
    journal = str(Path(tempfile.mkdtemp()) / "journal.sqlite")
    config = {"configurable": {"thread_id": "refund-1", "reviewer": "kim@example.org"}}
    out = build("1", "1", True, journal).invoke({"case": "refund-1"}, config)
    print(
        "agreed:",
        out["dissensus"]["action"],
        out["dissensus"]["decision"],
        "-",
        out["dissensus"]["reason"][:60],
    )

    app = build("1", "2", False, journal)
    config = {"configurable": {"thread_id": "refund-2", "reviewer": "kim@example.org"}}
    (pending,) = app.invoke({"case": "refund-2"}, config)["__interrupt__"]
    request = pending.value
    print("escalated:", request["review_id"], request["reason"])
    print(json.dumps(request["positions"], indent=1))
    answer = {
        "decision": "2",
        "note": "support's reply is the current policy",
        "content_sha256": request["content_sha256"],
    }
    record = app.invoke(Command(resume=answer), config)["dissensus"]
    print("resolved:", record["action"], record["decision"], "by", record["resolution"]["reviewer"])


if __name__ == "__main__":
    main()
