"""``dissensus.types.trusted`` writes pydantic's private instance state directly.

The reader and the router build their small models with it (``states/reading.py``,
``states/routing.py``).

It is kept because the route benchmark loses more than 10% without it (measured with
``benchmarks/bench_route.py --only a``). These tests fail loudly if a pydantic upgrade
changes the instance layout it relies on: every object it builds must be
indistinguishable from ``model_construct`` and from a validated instance.
"""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pydantic
import pytest

from dissensus.states import Reading, Thresholds, read_from_matrix
from dissensus.states.routing import Route
from dissensus.types import Panel, trusted

PANEL = Panel.model_validate(
    {
        "id": "c1",
        "outputs": [
            {"agent": f"a{i}", "decision": "x" if i < 3 else "y", "reasoning": f"reason {i}"}
            for i in range(5)
        ],
    }
)
LAYOUT = ("__dict__", "__pydantic_fields_set__", "__pydantic_extra__", "__pydantic_private__")


def _same(a: pydantic.BaseModel, b: pydantic.BaseModel) -> None:
    assert a == b
    assert a.model_dump() == b.model_dump()
    assert a.model_dump_json() == b.model_dump_json()
    assert a.model_fields_set == b.model_fields_set
    assert a.model_copy(update={}) == b
    assert copy.deepcopy(a) == b
    assert pickle.loads(pickle.dumps(a)) == b
    assert type(a).model_validate_json(a.model_dump_json()) == b
    assert repr(a) == repr(b)


@pytest.mark.parametrize("cls", [Reading, Route])
def test_pydantic_keeps_the_instance_layout_trusted_writes(cls: type[pydantic.BaseModel]) -> None:
    # pydantic sets exactly these slots on a constructed instance; a new one would be
    # missing from objects built by trusted().
    built = cls.model_construct()
    assert set(cls.__slots__) <= set(LAYOUT), f"pydantic {pydantic.VERSION} changed its slots"
    for name in LAYOUT:
        assert hasattr(built, name), f"pydantic {pydantic.VERSION} no longer sets {name}"


def test_a_trusted_reading_equals_a_constructed_and_a_validated_one() -> None:
    reading = read_from_matrix(PANEL, np.eye(5), "m", Thresholds(theta_s=0.3, theta_a=0.8))
    values = dict(reading.__dict__)
    fast = trusted(Reading, dict(values))
    _same(fast, Reading.model_construct(**values))
    _same(fast, Reading.model_validate(reading.model_dump()))


def test_a_trusted_route_equals_a_constructed_and_a_validated_one() -> None:
    values = {"action": "auto", "rule": "r1", "defeated": ["r2"], "concurring": []}
    fast = trusted(Route, dict(values))
    _same(fast, Route.model_construct(**values))
    _same(fast, Route.model_validate(values))
