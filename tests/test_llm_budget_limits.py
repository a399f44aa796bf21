"""Budget limits and prices are finite and non-negative: a NaN, infinite or negative one
is a ConfigError naming the field, never a limit silently turned off. A limit counts
the attempts in flight: their reservations and what is spent never sum above it."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dissensus.errors import ConfigError
from dissensus.llm.base import BudgetExceeded
from dissensus.llm.budget import Budget, Price, Reservation

BAD = st.one_of(
    st.sampled_from([math.nan, math.inf, -math.inf, float("1e400")]),
    st.floats(max_value=-1e-300, allow_nan=False, allow_infinity=False),
)
"""NaN, infinities and negative numbers."""

GOOD = st.floats(min_value=0, max_value=1e6, allow_nan=False, allow_infinity=False)


@settings(max_examples=60, derandomize=True)
@given(value=BAD, name=st.sampled_from(["max_calls", "max_tokens", "max_cost"]))
def test_a_bad_limit_is_refused_naming_its_field(value: float, name: str) -> None:
    with pytest.raises(ConfigError) as info:
        Budget(**{name: value})  # type: ignore[arg-type]
    assert info.value.field == name and name in str(info.value)


@settings(max_examples=60, derandomize=True)
@given(value=BAD, name=st.sampled_from(["input_per_mtok", "output_per_mtok"]), other=GOOD)
def test_a_bad_price_is_refused_naming_its_field(value: float, name: str, other: float) -> None:
    fields = {"input_per_mtok": other, "output_per_mtok": other, name: value}
    with pytest.raises(ConfigError) as info:
        Price(**fields)
    assert info.value.field == name and name in str(info.value)


def test_nan_completion_reserve_is_refused() -> None:
    with pytest.raises(ConfigError, match="completion_reserve"):
        Budget(completion_reserve=math.nan)  # type: ignore[arg-type]


@settings(max_examples=60, derandomize=True)
@given(
    max_cost=GOOD,
    prices=st.tuples(GOOD, GOOD),
    prompt=st.integers(0, 10**6),
    completion=st.integers(0, 10**6),
)
def test_every_accepted_budget_enforces_its_cost_limit(
    max_cost: float, prices: tuple[float, float], prompt: int, completion: int
) -> None:
    """Whatever valid limit and prices: an attempt is reserved only while the spend
    stays within the limit, and cost is never negative."""
    price = Price(input_per_mtok=prices[0], output_per_mtok=prices[1])
    budget = Budget(max_cost=max_cost, prices={"m": price})
    cost = price.cost(prompt, completion)
    assert cost >= 0
    for _ in range(3):
        try:
            r = budget.reserve(model="m", prompt_tokens=prompt, completion_tokens=completion)
        except BudgetExceeded:
            assert budget.spent.cost + cost > max_cost
            break
        budget.settle(r, model="m", prompt_tokens=prompt, completion_tokens=completion)
        assert budget.spent.cost <= max_cost + 1e-9 * max(1.0, max_cost)


def test_the_reported_nan_budget_lets_no_call_through() -> None:
    with pytest.raises(ConfigError, match="max_cost"):
        Budget(max_cost=math.nan, prices={"m": Price(input_per_mtok=1e6, output_per_mtok=1e6)})


PRICE = Price(input_per_mtok=5.0, output_per_mtok=15.0)  # $20e-6 for 1+1 tokens, 2 tokens


@pytest.mark.parametrize("limit", ["tokens", "cost"])
def test_an_attempt_in_flight_counts_against_the_next_reservation(limit: str) -> None:
    """Two attempts of 40 tokens each against a limit of 60: the second is refused while
    the first is in flight (reserved, not settled), and allowed once it is settled small."""
    budget = (
        Budget(max_tokens=60, prices={"m": PRICE})
        if limit == "tokens"
        else Budget(max_cost=PRICE.cost(30, 30), prices={"m": PRICE})
    )
    first = budget.reserve(model="m", prompt_tokens=20, completion_tokens=20)
    with pytest.raises(BudgetExceeded, match=f"{'token' if limit == 'tokens' else 'cost'} budget"):
        budget.reserve(model="m", prompt_tokens=20, completion_tokens=20)
    budget.settle(first, model="m", prompt_tokens=5, completion_tokens=5)
    budget.reserve(model="m", prompt_tokens=20, completion_tokens=20)


_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("reserve"), st.integers(0, 60), st.integers(0, 60)),
        st.tuples(st.just("settle"), st.integers(0, 99), st.floats(0, 1)),
        st.tuples(st.just("release"), st.integers(0, 99), st.just(0.0)),
    ),
    max_size=30,
)


@settings(max_examples=150, derandomize=True)
@given(limit=st.sampled_from(["tokens", "cost"]), cap=st.integers(0, 200), ops=_OPS)
def test_reservations_in_flight_never_sum_above_the_limit(
    limit: str, cap: int, ops: list[tuple[str, int, float]]
) -> None:
    """Whatever reservations are made, settled (at most what was reserved) or released,
    in whatever order: what is spent plus what is in flight stays within the limit, and
    a reservation is refused only when it would not."""
    max_cost = PRICE.cost(cap, 0)
    budget = (
        Budget(max_tokens=cap, prices={"m": PRICE})
        if limit == "tokens"
        else Budget(max_cost=max_cost, prices={"m": PRICE})
    )
    slack = 1e-9 * max(1.0, max_cost)
    flight: list[tuple[Reservation, int, int]] = []

    def used() -> tuple[int, float]:
        spent = budget.spent
        tokens = spent.total_tokens + sum(p + c for _, p, c in flight)
        cost = spent.cost + sum(PRICE.cost(p, c) for _, p, c in flight)
        return tokens, cost

    for kind, a, b in ops:
        if kind == "reserve":
            before = used()
            try:
                r = budget.reserve(model="m", prompt_tokens=a, completion_tokens=int(b))
            except BudgetExceeded:
                if limit == "tokens":
                    assert before[0] + a + int(b) > cap
                else:
                    assert before[1] + PRICE.cost(a, int(b)) > max_cost - slack
                continue
            flight.append((r, a, int(b)))
        elif flight:
            r, p, c = flight.pop(a % len(flight))
            if kind == "settle":
                budget.settle(r, model="m", prompt_tokens=int(p * b), completion_tokens=int(c * b))
            else:
                budget.release(r)
        tokens, cost = used()
        if limit == "tokens":
            assert tokens <= cap
        else:
            assert cost <= max_cost + slack
