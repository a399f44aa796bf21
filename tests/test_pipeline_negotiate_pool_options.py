"""decide's negotiation tells a panel's options apart by id: two options of one text are
two decisions with their own utilities (never merged into each other), and an option
whose text reads as the pipeline's fixed anchor text is tabled as any other."""

from __future__ import annotations

import asyncio

from dissensus.concord import verify
from dissensus.pipeline.negotiate import run_concord
from dissensus.pipeline.policy import ConcordSettings
from dissensus.types import Panel

SETTINGS = ConcordSettings(floor=0.7, margin=0.05, rounds=6)


def _run(meta: dict[str, object]) -> tuple[str, str | None, list[str], bool]:
    panel = Panel.model_validate(
        {
            "id": "p1",
            "meta": meta,
            "outputs": [
                {"agent": "a", "decision": "1", "reasoning": "x"},
                {"agent": "b", "decision": "2", "reasoning": "y"},
            ],
        }
    )
    step = asyncio.run(run_concord(panel, SETTINGS))
    cert = step.certificate
    notes = [n for s in cert.trajectory for n in s.notes]
    faults = [f.message for s in cert.trajectory for f in s.faults]
    assert verify(cert.model_dump(mode="json")).valid
    return step.status, step.decision, notes + faults, bool(cert.candidates)


def test_two_options_of_one_text_are_two_decisions() -> None:
    utilities = {"a": {"1": 0.9, "2": 0.75}, "b": {"1": 0.5, "2": 0.95}}
    for options in (
        {"1": "Paris", "2": "Paris"},
        [{"id": "1", "text": "Paris"}, {"id": "2", "text": "Paris"}],
    ):
        status, decision, said, _ = _run({"options": options, "utilities": utilities})
        assert (status, decision) == ("certified", "2")
        assert not any("merged" in n for n in said), said


def test_an_option_with_the_anchor_text_is_tabled() -> None:
    utilities = {"a": {"1": 0.2, "2": 0.9}, "b": {"1": 0.3, "2": 0.8}}
    for text in ("no option is adopted", "an option every role fully endorses"):
        meta = {"options": {"1": "keep", "2": text}, "utilities": utilities}
        status, decision, said, tabled = _run(meta)
        assert (status, decision, tabled) == ("certified", "2", True)
        assert not any("anchor" in n for n in said), said
