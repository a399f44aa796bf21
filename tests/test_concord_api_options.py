"""`negotiate(options=...)` refuses, naming the option, what a problem file refuses: an
option without an id (table agents score by id: every agent passed), two options under
one id (the second was never proposed), an option under an anchor's id (tabled again
under a new name every round)."""

from __future__ import annotations

import pytest

from dissensus.concord import TableAgent, negotiate_sync
from dissensus.concord.agent import Outcome
from dissensus.errors import ConfigError

R0 = Outcome(id="R0", text="no")
I0 = Outcome(id="I0", text="yes")


@pytest.mark.parametrize(
    ("options", "field", "words"),
    [
        ([Outcome(text="a")], "options.0.id", "not blank"),
        ([Outcome(id=" ", text="a")], "options.0.id", "not blank"),
        ([Outcome(id="A", text="a"), Outcome(id="A", text="b")], "options.1.id", "options.0"),
        ([Outcome(id="A", text="a"), Outcome(id="\uff21", text="b")], "options.1.id", "'A'"),
        ([Outcome(id="R0", text="z")], "options.0.id", "rejected anchor"),
    ],
)
def test_an_option_without_an_id_of_its_own_is_refused(
    options: list[Outcome], field: str, words: str
) -> None:
    agent = TableAgent("x", {"R0": 0, "I0": 10, "A": 8})
    with pytest.raises(ConfigError) as info:
        negotiate_sync([agent], rejected=R0, ideal=I0, floor=0.5, rounds=1, options=options)
    assert info.value.field == field
    assert words in str(info.value)


def test_distinct_options_run() -> None:
    agent = TableAgent("x", {"R0": 0, "I0": 10, "A": 8})
    options = [Outcome(id="A", text="a"), Outcome(id="B", text="a")]
    cert = negotiate_sync([agent], rejected=R0, ideal=I0, floor=0.5, rounds=1, options=options)
    assert cert.status == "certified"
