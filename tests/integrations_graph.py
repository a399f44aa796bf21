"""A small LangGraph graph for the integration tests: two function agents -> decision node.

Run as a script to start or resume a graph in a fresh process::

    python tests/integrations_graph.py start|resume CHECKPOINTS JOURNAL THREAD [RESUME_JSON]

It prints one JSON object: the interrupts pending (id and value) and the state's records.
langgraph is imported when a graph is built, so importing this module costs no framework.
"""

from __future__ import annotations

import json
import sqlite3
import sys
from typing import TYPE_CHECKING, Annotated, Any, TypedDict

from dissensus.pipeline import policy_from_dict
from dissensus.types import AgentOutput, Panel

if TYPE_CHECKING:
    from langgraph.checkpoint.base import BaseCheckpointSaver

POLICY = policy_from_dict({"reading": {"similarity": "tfidf", "theta_s": 0.3}})
REASON = "Option {d} states the refund window of 30 days clearly."


def _add(a: list[dict[str, Any]] | None, b: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    return [*(a or []), *(b or [])]


class State(TypedDict, total=False):
    case: str
    kind: str
    outputs: Annotated[list[dict[str, Any]], _add]
    dissensus: dict[str, Any]
    other: dict[str, Any]
    shipped: bool
    triaged: bool


def _agent(name: str, source: str) -> Any:
    """A function agent: answers '1', or disagrees by value when the case kind is 'conflict'."""

    def node(state: dict[str, Any]) -> dict[str, Any]:
        kind = state.get("kind", "agree")
        decision = "2" if kind == "conflict" and name == "b" else "1"
        out: dict[str, Any] = {
            "agent": name,
            "decision": decision,
            "reasoning": REASON.format(d=decision),
            "family": f"fam-{name}",
        }
        if kind == "agree":
            out["evidence"] = [{"source": source}]
        else:
            out["values"] = {"safety": 1.0} if name == "a" else {"speed": 1.0}
        return {"outputs": [out]}

    return node


def _panel(state: dict[str, Any]) -> Panel:
    outputs = sorted(state["outputs"], key=lambda o: o["agent"])
    return Panel(
        id=state["case"],
        meta={"question": "Which reply states the refund policy?"},
        outputs=[AgentOutput.model_validate(o) for o in outputs],
    )


def _other_panel(state: dict[str, Any]) -> Panel:
    reasons = ["Option 1 is right.", "Option 2 is right.", "Option 1 is right."]
    outs = [
        AgentOutput(
            agent=f"x{i}",
            decision=d,
            reasoning=reasons[i],
            values={"v": 1.0} if i != 1 else {"w": 1.0},
        )
        for i, d in enumerate(["1", "2", "1"])
    ]
    return Panel(id=state["case"] + "-other", outputs=outs)


def build(checkpointer: BaseCheckpointSaver[Any], journal: str, *, two: bool = False) -> Any:
    """START -> agents a, b -> decide (and decide_other in parallel when ``two``) -> ship/triage."""
    from langgraph.graph import END, START, StateGraph

    from dissensus.integrations.langgraph import decision_node

    graph = StateGraph(State)
    graph.add_node("a", _agent("a", "kb:policies"))
    graph.add_node("b", _agent("b", "kb:faq"))
    goto = {"auto": "ship", "human": "ship", "escalate": "triage"}
    graph.add_node("decide", decision_node(policy=POLICY, journal=journal, panel=_panel, goto=goto))
    graph.add_node("ship", lambda s: {"shipped": True})
    graph.add_node("triage", lambda s: {"triaged": True})
    graph.add_edge(START, "a")
    graph.add_edge(START, "b")
    graph.add_edge(["a", "b"], "decide")
    if two:
        graph.add_node(
            "decide_other",
            decision_node(policy=POLICY, journal=journal, panel=_other_panel, key="other"),
        )
        graph.add_edge(["a", "b"], "decide_other")
    graph.add_edge("ship", END)
    graph.add_edge("triage", END)
    return graph.compile(checkpointer=checkpointer)


def sqlite_saver(path: str) -> Any:
    from langgraph.checkpoint.sqlite import SqliteSaver

    return SqliteSaver(sqlite3.connect(path, check_same_thread=False))


def summary(app: Any, config: dict[str, Any], result: dict[str, Any]) -> dict[str, Any]:
    state = app.get_state(config)
    return {
        "interrupts": [{"id": i.id, "value": i.value} for i in state.interrupts],
        "values": {k: v for k, v in result.items() if k != "__interrupt__"},
        "next": list(state.next),
    }


def main(argv: list[str]) -> None:
    from langgraph.types import Command

    mode, checkpoints, journal, thread = argv[:4]
    app = build(sqlite_saver(checkpoints), journal, two=len(argv) > 5 and argv[5] == "two")
    config = {"configurable": {"thread_id": thread, "reviewer": "kim@example.org"}}
    if mode == "start":
        result = app.invoke({"case": thread, "kind": "conflict"}, config)
    else:
        result = app.invoke(Command(resume=json.loads(argv[4])), config)
    print(json.dumps(summary(app, config, result)))


if __name__ == "__main__":
    main(sys.argv[1:])
