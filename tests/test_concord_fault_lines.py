"""CONCORD fault messages are one line of bounded length, whatever an agent raised.

An agent's exception (a model client's error holding a whole response body, a library's
multi-line traceback text, an exception whose ``__str__`` itself raises) is recorded as
one line of at most 500 characters, the run ends with a certificate and it verifies.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from dissensus.concord import negotiate_sync, verify
from dissensus.concord.agent import NegotiationView, Outcome, ScoreFault
from dissensus.concord.function import FunctionAgent
from dissensus.concord.scale import FAULT_LIMIT

R0 = Outcome(id="R0", text="reject")
I0 = Outcome(id="I0", text="ideal")


def _score(outcome: Outcome, view: NegotiationView) -> float:
    return {"reject": 0.0, "ideal": 10.0}.get(outcome.text, 8.0)


class Unreadable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no text")


def _faults(agent: FunctionAgent) -> list[str]:
    cert = negotiate_sync(
        [FunctionAgent("a", _score), agent],
        rejected=R0,
        ideal=I0,
        floor=0.7,
        rounds=1,
        options=[Outcome(id="A", text="plan")],
    )
    assert verify(cert.model_dump(mode="json")).valid
    messages = [f.message for step in cert.trajectory for f in step.faults]
    messages += [e.fault for c in cert.candidates for e in c.scores.values() if e.fault]
    return messages


@settings(max_examples=40, deadline=None)
@given(st.text(min_size=1, max_size=3000), st.sampled_from(["propose", "score", "score-fault"]))
def test_every_fault_message_is_one_bounded_line(text: str, where: str) -> None:
    def boom(*args: object) -> object:
        raise ValueError(text)

    def answer_fault(outcome: Outcome, view: NegotiationView) -> object:
        return _score(outcome, view) if outcome.id in ("R0", "I0") else ScoreFault(message=text)

    if where == "propose":
        agent = FunctionAgent("b", _score, propose=boom)
    elif where == "score":
        agent = FunctionAgent("b", lambda o, v: _score(o, v) if o.id in ("R0", "I0") else boom())
    else:
        agent = FunctionAgent("b", _score, propose=lambda v: "mine")
        agent._score = answer_fault  # type: ignore[method-assign]
    faults = _faults(agent)
    assert faults
    for message in faults:
        assert len(message) <= FAULT_LIMIT
        assert message == " ".join(message.split())


def test_an_exception_whose_message_raises_is_a_fault_named_by_its_type() -> None:
    def propose(view: NegotiationView) -> object:
        raise Unreadable()

    def score(outcome: Outcome, view: NegotiationView) -> float:
        if outcome.id == "A":
            raise Unreadable()
        return _score(outcome, view)

    assert _faults(FunctionAgent("b", _score, propose=propose)) == [
        "Unreadable: (its message could not be read)"
    ]
    assert "Unreadable: (its message could not be read)" in _faults(FunctionAgent("b", score))


def test_a_long_multi_line_error_is_one_line_cut_to_the_limit() -> None:
    def propose(view: NegotiationView) -> object:
        raise ValueError("line one\nline two\r\n" + "x" * 100_000)

    (message,) = _faults(FunctionAgent("b", _score, propose=propose))
    assert message.startswith("ValueError: line one line two xxx")
    assert len(message) == FAULT_LIMIT and message.endswith("…")
