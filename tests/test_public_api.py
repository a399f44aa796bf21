"""The public surface is explicit and pinned."""

from __future__ import annotations

import dissensus

EXPECTED = {
    "AgentOutput",
    "Evidence",
    "Panel",
    "Usage",
    "Vote",
    "VoteCase",
    "__version__",
    "guard_votes",
    "decide",
    "deliberate",
    "negotiate",
    "read_panel",
    "read_panels",
    "resolve_model",
    "route",
    "verify",
}


def test_root_all_is_pinned() -> None:
    assert set(dissensus.__all__) == EXPECTED


def test_every_exported_name_resolves() -> None:
    for name in dissensus.__all__:
        assert getattr(dissensus, name) is not None


def test_lazy_entry_points_are_the_part_functions() -> None:
    from dissensus.guard import guard_votes
    from dissensus.pipeline import decide

    assert dissensus.guard_votes is guard_votes
    assert dissensus.decide is decide
