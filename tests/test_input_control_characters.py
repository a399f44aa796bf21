"""A panel's labels and names (an agent id, a decision, a re-ask's decision, a family) are
one line of text without a control character: a NUL or a BEL in a decision showed as
nothing (or as U+FFFD in a web page), made options that looked alike, and no reviewer
could resolve a case with it (resolutions refuse control characters). Such a panel is
rejected naming the field, on every input path; reasoning and ``meta`` keep any text.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from cli_helpers import run_cli
from dissensus.io.jsonl import Reject, parse_line
from dissensus.io.views import parse_panel_view
from dissensus.panels.answers import read_answer
from dissensus.pipeline.policy import PanelSettings
from dissensus.types import Panel
from serve_helpers import auth, client_for
from serve_helpers import settings as serve_settings

CONTROLS = [chr(c) for c in [*range(0x20), *range(0x7F, 0xA0)]]
FIELDS = ["agent", "decision", "family", "reask"]


def _panel(*, field: str = "decision", value: str = "approve", at: int = 1) -> dict[str, Any]:
    outputs: list[dict[str, Any]] = [
        {"agent": "alice", "decision": "approve", "reasoning": "looks\nfine", "family": "f1"},
        {"agent": "bob", "decision": "approve", "reasoning": "looks\tfine\r\n", "family": "f2"},
        {"agent": "carol", "decision": "reject", "reasoning": "suspicious", "family": "f3"},
    ]
    if field == "reask":
        outputs[at]["reask"] = {"decision": value, "reasoning": "again\n"}
    else:
        outputs[at][field] = value
    meta = {"question": "Approve the\nwire transfer?\x07", "note": "\x00 kept"}
    return {"id": "lookalike", "meta": meta, "outputs": outputs}


def _where(field: str, at: int = 1) -> str:
    return f"outputs.{at}.reask.decision" if field == "reask" else f"outputs.{at}.{field}"


def _message(field: str, char: str) -> str:
    name = "decision" if field == "reask" else field
    return (
        f"{name} holds the control character U+{ord(char):04X}; "
        "an agent id, a decision or a family is one line without control characters"
    )


@settings(max_examples=200, derandomize=True, deadline=None)
@given(st.sampled_from(FIELDS), st.sampled_from(CONTROLS), st.sampled_from(["", "appro", "x y"]))
def test_a_control_character_in_a_label_or_name_is_rejected_on_every_tier(
    field: str, char: str, before: str
) -> None:
    """The models, the native tier, the view tier and the reference path agree: a
    reject naming the field, with the same message."""
    data = _panel(field=field, value=f"{before}{char}ve")
    with pytest.raises(ValidationError) as caught:
        Panel.model_validate(data)
    (error,) = caught.value.errors()
    assert ".".join(map(str, error["loc"])) == _where(field)
    line = json.dumps(data)
    for got in (
        parse_line(Panel, line, file="p.jsonl", line=4),
        parse_panel_view(line, file="p.jsonl", line=4),
        parse_line(Panel, json.dumps(data, ensure_ascii=False), file="p.jsonl", line=4),
    ):
        assert isinstance(got, Reject), got
        assert (got.field, got.message) == (_where(field), _message(field, char))


def test_reasoning_meta_and_visible_characters_are_kept() -> None:
    """Line breaks in reasoning, any text in ``meta``, and characters that are no
    controls (a zero-width joiner, a bidi mark, a tag) in a label are all accepted."""
    for value in ("appro\u200dve", "approve\u200e", "approve\U000e0061", "approve\u00a0"):
        for field in FIELDS:
            line = json.dumps(_panel(field=field, value=value), ensure_ascii=False)
            got = parse_line(Panel, line, file="p.jsonl", line=1)
            assert isinstance(got, Panel), got
            assert not isinstance(parse_panel_view(line, file="p.jsonl", line=1), Reject)
            assert got.outputs[0].reasoning == "looks\nfine"
            assert got.meta["note"] == "\x00 kept"
            assert got.outputs[1].reasoning == "looks\tfine\r\n"


def test_the_reviewers_panel_is_rejected_by_the_cli_naming_the_field(tmp_path: Path) -> None:
    good = _panel()
    nul = _panel(value="appro\u0000ve")
    bel = _panel(value="appro\u0007ve", at=2)
    agent = _panel(field="agent", value="ali\u0000ce")
    family = _panel(field="family", value="f\n2")
    path = tmp_path / "panels.jsonl"
    path.write_text("\n".join(json.dumps(p) for p in (good, nul, bel, agent, family)) + "\n")
    res = run_cli("route", path, "--similarity", "tfidf", "--json")
    assert res.returncode == 3, res.stderr
    assert [json.loads(r)["line"] for r in res.stdout.splitlines()] == [1]  # the good line
    rejects = [r for r in res.stderr.splitlines() if r.startswith("rejected")]
    assert rejects == [
        f"rejected {path}:2: field 'outputs.1.decision': {_message('decision', chr(0))}",
        f"rejected {path}:3: field 'outputs.2.decision': {_message('decision', chr(7))}",
        f"rejected {path}:4: field 'outputs.1.agent': {_message('agent', chr(0))}",
        f"rejected {path}:5: field 'outputs.1.family': {_message('family', chr(10))}",
    ]


@pytest.mark.anyio
async def test_the_reviewers_panel_is_refused_by_the_service(tmp_path: Path) -> None:
    body = {
        "id": "lookalike",
        "meta": {"question": "Approve the wire transfer?"},
        "outputs": [
            {"agent": "alice", "decision": "approve", "reasoning": "looks fine", "family": "f1"},
            {
                "agent": "ali\u0000ce",
                "decision": "appro\u0000ve",
                "reasoning": "looks fine",
                "family": "f2",
            },
            {
                "agent": "bob",
                "decision": "appro\u0001ve",
                "reasoning": "looks fine",
                "family": "f3",
            },
            {"agent": "carol", "decision": "reject", "reasoning": "suspicious", "family": "f4"},
        ],
    }
    async with client_for(serve_settings(tmp_path)) as client:
        res = await client.post("/v1/decide", json=body, headers=auth("sub"))
    assert res.status_code == 422, res.text
    assert res.json()["field"] == "outputs.1.agent"
    assert res.json()["error"] == _message("agent", chr(0))


@pytest.mark.parametrize(
    ("text", "answer"),
    [
        ('{"decision": "appro\\u0000ve", "reasoning": "r"}', "structured"),
        ("verdict: appro\x07ve", "regex"),
    ],
)
def test_a_members_decision_with_a_control_character_is_an_abstention(
    text: str, answer: str
) -> None:
    """The chat door's members: such an answer is no vote (the panel could not hold it),
    never a failed request."""
    st_ = PanelSettings(answer=answer, pattern=r"verdict: (\S+)" if answer == "regex" else None)
    got = read_answer(text, st_)
    assert got.decision is None
    assert got.why is not None and "control character" in got.why


OPTION_FORMS = [
    ({"options": [{"id": "a\x07", "text": "first"}, {"id": "b", "text": "second"}]}, "meta.options.0.id"),
    ({"options": ["x", "y\x00"]}, "meta.options.1"),
    ({"options": {"a": "first", "b\x1b": "second"}}, "meta.options.b\x1b"),
]  # fmt: skip


@pytest.mark.parametrize(("meta", "field"), OPTION_FORMS)
def test_an_option_id_with_a_control_character_is_rejected_naming_it(
    meta: dict[str, Any], field: str
) -> None:
    """An option id is a decision a reviewer or a live re-ask may pick: one holding a
    control character could never be resolved to (resolutions refuse it), and a re-ask
    picking it failed its run with a traceback on every resume."""
    line = json.dumps({**_panel(), "meta": {"question": "Pick", **meta}})
    for got in (
        parse_line(Panel, line, file="p.jsonl", line=1),
        parse_panel_view(line, file="p.jsonl", line=1),
    ):
        assert isinstance(got, Reject), got
        assert got.field == field and "control character" in got.message
    clean = json.dumps({**_panel(), "meta": {"question": "Pick", "options": ["a", "b"]}})
    assert not isinstance(parse_line(Panel, clean, file="p.jsonl", line=1), Reject)


def test_a_vote_with_a_control_character_is_rejected_naming_the_field(tmp_path: Path) -> None:
    """``dissensus vote`` read a control character in an answer (``x\\x85`` counted apart
    from ``x``), an agent, a family and a gold; they are refused as a panel's are."""
    votes = [
        {"agent": f"a{k}", "answer": "x", "evidence_source": f"s{k}", "evidence_present": True}
        for k in range(3)
    ]
    bad = [
        ({"answer": "x\x85"}, "votes.0.answer"),
        ({"agent": "a\x00"}, "votes.0.agent"),
        ({"family": "f\x01"}, "votes.0.family"),
    ]
    lines = [
        json.dumps({"id": f"v{i}", "votes": [{**votes[0], **change}, *votes[1:]]})
        for i, (change, _) in enumerate(bad)
    ]
    lines.append(json.dumps({"id": "gold", "votes": votes, "gold": "x\x00"}))
    lines.append(json.dumps({"id": "ok", "votes": votes, "gold": "x"}))
    src = tmp_path / "votes.jsonl"
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    result = run_cli("vote", src, "--json")
    rejected = [x for x in result.stderr.splitlines() if x.startswith("rejected ")]
    fields = [field for _, field in bad] + ["gold"]
    assert len(rejected) == len(fields), result.stderr
    for line, field in zip(rejected, fields, strict=True):
        assert f"field '{field}'" in line and "control character" in line, line
    assert [json.loads(x)["id"] for x in result.stdout.splitlines()] == ["ok"]
