"""Budget limits and prices are finite and non-negative: a NaN, infinite or negative one
is a ConfigError naming the field, never a limit silently turned off."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dissensus.errors import ConfigError
from dissensus.llm.base import BudgetExceeded
from dissensus.llm.budget import Budget, Price

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
