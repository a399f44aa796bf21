"""The test switch ``$DISSENSUS_FAULT_RAY_KILL`` (:data:`FAULT_ENV`): a decide worker that
receives the named block kills its own process, the first ``TIMES`` times. Inert unless
the variable is set; a value not of its form is a :class:`~dissensus.errors.ConfigError`
naming the variable when a run starts (never a traceback from a worker)."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import TypeAlias

from dissensus.errors import ConfigError

FAULT_ENV = "DISSENSUS_FAULT_RAY_KILL"
"""``BLOCK:MARKER_PATH[:TIMES]``: kill the worker that gets block ``BLOCK``, the first
``TIMES`` times (default 1), a line in the marker file per kill (tests only)."""


_Fault: TypeAlias = tuple[int, str, int]
"""``$DISSENSUS_FAULT_RAY_KILL`` read: ``(block, marker path, times)``."""


def _fault() -> _Fault | None:
    """The test switch :data:`FAULT_ENV`, or None (not set: no fault)."""
    raw = os.environ.get(FAULT_ENV)
    if not raw:
        return None
    block, _, rest = raw.partition(":")
    marker, sep, times = rest.rpartition(":")
    if not sep or not times.isascii() or not times.isdigit():
        marker, times = rest, "1"
    if not (block.isascii() and block.isdigit()) or not marker:
        raise ConfigError(
            f"${FAULT_ENV} is not BLOCK:MARKER_PATH[:TIMES] (a test switch; unset it)",
            field=FAULT_ENV,
        )
    return int(block), marker, int(times)


def check_fault() -> None:
    """Refuse a :data:`FAULT_ENV` not of its form (a :class:`ConfigError` naming it)."""
    _fault()


def _maybe_die(fault: _Fault | None, index: int) -> None:
    """Kill this process when ``fault`` says so for block ``index`` (tests only)."""
    if fault is None or fault[0] != index:
        return
    marker = Path(fault[1])
    killed = len(marker.read_text(encoding="utf-8").splitlines()) if marker.exists() else 0
    if killed >= fault[2]:
        return
    with marker.open("a", encoding="utf-8") as handle:
        handle.write("killed\n")
    os.kill(os.getpid(), signal.SIGKILL)
