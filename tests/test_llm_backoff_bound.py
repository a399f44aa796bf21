"""Any number of retries keeps backing off within the cap, never overflowing.

``max_retries`` has no upper bound (a client may be set to ride out a long outage), and
the backoff ceiling ``base * 2**n`` overflowed a float at the 1,025th retry: the call
crashed with ``OverflowError`` instead of waiting again.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from dissensus.llm.retry import Backoff


@settings(max_examples=50, deadline=None, derandomize=True)
@given(
    attempt=st.integers(min_value=0, max_value=10**6),
    base=st.floats(min_value=0.0, max_value=1e6),
    cap=st.floats(min_value=0.0, max_value=1e6),
)
def test_the_backoff_of_any_retry_is_within_the_cap(attempt: int, base: float, cap: float) -> None:
    backoff = Backoff(base_s=base, cap_s=cap, retry_after_cap_s=60.0, seed=7)
    assert 0.0 <= backoff.delay(attempt) <= cap


def test_the_retries_past_a_thousand_wait_as_the_ones_before() -> None:
    backoff = Backoff(base_s=0.5, cap_s=20.0, retry_after_cap_s=60.0, seed=0)
    assert [backoff.delay(n) <= 20.0 for n in (1023, 1024, 5000)] == [True] * 3
    assert backoff.delay(2000, retry_after=30.0) == 30.0
