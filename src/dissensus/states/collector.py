"""The garbage collector's thresholds raised while runs last: one process-wide setting
shared by every run of the process (:func:`raised_gc_threshold`).

``dissensus route`` (:func:`dissensus.states.stream.route_stream`), the local executor
and the Ray executor each hold many short-lived containers that reference counting
frees; at the default thresholds (700, 10, 10) the collector would walk them again and
again. Each asks, while it runs, for thresholds *at least* as high as its own. The
thresholds belong to the whole process, and runs overlap (the HTTP service decides each
run on a thread of its own, a local run may overlap a Ray run), so the raise is
reference-counted under a lock:

* the first run to enter saves the process's thresholds (the *original*);
* while runs overlap, each threshold is the highest any of them asked for (and never
  below the original);
* when a run leaves, the thresholds drop to what the runs still going ask for; the last
  to leave restores the original.

Choices: thresholds that something outside these runs set meanwhile (they differ from
what the runs last set) are left as they are, both when a run leaves and when the last
one does; a run entering afterwards raises over them, and they become what the last run
restores. Collection turned off (``gc.disable()``, or a first threshold of 0) is left as
the user set it: nothing is raised while it is off.
"""

from __future__ import annotations

import gc
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["GC_THRESHOLD", "raised_gc_threshold"]

Thresholds = tuple[int, int, int]

GC_THRESHOLD = 50_000
"""The collector's first threshold while a local run (or ``dissensus route``) decides."""

_lock = threading.Lock()
_asked: Counter[Thresholds] = Counter()  # the thresholds the runs going on ask for
_original: Thresholds | None = None  # the process's, saved by the first run to enter
_applied: Thresholds | None = None  # what the runs last set (None: not set by them)


def _current() -> Thresholds:
    first, second, third = gc.get_threshold()
    return (first, second, third)


def _wanted(base: Thresholds) -> Thresholds:
    """``base`` raised to the highest thresholds the runs going on ask for; ``base``
    itself while collection is off."""
    if base[0] == 0 or not gc.isenabled() or not _asked:
        return base
    return (
        max(base[0], *(a[0] for a in _asked)),
        max(base[1], *(a[1] for a in _asked)),
        max(base[2], *(a[2] for a in _asked)),
    )


def _apply(base: Thresholds) -> None:
    global _applied
    wanted = _wanted(base)
    if wanted != _current():
        gc.set_threshold(*wanted)
    _applied = wanted


def _enter(asked: Thresholds) -> None:
    global _original
    with _lock:
        now = _current()
        if _original is None or now != _applied:  # first run, or set from outside since
            _original = now
        _asked[asked] += 1
        _apply(_original)


def _leave(asked: Thresholds) -> None:
    global _original, _applied
    with _lock:
        _asked[asked] -= 1
        if _asked[asked] <= 0:
            del _asked[asked]
        assert _original is not None
        if _current() != _applied:  # set from outside meanwhile: theirs from now on
            _original = _applied = _current()
        else:
            _apply(_original)
        if not _asked:
            _original = _applied = None


@contextmanager
def raised_gc_threshold(
    first: int = GC_THRESHOLD, second: int = 0, third: int = 0
) -> Iterator[None]:
    """The collector's thresholds at least ``(first, second, third)`` inside the block
    (0: that one unchanged), shared with every other block of the process as the module
    says; restored when the last block ends (also on error), unless set from outside
    meanwhile."""
    asked = (first, second, third)
    _enter(asked)
    try:
        yield
    finally:
        _leave(asked)
