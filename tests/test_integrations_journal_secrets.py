"""A door's journal that cannot be opened is refused without showing its URL's password.

The LangGraph node and the Inspect reducer open their journal when they are made; the
refusal named the journal as given, so a PostgreSQL URL's password was printed in clear
(and, for the reducer, again in every sample's error). It is masked as in every other
message naming a journal.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any

import pytest

from dissensus.errors import ConfigError

SECRET = "S3cretPW-never-shown"


def _closed_port() -> int:
    """A loopback port nothing listens on (a connection is refused at once)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _node(url: str) -> Any:
    from dissensus.integrations.langgraph import decision_node

    return decision_node(policy=None, journal=url, panel=lambda state: state)


def _reducer(url: str) -> Any:
    pytest.importorskip("inspect_ai")
    from dissensus.integrations.inspect import dissensus_reducer

    return dissensus_reducer(graders=["a", "b"], journal=url)


@pytest.mark.parametrize("make", [_node, _reducer], ids=["langgraph", "inspect"])
def test_an_unreachable_journal_is_refused_without_its_password(
    make: Callable[[str], Any],
) -> None:
    url = f"postgresql://alice:{SECRET}@127.0.0.1:{_closed_port()}/journal"
    with pytest.raises(ConfigError) as caught:
        make(url)
    assert caught.value.field == "journal"
    shown = str(caught.value)
    assert SECRET not in shown, shown
    assert "postgresql://alice:***@127.0.0.1:" in shown
