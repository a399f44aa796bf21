"""One typed case parsed once from ``meta``, one family table."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from dissensus.cases import CaseSpec
from dissensus.families import canonical_family, model_family
from dissensus.pipeline.followup import case_options, case_question
from dissensus.pipeline.trust_regions import calibrated_accept
from dissensus.signals import MarkerLexicon, agent_signals
from dissensus.types import Panel

texts = st.text(min_size=1, max_size=8)


def test_options_without_ids_are_numbered_by_position_for_every_reader() -> None:
    meta = {"question": "Q?", "options": [{"text": "first"}, {"text": "second"}, "third"]}
    spec = CaseSpec.from_meta(meta)
    assert spec.pairs() == [("1", "first"), ("2", "second"), ("third", "third")]
    panel = Panel.model_validate(
        {
            "id": "p",
            "meta": meta,
            "outputs": [
                {"agent": "a", "decision": "1", "reasoning": "r"},
                {"agent": "b", "decision": "2", "reasoning": "r"},
            ],
        }
    )
    assert case_options(panel) == spec.pairs()  # the re-ask prompt's reader
    assert case_question(panel) == "Q?"
    assert "None" not in spec.option_ids()


def test_labels_are_how_agents_refer_to_options() -> None:
    pairwise = CaseSpec.from_meta({"input": "Which?", "output_1": "A", "output_2": "B"})
    assert [o.label for o in pairwise.options] == ["Output (a)", "Output (b)"]
    llmbar = CaseSpec.from_meta({"source": "LLMBar", "options": {"1": "x", "2": "y"}})
    assert [o.label for o in llmbar.options] == ["Output (a)", "Output (b)"]
    given_labels = CaseSpec.from_meta({"options": ["x", "y"], "option_labels": ["Left", "Right"]})
    assert [o.label for o in given_labels.options] == ["Left", "Right"]
    plain = CaseSpec.from_meta({"options": {"keep": "Keep it", "remove": "Remove it"}})
    assert [o.label for o in plain.options] == ["keep", "remove"]
    numbered = {"options": ["x", "y"]}
    assert [o.label for o in CaseSpec.from_meta({"options": {"1": "x", "2": "y"}}).options] == [
        "1",
        "2",
    ]
    spoken = CaseSpec.from_meta({"options": {"1": "x", "2": "y"}}, ["Output (b) is better."])
    assert [o.label for o in spoken.options] == ["Output (a)", "Output (b)"]
    assert [o.label for o in CaseSpec.from_meta(numbered, ["Output (a)"]).options] == ["x", "y"]


def test_utilities_are_parsed_with_the_reason_they_are_unusable() -> None:
    good = CaseSpec.from_meta({"utilities": {"a": {"1": 0.5, "2": 1}}})
    assert good.utilities == {"a": {"1": 0.5, "2": 1.0}} and good.utilities_problem is None
    for bad in ({"a": {"1": True}}, {"a": {"1": 1.5}}, {"a": "x"}, ["a"]):
        spec = CaseSpec.from_meta({"utilities": bad})
        assert spec.utilities is None and spec.utilities_problem
    assert CaseSpec.from_meta({}).utilities_problem is None


option_items = st.one_of(
    texts,
    st.integers(0, 9),
    st.fixed_dictionaries({}, optional={"id": st.one_of(texts, st.integers(0, 9)), "text": texts}),
)


@given(
    st.one_of(
        st.lists(option_items, max_size=6),
        st.dictionaries(texts, texts, max_size=6),
        st.none(),
        texts,
    ),
    st.dictionaries(
        st.sampled_from(["question", "input", "prompt", "x"]), st.one_of(texts, st.integers())
    ),
)
def test_any_meta_gives_a_case_with_distinct_string_ids(
    options: Any, extra: dict[str, Any]
) -> None:
    meta = {**extra, "options": options}
    spec = CaseSpec.from_meta(meta)
    ids = spec.option_ids()
    assert len(ids) == len(set(ids)) and all(isinstance(i, str) and i != "None" for i in ids)
    assert all(o.label for o in spec.options)
    assert spec.question is None or spec.question.strip()
    assert CaseSpec.from_meta(meta) == spec  # deterministic


def test_one_family_table() -> None:
    assert model_family("Meta-Llama-3-8B-Instruct") == "meta"
    assert model_family("meta-llama/Llama-3.1-8B") == "meta"
    assert model_family("gpt-4o-mini") == model_family("gpt-3.5-turbo-0125") == "openai"
    assert model_family("dolphin-2.9") == "dolphin-2.9"  # a prefix, never a substring
    assert canonical_family("OpenAI") == canonical_family("openai") == "openai"
    assert canonical_family("gpt-4o") == "openai"
    assert canonical_family("MyOrg") == canonical_family("myorg")
    assert canonical_family(None) is None


def test_one_vendor_spelled_twice_is_one_independent_family() -> None:
    """Two agents of one vendor, its name spelled by two adapters, count once."""
    outputs = [
        {
            "agent": "a",
            "decision": "1",
            "reasoning": "r",
            "family": "openai",
            "reask": {"decision": "1"},
        },
        {
            "agent": "b",
            "decision": "1",
            "reasoning": "r",
            "family": "OpenAI",
            "reask": {"decision": "1"},
        },
        {
            "agent": "c",
            "decision": "1",
            "reasoning": "r",
            "family": "meta",
            "reask": {"decision": "1"},
        },
    ]
    panel = Panel.model_validate({"id": "p", "outputs": outputs})
    from dissensus.signals import recorded_second_answers

    signals = agent_signals(panel, recorded_second_answers(panel), MarkerLexicon())
    verdict = calibrated_accept(
        signals, {}, veto_precision=0.75, min_families=3, fallback_max_score=0
    )
    assert not verdict.accepted and "2 independent famil" in verdict.reason
    two = calibrated_accept(signals, {}, veto_precision=0.75, min_families=2, fallback_max_score=0)
    assert two.accepted
