"""The LangGraph node's arguments of the wrong kind are refused naming the argument.

``decision_node(goto=5)`` failed with Python's ``'int' object is not iterable``, a list
of actions as ``goto`` with an ``AttributeError``, ``policy_dir=5`` with os.fspath's
``TypeError``, and ``panel=None``, ``key=5`` or a reviewer that is no function were
taken, to fail inside the graph at its first case. Each is a
:class:`~dissensus.errors.ConfigError` naming the argument when the node is made.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

POLICY = {"reading": {"similarity": "tfidf", "theta_s": 0.3}}


@pytest.fixture(autouse=True)
def _langgraph() -> None:
    pytest.importorskip("langgraph")


def _panel(state: Any) -> Any:
    return state


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ({"goto": 5}, "goto"),
        ({"goto": ["auto"]}, "goto"),
        ({"goto": {"auto": "next", 5: "other"}}, "goto"),
        ({"key": 5}, "key"),
        ({"key": ""}, "key"),
        ({"panel": None}, "panel"),
        ({"panel": "state"}, "panel"),
        ({"reviewer": "kim@example.org"}, "reviewer"),
        ({"policy_dir": 5}, "policy_dir"),
    ],
)
def test_an_argument_of_the_wrong_kind_is_a_config_error_naming_it(
    arguments: dict[str, Any], field: str, tmp_path: Path
) -> None:
    from dissensus.errors import ConfigError
    from dissensus.integrations.langgraph import decision_node
    from dissensus.pipeline import policy_from_dict

    given: dict[str, Any] = {"panel": _panel, **arguments}
    with pytest.raises(ConfigError) as err:
        decision_node(policy=policy_from_dict(POLICY), journal=str(tmp_path / "j.sqlite"), **given)
    assert err.value.field == field


def test_the_kinds_it_takes_are_taken(tmp_path: Path) -> None:
    from dissensus.integrations.langgraph import decision_node
    from dissensus.pipeline import policy_from_dict

    for goto in (None, {}, {"auto": "ship", "human": "ship"}):
        decision_node(
            policy=policy_from_dict(POLICY),
            journal=tmp_path / "j.sqlite",
            panel=_panel,
            goto=goto,
            policy_dir=tmp_path,
        )
