"""What the MCP server keeps per journal stays bounded, however many journals callers name.

The server kept a lock and a shift watch for every journal path a caller ever named, for
its whole life: a client naming journal after journal grew it without end. The lock goes
with the last call using it; the watches are the most recently used ``WATCHES``, one in
use never dropped, and a dropped one made anew goes on as after a restart.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from shift_helpers import build_world

pytest.importorskip("mcp")


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_world(tmp_path_factory.mktemp("state"))


def _settings(world: Path) -> Any:
    from dissensus.integrations.mcp.settings import _Settings

    return _Settings(None, str(world / "hold.yaml"), None, root=world, shift_every=10)


def _use(settings: Any, spec: Any, name: str) -> Any:
    """A ``decide`` call's use of journal ``name``: opened, its watch taken; the watch."""
    with (
        settings.using(name, must_exist=False) as (store, _),
        settings.watching(store, spec) as watch,
    ):
        return watch


def test_naming_many_journals_leaves_the_state_bounded(world: Path) -> None:
    from dissensus.integrations.mcp.settings import WATCHES

    settings = _settings(world)
    spec = settings.spec(None)
    for i in range(WATCHES + 40):
        assert _use(settings, spec, f"many-{i}.sqlite") is not None
    assert len(settings._opening) == 0
    assert len(settings._watches) == WATCHES
    # The most recently used are kept: the latest journal's watch goes on from call to call.
    latest = f"many-{WATCHES + 39}.sqlite"
    assert _use(settings, spec, latest) is _use(settings, spec, latest)


def test_a_watch_in_use_is_never_dropped(world: Path) -> None:
    from dissensus.integrations.mcp.settings import WATCHES

    settings = _settings(world)
    spec = settings.spec(None)
    with (
        settings.using("busy.sqlite", must_exist=False) as (store, _),
        settings.watching(store, spec) as held,
    ):
        for i in range(WATCHES + 10):
            _use(settings, spec, f"others-{i}.sqlite")
        # Another call on the journal meanwhile steps the same watch (one step at a time).
        assert _use(settings, spec, "busy.sqlite") is held
        assert len(settings._watches) <= WATCHES + 1
    assert len(settings._watches) <= WATCHES


def test_a_lock_in_use_is_kept_and_excludes_other_calls(world: Path) -> None:
    """A call waiting to open a journal another call is opening waits for it, whatever
    other journals are opened meanwhile; the lock is dropped once neither uses it."""
    settings = _settings(world)
    path = world / "locked.sqlite"
    entered: list[float] = []
    with settings._opening_lock(path):

        def wait() -> None:
            with settings._opening_lock(path):
                entered.append(time.monotonic())

        waiter = threading.Thread(target=wait)
        waiter.start()
        for i in range(20):
            with settings.using(f"meanwhile-{i}.sqlite", must_exist=False):
                pass
        time.sleep(0.2)
        assert entered == [] and len(settings._opening) == 1
        released = time.monotonic()
    waiter.join(10)
    assert entered and entered[0] >= released
    assert settings._opening == {}


def test_a_dropped_watch_made_anew_goes_on_from_the_journal(world: Path) -> None:
    """A watch dropped and made anew makes no check the journal has not reached: its first
    step looks at the journal (as a restarted server's), and a flag stays the journal's."""
    from dissensus.integrations.mcp.settings import WATCHES

    settings = _settings(world)
    spec = settings.spec(None)
    first = _use(settings, spec, "kept.sqlite")
    for i in range(WATCHES + 1):
        _use(settings, spec, f"push-{i}.sqlite")
    again = _use(settings, spec, "kept.sqlite")
    assert again is not first and again.seen is None and again.enabled


def test_decide_on_many_journals_leaves_the_server_bounded(
    world: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the tool: ``decide`` naming journal after journal, then the state kept."""
    import asyncio

    from mcp.client import Client

    from dissensus.integrations.mcp import build_server
    from dissensus.integrations.mcp import settings as module
    from mcp_helpers import tool_data

    made: list[Any] = []
    real = module._Settings.__init__

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        real(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(module._Settings, "__init__", init)
    built = build_server(root=world, policy=str(world / "hold.yaml"), shift_every=10)
    panel = {
        "id": "p",
        "outputs": [
            {"agent": "a", "decision": "1", "reasoning": "One is right."},
            {"agent": "b", "decision": "2", "reasoning": "Two is right."},
        ],
    }
    count = module.WATCHES + 4 if hasattr(module, "WATCHES") else 68

    async def go() -> None:
        async with Client(built) as client:
            for i in range(count):
                args = {"panels": [panel], "journal": f"tool-{i}.sqlite"}
                assert tool_data(await client.call_tool("decide", args))

    asyncio.run(asyncio.wait_for(go(), 300))
    (settings,) = made
    assert len(settings._opening) == 0
    assert len(settings._watches) <= getattr(module, "WATCHES", 64)
