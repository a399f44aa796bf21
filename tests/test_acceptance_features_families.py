"""Acceptance features count model families as every comparison does (canonical families)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from dissensus.acceptance import candidate_rows, feature_inputs
from dissensus.types import Panel

SPELLINGS = {
    "openai": ["openai", "OpenAI", " OPENAI ", "gpt-4o", "ChatGPT-0301"],
    "google": ["google", "Google", "PaLM2", "gemma-2-9b"],
    "meta": ["meta", "Meta", "Llama-3-8B", "meta-llama/Llama-2-70b"],
}


def _panel(families: list[str], decisions: list[str]) -> Panel:
    return Panel.model_validate(
        {
            "id": "p",
            "outputs": [
                {"agent": f"a{i}", "decision": d, "reasoning": f"agent {i} picks {d}", "family": f}
                for i, (f, d) in enumerate(zip(families, decisions, strict=True))
            ],
        }
    )


@settings(max_examples=60, deadline=None)
@given(
    picks=st.lists(
        st.tuples(st.sampled_from(sorted(SPELLINGS)), st.integers(0, 4), st.sampled_from("12")),
        min_size=2,
        max_size=6,
    )
)
def test_spellings_of_one_family_give_the_same_rows(picks: list[tuple[str, int, str]]) -> None:
    canonical = [vendor for vendor, _, _ in picks]
    spelled = [SPELLINGS[vendor][k % len(SPELLINGS[vendor])] for vendor, k, _ in picks]
    decisions = [d for _, _, d in picks]
    plain = candidate_rows(feature_inputs(_panel(canonical, decisions)))
    other = candidate_rows(feature_inputs(_panel(spelled, decisions)))
    assert [c.model_dump() for c in plain] == [c.model_dump() for c in other]
    assert plain[0].features["panel.families"] == len(set(canonical))


def test_two_spellings_of_one_vendor_are_one_family() -> None:
    rows = candidate_rows(feature_inputs(_panel(["OpenAI", "openai", "gpt-4o"], ["1", "1", "2"])))
    assert rows[0].features["panel.families"] == 1.0
    assert {c.features["cand.families"] for c in rows} == {1.0}
