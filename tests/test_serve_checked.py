"""The decide route's check with the items' lines made once: the same verdicts as without."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from dissensus.io.limits import Limits
from dissensus.serve.http import checked
from dissensus.serve.runs import item_line
from dissensus.types import Panel

_TEXT = st.text(alphabet=st.sampled_from(["a", "é", "\U0001f600", '"', "\\", "\n"]), max_size=40)

_OUTPUT = st.fixed_dictionaries(
    {"agent": st.sampled_from(["a", "b", "c", "d"]), "decision": st.sampled_from(["1", "2"])},
    optional={"reasoning": _TEXT, "family": _TEXT},
)

_ITEM = st.one_of(
    st.integers(),
    st.fixed_dictionaries(
        {"id": _TEXT, "outputs": st.lists(_OUTPUT, min_size=0, max_size=4)},
        optional={"meta": st.fixed_dictionaries({}, optional={"question": _TEXT})},
    ),
)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(_ITEM, min_size=1, max_size=4),
    st.integers(min_value=1, max_value=5),
    st.integers(min_value=1, max_value=60),
)
def test_lines_change_no_verdict(items: list[Any], agents: int, chars: int) -> None:
    limits = Limits(max_agents=agents, max_field_chars=chars)
    lines: dict[int, str] = {}
    kept, rejects, overruns = checked(Panel, items, limits, lines)
    kept0, rejects0, overruns0 = checked(Panel, items, limits)
    assert kept == kept0
    assert rejects == rejects0
    assert overruns == overruns0
    valid = {i for i, _ in kept} | {i for i, _ in overruns}
    assert set(lines) == valid
    assert all(lines[i] == item_line(items[i]) for i in valid)
