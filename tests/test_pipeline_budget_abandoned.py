"""A Ray block's reservation settled as abandoned charges what its settlement says (no Ray
needed): the block's events were never journalled, the stopped worker reported its spend."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from dissensus.llm.budget import Budget
from dissensus.pipeline.durable import open_reservations, replay_spend
from dissensus.pipeline.run_events import ModelReserved, ModelSettled
from dissensus.store import Journal
from dissensus.store import event_types as ev


@settings(max_examples=30, deadline=None, derandomize=True)
@given(
    blocks=st.lists(
        st.tuples(
            st.integers(min_value=1, max_value=500),  # reserved calls
            st.integers(min_value=0, max_value=500),  # spent (at most reserved)
            st.sampled_from(["open", "settled", "abandoned"]),
        ),
        max_size=6,
    )
)
def test_an_abandoned_settlement_charges_its_spend(blocks: list[tuple[int, int, str]]) -> None:
    with Journal(":memory:") as journal:
        journal.create_run("r", kind="decide", meta={})
        expected = 0
        for i, (calls, spent, state) in enumerate(blocks):
            spent = min(spent, calls)
            key = f"reserved/{i}/0"
            reserved = ModelReserved(
                block=i, attempt=0, first_line=i + 1, last_line=i + 1, calls=calls, tokens=None
            )
            journal.append("r", ev.MODEL_RESERVED, reserved.payload(), key=key)
            if state == "open":
                expected += calls
                continue
            abandoned = state == "abandoned"
            settled = ModelSettled(reservation=key, attempts=spent, tokens=0)
            if abandoned:
                settled = ModelSettled(reservation=key, attempts=spent, tokens=7, abandoned=True)
                expected += spent
            journal.append("r", ev.MODEL_SETTLED, settled.payload(), key=f"settled/{i}/0")
        budget = Budget()
        total = replay_spend(journal, "r", budget)
        assert total.attempts == budget.spent.attempts == expected
        assert len(open_reservations(journal, "r")) == sum(s == "open" for *_, s in blocks)


def test_an_ordinary_settlement_keeps_its_payload() -> None:
    """Only an abandoned settlement writes the field: the others are what they were."""
    payload = ModelSettled(reservation="reserved/0/0", attempts=3, tokens=0).payload()
    assert payload == {"reservation": "reserved/0/0", "attempts": 3, "tokens": 0}
