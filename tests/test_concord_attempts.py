"""A model agent's ``attempts()`` that fails never costs the run its record: the count is
reported beside the run (0 for that agent), and the certificate, made after every paid
call, is returned and verifies."""

from __future__ import annotations

import pytest

from dissensus.concord import TableAgent, negotiate_sync, verify
from dissensus.concord.agent import Outcome

R0 = Outcome(id="R0", text="no")
I0 = Outcome(id="I0", text="yes")


class Flaky(TableAgent):
    """A model-backed agent whose usage store answers once, then fails or answers junk."""

    uses_model = True

    def __init__(self, agent_id: str, later: object) -> None:
        super().__init__(agent_id, {"R0": 0, "I0": 10, "A": 8})
        self.later = later
        self.asked = 0

    def attempts(self) -> int:
        self.asked += 1
        if self.asked == 1:
            return 3
        if isinstance(self.later, BaseException):
            raise self.later
        return self.later  # type: ignore[return-value]


@pytest.mark.parametrize("later", [RuntimeError("usage store down"), None, "7", 2.5, True])
def test_an_attempts_count_that_fails_at_the_end_keeps_the_record(later: object) -> None:
    agents = [TableAgent("a", {"R0": 0, "I0": 10, "A": 8}), Flaky("b", later)]
    cert = negotiate_sync(
        agents, rejected=R0, ideal=I0, floor=0.7, options=[Outcome(id="A", text="plan a")]
    )
    assert cert.status == "certified" and cert.spent.attempts == 0
    assert cert.spent.model_calls == 3
    assert verify(cert.model_dump(mode="json")).valid


def test_a_working_attempts_count_is_reported() -> None:
    agents = [TableAgent("a", {"R0": 0, "I0": 10, "A": 8}), Flaky("b", 9)]
    cert = negotiate_sync(
        agents, rejected=R0, ideal=I0, floor=0.7, options=[Outcome(id="A", text="plan a")]
    )
    assert cert.spent.attempts == 6
