"""A proposal with a blank id, or a dict whose text is not a string.

A candidate proposed with the id ``""`` was tabled under it, and ``dissensus verify``
rejected the run's own certificate (``selection: round 1: worst-off 0.5 != None``). A
function agent returning ``{"text": None}`` proposed the plan "None".
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, seed, settings
from hypothesis import strategies as st

from dissensus.concord import FunctionAgent, NegotiationView, Outcome, load_problem, verify
from dissensus.concord.protocol import negotiate_sync
from dissensus.errors import ConfigError

R0 = Outcome(id="R0", text="leave it broken")
I0 = Outcome(id="I0", text="fixed at no cost")


def _score(outcome: Outcome, view: NegotiationView) -> float:
    return {"R0": 0.0, "I0": 10.0}.get(str(outcome.id), 6.0)


def _run(*plans: object, rounds: int = 2) -> dict[str, object]:
    agents = [
        FunctionAgent(f"a{i}", _score, propose=lambda v, p=plan: p, repair=lambda v, p=plan: p)
        for i, plan in enumerate(plans)
    ]
    cert = negotiate_sync(agents, rejected=R0, ideal=I0, floor=0.5, rounds=rounds)
    data = cert.model_dump(mode="json")
    verdict = verify(data)
    assert verdict.valid, verdict
    return data


def test_a_blank_id_is_no_id() -> None:
    data = _run({"id": "", "text": "fail over"}, Outcome(id="  ", text="restore"))
    assert data["status"] == "certified"
    candidates = data["candidates"]
    assert isinstance(candidates, list)
    assert [c["id"] for c in candidates] == ["C1", "C2"]
    selected = data["selected"]
    assert isinstance(selected, dict) and selected["id"] == "C1"


def test_a_text_that_is_not_a_string_is_a_fault_not_a_plan() -> None:
    data = _run({"text": None}, {"text": 5})
    assert data["candidates"] == [] and data["selected"] is None
    trajectory = data["trajectory"]
    assert isinstance(trajectory, list)
    messages = [f["message"] for f in trajectory[0]["faults"]]
    assert messages == [
        "TypeError: an outcome's 'text' must be a string, got NoneType",
        "TypeError: an outcome's 'text' must be a string, got int",
    ]


IDS = st.one_of(st.none(), st.sampled_from(["", " ", "\t", "C1", "C2", "R0", "I0", "x"]))
TEXTS = st.sampled_from(["fail over", "restore", "fail over", " "])


@seed(20261205)
@settings(max_examples=120, deadline=None)
@given(st.lists(st.tuples(IDS, TEXTS), min_size=1, max_size=4), st.integers(0, 3))
def test_whatever_ids_agents_propose_the_record_verifies(
    plans: list[tuple[str | None, str]], rounds: int
) -> None:
    data = _run(*({"id": i, "text": t} for i, t in plans), rounds=rounds)
    candidates = data["candidates"]
    assert isinstance(candidates, list)
    ids = [c["id"] for c in candidates]
    assert all(i.strip() for i in ids) and len(set(ids)) == len(ids)


def test_verify_reads_an_empty_id_as_an_id_not_as_no_leader() -> None:
    from dissensus.concord.record import Certificate

    data = _run({"text": "fail over"})
    text = json.dumps(data).replace('"C1"', '""')
    edited = json.loads(text)
    edited.pop("digest")
    resealed = Certificate.model_validate(edited).sealed().model_dump(mode="json")
    assert resealed["selected"]["id"] == ""
    verdict = verify(resealed)
    assert verdict.valid, verdict


PROBLEM = """\
floor: 0.7
anchors:
  rejected: {id: R0, text: "leave it broken"}
  ideal: {id: I0, text: "fixed at no cost"}
options:
  - {id: A, text: "fail over"}
agents:
  - {id: t, kind: table, scores: {R0: 0, I0: 10, A: 8}}
"""


@pytest.mark.parametrize(
    ("old", "new", "field"),
    [
        ('{id: A, text: "fail over"}', '{id: "", text: "fail over"}', "options.0.id"),
        ('{id: A, text: "fail over"}', '{id: " ", text: "fail over"}', "options.0.id"),
        ('{id: A, text: "fail over"}', '{id: A, text: "   "}', "options.0.text"),
        ("rejected: {id: R0,", 'rejected: {id: "",', "anchors.rejected.id"),
        ('text: "fixed at no cost"', 'text: "\\t"', "anchors.ideal.text"),
    ],
)
def test_a_problem_file_with_a_blank_id_or_text_names_the_field(
    tmp_path: Path, old: str, new: str, field: str
) -> None:
    path = tmp_path / "problem.yaml"
    assert old in PROBLEM
    path.write_text(PROBLEM.replace(old, new), encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_problem(str(path))
    assert caught.value.field == field
    assert "blank" in str(caught.value)
