"""Options that differ only in symbols (``C++`` / ``C#``, ``N+1`` / ``N-1``) stay apart:
in the baselines' vote counting, in DCI's stage-2 canonicalisation and in the pipeline's
DCI follow-up. The task's own options are never merged; proposals still are."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from dissensus.agents.deliberator import deliberate_with_model
from dissensus.baselines.deliberation import BaselineSettings, run_baseline_sync
from dissensus.dci.packet import DecisionPacket
from dissensus.dci.selection import canonical_merges, match_name, normalise_text
from dissensus.dci.task import Task, parse_task
from dissensus.errors import ConfigError
from dissensus.llm import ModelClient, ScriptedBackend
from dissensus.pipeline.followup import run_dci
from dissensus.types import AgentOutput, Panel

LANG = parse_task(
    {
        "id": "lang",
        "question": "Which language should the new trading engine be written in?",
        "options": [{"id": "C++", "text": "C++"}, {"id": "C#", "text": "C#"}],
    }
)


def _vote(choice: str) -> dict[str, object]:
    return {"choice": choice, "answer": f"{choice} is the better choice.", "confidence": 0.9}


def _client(rules: list[dict[str, object]], default: object = None) -> ModelClient:
    script: dict[str, object] = {"rules": rules}
    if default is not None:
        script["default"] = default
    return ModelClient(ScriptedBackend.from_dict(script))


# ------------------------------------------------------------- normalisation
@pytest.mark.parametrize(
    ("left", "right"),
    [
        ("C++", "C#"),
        ("Scale to N+1 replicas", "Scale to N-1 replicas"),
        ("Write the engine in C++", "Write the engine in C#"),
        ("Write the engine in C", "Write the engine in C++"),
        (".NET", "NET"),
        ("Python 3.5", "Python 35"),
        ("A* search", "A search"),
        ("latency <5ms", "latency 5ms"),
        ("-1", "1"),
        ("blue-green", "blue green"),
    ],
)
def test_symbols_that_carry_meaning_are_kept(left: str, right: str) -> None:
    assert normalise_text(left) != normalise_text(right)


@pytest.mark.parametrize(
    ("left", "right"),
    [
        ("Use Redis", '"use redis."'),
        ("(C++)", "c++"),
        ("Canary deploy, then roll out!", "canary  deploy then roll out"),
        ("C#.", "c#"),
    ],
)
def test_case_spacing_and_prose_punctuation_are_folded(left: str, right: str) -> None:
    assert normalise_text(left) == normalise_text(right)


def test_a_name_matching_several_candidates_at_its_tier_matches_none() -> None:
    candidates = {"a": ["Red."], "b": ["red!"]}
    assert match_name("Red.", candidates) == "a"  # exact wins over the looser tiers
    assert match_name("RED!", candidates) == "b"  # case and spacing folded
    assert match_name("red", candidates) is None  # both only after normalisation


# ------------------------------------------------------------------ baselines
@pytest.mark.parametrize("method", ["single", "voting"])
def test_a_vote_for_c_sharp_counts_for_c_sharp(method: str) -> None:
    # Regression: every voter chose "C#" and the result said "C++".
    client = _client([], default=_vote("C#"))
    out = run_baseline_sync(method, client, LANG)  # type: ignore[arg-type]
    assert out.selected_option == "C#" and out.status == "complete"
    assert set(out.extras["votes"].values()) == {"C#"}


def test_votes_by_id_text_and_loose_spelling_each_reach_their_option() -> None:
    rules = [
        {"match": {"agent": f"voter{i}"}, "json": _vote(c)}
        for i, c in enumerate(["c#", "C++", " c++ ", "(C#).", "C"], 1)
    ]
    out = run_baseline_sync("voting", _client(rules), LANG)
    assert out.extras["votes"] == {"voter1": "C#", "voter2": "C++", "voter3": "C++", "voter4": "C#"}
    assert out.extras["abstained"] == ["voter5"]  # "C" names neither option


def test_an_ambiguous_choice_is_an_abstention_not_the_first_option() -> None:
    task = parse_task(
        {
            "question": "Which cache?",
            "options": [{"id": "a", "text": "Use Redis."}, {"id": "b", "text": "Use Redis!"}],
        }
    )
    rules = [
        {"match": {"agent": "voter1"}, "json": _vote("use redis")},
        {"match": {"agent": "voter2"}, "json": _vote("Use Redis!")},
    ]
    out = run_baseline_sync("voting", _client(rules), task, settings=BaselineSettings(voters=2))
    assert out.extras["abstained"] == ["voter1"] and out.extras["votes"] == {"voter2": "b"}
    assert out.selected_option == "b"


def test_option_texts_equal_ignoring_case_and_spacing_are_refused() -> None:
    with pytest.raises(ConfigError, match="duplicate option text") as info:
        parse_task(
            {
                "question": "q",
                "options": [{"id": "a", "text": "Use Redis"}, {"id": "b", "text": " use  REDIS"}],
            },
            file="t.yaml",
        )
    assert info.value.field == "options.1.text"
    # Texts that differ otherwise are distinct options.
    assert len(parse_task({"question": "q", "options": LANG.model_dump()["options"]}).options) == 2


_TEXT = st.one_of(
    st.sampled_from(["C++", "C#", "c++", "C", "N+1", "N-1", "n+1.", ".NET", "Red.", "red!"]),
    st.text(st.characters(blacklist_categories=("Cc", "Cs")), min_size=1, max_size=8),
)
_OPTIONS = st.lists(
    st.tuples(st.text(st.characters(blacklist_categories=("Cc", "Cs")), min_size=1), _TEXT),
    min_size=1,
    max_size=5,
    unique_by=lambda o: o[0],
)


def _task(options: list[tuple[str, str]]) -> Task:
    data = {"question": "q", "options": [{"id": i, "text": t} for i, t in options]}
    try:
        return parse_task(data)
    except ConfigError:
        assume(False)
        raise


@settings(max_examples=60, deadline=None)
@given(options=_OPTIONS)
def test_each_option_s_own_id_and_text_name_it(options: list[tuple[str, str]]) -> None:
    task = _task(options)
    ids = {o.id for o in task.options}
    # A text that is another option's id names that option (ids come first).
    assume(all(o.text == o.id or o.text not in ids for o in task.options))
    names = [o.id for o in task.options] + [o.text for o in task.options]
    rules = [{"match": {"agent": f"voter{i}"}, "json": _vote(n)} for i, n in enumerate(names, 1)]
    voters = BaselineSettings(voters=len(names))
    out = run_baseline_sync("voting", _client(rules), task, settings=voters)
    assert "abstained" not in out.extras
    assert list(out.extras["votes"].values()) == [o.id for o in task.options] * 2


# --------------------------------------------------------------------- DCI
@settings(max_examples=200, deadline=None)
@given(texts=st.lists(_TEXT, min_size=1, max_size=6))
def test_task_options_are_never_merged_and_their_copies_merge_into_them(
    texts: list[str],
) -> None:
    task = [(f"o{i + 1}", t) for i, t in enumerate(texts)]
    copies = [(f"o{len(texts) + i + 1}", t) for i, t in enumerate(texts)]
    merges = canonical_merges(task + copies, {i for i, _ in task})
    assert not set(merges) & {i for i, _ in task}  # every task option is kept
    assert set(merges.values()) <= {i for i, _ in task}
    for (task_id, text), (copy_id, _) in zip(task, copies, strict=True):
        if texts.count(text) == 1:  # an exact copy of one task option merges into it
            assert merges[copy_id] == task_id


def _propose(option: str) -> dict[str, object]:
    return {"act": "propose", "target": "a0", "text": "my proposal", "option": option}


def _dci_rules(proposals: dict[str, str], scored: list[str]) -> list[dict[str, object]]:
    row = {o: 0.9 if o == "o1" else 0.3 for o in scored}
    return [
        {"match": {"stage": "dci.frame"}, "json": {"act": "frame", "target": "a0", "text": "f"}},
        *(
            {"match": {"stage": "dci.propose", "agent": agent}, "json": _propose(text)}
            for agent, text in proposals.items()
        ),
        {
            "match": {"stage": "dci.challenge"},
            "json": {"act": "ground", "target": "o1", "text": "e"},
        },
        {"match": {"stage": "dci.revise"}, "json": {"act": "clarify", "target": "o1", "text": "c"}},
        {
            "match": {"stage": "dci.score"},
            "json": {"act": "recommend", "target": "o1", "text": "o1", "scores": row},
        },
        {
            "match": {"stage": "dci.synthesize"},
            "json": {"act": "synthesize", "target": "o1", "text": "synth"},
        },
    ]


def _statuses(packet: DecisionPacket) -> dict[str, tuple[str | None, str]]:
    return {o.id: (o.label, o.status) for o in packet.options}


def test_dci_keeps_c_plus_plus_and_c_sharp_apart_and_still_merges_proposals() -> None:
    # Regression: option csharp was merged into cpp before any deliberation.
    task = parse_task(
        {
            "question": "Which language should the new trading engine be written in?",
            "options": [
                {"id": "cpp", "text": "Write the engine in C++"},
                {"id": "csharp", "text": "Write the engine in C#"},
            ],
        }
    )
    proposals = {
        "framer": "write the engine in c++",
        "explorer": "Write the engine in C#!",
        "challenger": "Write the engine in Rust",
        "integrator": "Write the engine in C",
    }
    client = _client(_dci_rules(proposals, ["o1", "o2", "o5", "o6"]))
    output, result = asyncio.run(deliberate_with_model(task, client))
    assert output.status == "complete"
    got = _statuses(result.packet)
    assert got["o1"][0] == "cpp" and got["o2"][0] == "csharp"
    merged = {o.id: o.merged_into for o in result.workspace.options.values() if o.merged_into}
    assert merged == {"o3": "o1", "o4": "o2"}
    assert {o: s for o, (_, s) in got.items() if s == "merged"} == dict.fromkeys(merged, "merged")
    assert result.workspace.options["o2"].supporters == ["explorer"]


def test_the_pipeline_dci_follow_up_keeps_n_plus_1_and_n_minus_1_apart() -> None:
    panel = Panel(
        id="c1",
        meta={
            "question": "How should the service scale?",
            "options": {"up": "Scale to N+1 replicas", "down": "Scale to N-1 replicas"},
        },
        outputs=[
            AgentOutput(agent="m1", decision="up", reasoning="Load is rising."),
            AgentOutput(agent="m2", decision="down", reasoning="Load is falling."),
        ],
    )
    proposals = dict.fromkeys(
        ["framer", "explorer", "challenger", "integrator"], "scale to n+1 replicas."
    )
    client = _client(_dci_rules(proposals, ["o1", "o2"]))
    packet = asyncio.run(run_dci(panel, client))  # type: ignore[arg-type]
    got = _statuses(packet)
    assert got["o1"][0] == "up" and got["o2"][0] == "down"
    assert "merged" not in (got["o1"][1], got["o2"][1])
    assert all(got[f"o{i}"] == (None, "merged") for i in range(3, 7))
    assert packet.selected is not None and packet.selected.label == "up"
