"""What a Ray worker reports a case's new model events charge (no Ray instance needed).

The driver settles a block it abandons half-journalled with what its worker spent less
what its journalled cases charge by their own events (``_Flight.abandon``), so that a
resumed run charges each attempt once. What a case charges must therefore be exactly
what journalling its new events adds to a resumed run's charge
(:func:`~dissensus.pipeline.durable.replay_spend`), whatever the case's journal already
held (a resumed case: calls cut off, failed, or done).
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given
from hypothesis import strategies as st

from dissensus.engines.ray.charge import _case_charge
from dissensus.llm.budget import Budget
from dissensus.pipeline.durable import replay_spend
from dissensus.store import event_types as ev
from dissensus.store.journal import Journal


@dataclass(frozen=True)
class _Spend:
    """One call key's events of one side (journalled before, or new)."""

    sent: int
    failed: tuple[tuple[int, int], ...]
    """``(attempts, tokens)`` of each failure."""
    done: tuple[int, int] | None
    """``(attempts, tokens)`` of the call journalled as done."""
    answered: int = 0
    """Tokens of each answer that failed validation before a re-ask: the ``i``-th attempt
    sent journals ``i * answered`` spent before it (``model.sent``'s ``spent``)."""


_SPEND = st.builds(
    _Spend,
    st.integers(0, 3),
    st.lists(st.tuples(st.integers(0, 3), st.integers(0, 50)), max_size=2).map(tuple),
    st.none() | st.tuples(st.integers(0, 3), st.integers(0, 500)),
    st.integers(0, 40),
)


def _usage(attempts: int, tokens: int) -> dict[str, int]:
    return {"calls": 1, "attempts": attempts, "prompt_tokens": tokens, "completion_tokens": 1}


def _append(journal: Journal, call: str, spend: _Spend, sent: int, failed: int) -> None:
    """Append ``spend``'s events of call ``call``, numbering its attempts from ``sent``
    and its failures from ``failed``."""
    for i, n in enumerate(range(sent, sent + spend.sent)):
        payload: dict[str, object] = {"call": call, "n": n}
        if i * spend.answered:
            payload["spent"] = _usage(i, i * spend.answered)
        journal.append("R", ev.MODEL_SENT, payload, key=f"sent/{call}/{n}", case="7")
    for n, (attempts, tokens) in enumerate(spend.failed, start=failed):
        payload = {"call": call, "usage": _usage(attempts, tokens), "outcome": "failed"}
        journal.append("R", ev.MODEL_FAILED, payload, key=f"failed/{call}/{n}", case="7")
    if spend.done is not None:
        attempts, tokens = spend.done
        payload = {
            "request": {},
            "text": "ok",
            "model": "m",
            "attempts": attempts,
            "usage": _usage(attempts, tokens),
        }
        journal.append("R", ev.MODEL_CALL, payload, key=call, case="7")


def _charged(journal: Journal) -> tuple[int, int, int]:
    """What a resumed run charges: attempts, tokens its budget is charged (a local
    resume's), tokens of the total returned (a Ray resume's ledger: also those of calls
    of no attempt, never journalled in practice)."""
    budget = Budget()
    spent = replay_spend(journal, "R", budget)
    assert spent.attempts == budget.spent.attempts
    return spent.attempts, budget.spent.total_tokens, spent.total_tokens


@given(st.lists(st.tuples(_SPEND, _SPEND), min_size=1, max_size=3))
def test_a_cases_charge_is_what_journalling_its_new_events_adds_on_resume(
    calls: list[tuple[_Spend, _Spend]],
) -> None:
    journal = Journal(":memory:")
    journal.create_run("R", kind="decide", meta={})
    keys = [f"call/7/{i:032x}/0" for i in range(len(calls))]
    for key, (old, new) in zip(keys, calls, strict=True):
        if old.done is not None and new.done is not None:
            new = _Spend(new.sent, new.failed, None, new.answered)  # journalled as done once
        _append(journal, key, old, 0, 0)
    seeded = {e.key for e in journal.events("R")}
    before = _charged(journal)
    for key, (old, new) in zip(keys, calls, strict=True):
        if old.done is not None:
            new = _Spend(new.sent, new.failed, None, new.answered)
        _append(journal, key, new, old.sent, len(old.failed))
    after = _charged(journal)
    events = [e for e in journal.events("R") if e.case == "7"]
    attempts, tokens = _case_charge(events, seeded)
    assert (attempts, tokens) == (after[0] - before[0], after[1] - before[1])
    assert tokens <= after[2] - before[2]  # never more: the settlement is never too small
