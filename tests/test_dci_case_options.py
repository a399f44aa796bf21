"""A case's options reach its DCI follow-up whatever their text: none stops the run.

A pairwise case whose second output is empty (``output_2: ""``), or an option written
with a blank id, made the ``deliberate`` route build a task option pydantic refused:
the ``ValidationError`` escaped the follow-up and ``decide`` stopped with a traceback,
every other case of the batch lost with it. A blank text is now put to the participants
as the option's id, a blank id labels the option by its position; neither repeats an id
or a text another option of the case has.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import yaml
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from cli_helpers import cli
from dissensus.dci.selection import fold_text
from dissensus.llm import ModelClient, ScriptedBackend
from dissensus.pipeline.followup import run_dci, task_options
from dissensus.types import AgentOutput, Panel
from pipeline_cases import panel, write_jsonl, write_policy

_RULES: list[dict[str, object]] = [
    {"match": {"stage": "dci.frame"}, "json": {"act": "frame", "target": "a0", "text": "f"}},
    {"match": {"stage": "dci.propose"}, "json": {"act": "extend", "target": "o2", "text": "e"}},
    {"match": {"stage": "dci.challenge"}, "json": {"act": "ground", "target": "o2", "text": "g"}},
    {"match": {"stage": "dci.revise"}, "json": {"act": "clarify", "target": "o2", "text": "c"}},
    {
        "match": {"stage": "dci.score"},
        "json": {"act": "recommend", "target": "o2", "text": "r", "scores": {"o1": 0.1, "o2": 0.9}},
    },
    {
        "match": {"stage": "dci.synthesize"},
        "json": {"act": "synthesize", "target": "o2", "text": "s"},
    },
]


def _panel(meta: dict[str, object]) -> Panel:
    outputs = [
        AgentOutput(agent=a, decision=d, reasoning="r") for a, d in (("m1", "1"), ("m2", "2"))
    ]
    return Panel(id="c", meta={"question": "Which answer is better?", **meta}, outputs=outputs)


def test_a_blank_option_text_or_id_is_deliberated_under_a_name() -> None:
    client = ModelClient(ScriptedBackend.from_dict({"rules": _RULES}))
    for meta, labels in (
        ({"output_1": "A full answer.", "output_2": ""}, ["1", "2"]),
        ({"options": [{"id": "", "text": "Keep"}, {"id": "b", "text": " "}]}, ["option 1", "b"]),
    ):
        packet = asyncio.run(run_dci(_panel(meta), client))  # type: ignore[arg-type]
        assert packet.status == "complete", packet.status_detail
        assert [o.label for o in packet.options[:2]] == labels
        assert packet.options[1].text == labels[1]  # the blank text reads as its label
        assert packet.selected is not None and packet.selected.label == labels[1]


def test_decide_deliberates_a_case_whose_output_is_empty(tmp_path: Path) -> None:
    script = tmp_path / "dci.yaml"
    script.write_text(yaml.safe_dump({"rules": _RULES}), encoding="utf-8")
    meta = {"question": None, "options": None, "output_1": "A full answer.", "output_2": ""}
    rows = [panel("empty", ["2", "1", "2"], meta=meta), panel("plain", ["2", "1", "2"])]
    inp = write_jsonl(tmp_path / "in.jsonl", rows)
    pol = write_policy(tmp_path / "p.yaml", {"seek_context": {"followup": "dci"}})
    args = ["decide", str(inp), "--policy", str(pol), "--journal", str(tmp_path / "j.sqlite")]
    result = cli(*args, "--json", "--model", f"scripted:{script}")
    assert "Traceback" not in result.err and result.code == 0, result.err
    records = {r["id"]: r for r in map(json.loads, result.out.splitlines())}
    assert set(records) == {"empty", "plain"}
    assert "DCI packet attached for review" in records["empty"]["reason"]


def test_a_blank_option_is_named_apart_from_the_case_s_other_options() -> None:
    """A blank id's label and a blank text's stand-in never repeat another option's id or
    text: two options under one name (or one text) could not be told apart."""
    client = ModelClient(ScriptedBackend.from_dict({"rules": _RULES}))
    for options, expected in (
        (
            [{"id": "", "text": "Keep"}, {"id": "option 1", "text": "Drop"}],
            [("option 1 (2)", "Keep"), ("option 1", "Drop")],
        ),
        ([{"id": "a", "text": "b"}, {"id": "b", "text": " "}], [("a", "b"), ("b", "b (2)")]),
    ):
        packet = asyncio.run(run_dci(_panel({"options": options}), client))  # type: ignore[arg-type]
        assert packet.status == "complete", packet.status_detail
        assert [(o.label, o.text) for o in packet.options[:2]] == expected


_NAMES = st.sampled_from(["", " ", "a", "A", "b", "option 1", "Option  2", "option 2 (2)"])


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.lists(st.tuples(_NAMES, _NAMES), max_size=5))
def test_task_options_are_never_blank_and_never_repeat_a_name(
    options: list[tuple[str, str]],
) -> None:
    ids = [fold_text(i) for i, _ in options if i.strip()]
    texts = [fold_text(t) for _, t in options if t.strip()]
    assume(len(set(ids)) == len(ids) and len(set(texts)) == len(texts))  # the case's own
    made = task_options(options)
    assert len(made) == len(options)
    for (oid, text), option in zip(options, made, strict=True):
        assert option.id.strip() and option.text.strip()
        assert option.id == oid or not oid.strip()  # a given id or text is kept as it is
        assert option.text == text or not text.strip()
    assert len({fold_text(o.id) for o in made}) == len(made)
    assert len({fold_text(o.text) for o in made}) == len(made)
