"""The thread a panel's decisions run on, off the caller's event loop.

Deciding a panel (reading, guard, acceptance, the journal's writes) is mostly CPU and
SQLite work with no awaits in it; on the server's event loop it would hold every other
request (member answers arriving, bodies being read, ``/healthz``) for its whole
duration. :class:`DecisionThread` runs the decisions on an event loop of their own in a
daemon thread; the caller awaits the result without blocking. SQLite (and psycopg)
release Python's lock while they write, so the journal's writes overlap with the
caller's loop on another core.

Choices this module makes:

* **One thread, one loop, for every decision of a panel**: decisions interleave at their
  awaits exactly as they did on the caller's loop (a model-backed follow-up waits on
  the network without holding the others), and the run specification's similarity
  backend is never called from two threads at once. A journal object may be shared by
  threads (its transactions hold its lock), so the caller's journal is used as is,
  in-memory journals included.
* **Started on first use**, so a panel that never decides starts no thread.
* **Cancellation follows the caller** of :meth:`DecisionThread.run`: a caller cancelled
  while its decision runs cancels the decision (as on the caller's loop), leaving the
  run incomplete and resumable. :meth:`DecisionThread.submit` hands the decision over
  instead: it runs to its end whatever becomes of the caller (the chat door's choice,
  :mod:`dissensus.panels.door`: never half a case).
* :meth:`DecisionThread.stop` cancels what still runs, then ends the thread; a later
  call starts a new one.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import Future
from typing import Any, TypeVar

__all__ = ["DecisionThread"]

T = TypeVar("T")


async def _cancel_all() -> None:
    current = asyncio.current_task()
    tasks = [t for t in asyncio.all_tasks() if t is not current]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


class DecisionThread:
    """A daemon thread running an event loop, on which coroutines are run for callers."""

    def __init__(self, name: str = "dissensus-decide") -> None:
        self.name = name
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def _started(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=loop.run_forever, name=self.name, daemon=True)
                thread.start()
                self._loop, self._thread = loop, thread
            return self._loop

    async def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """The result of ``coro``, run on the thread's loop (awaited without blocking)."""
        return await asyncio.wrap_future(self.submit(coro))

    def submit(self, coro: Coroutine[Any, Any, T]) -> Future[T]:
        """Start ``coro`` on the thread's loop now; its future (cancelling the future
        cancels ``coro``, as :meth:`stop` does; nothing else does)."""
        return asyncio.run_coroutine_threadsafe(coro, self._started())

    def call_soon(self, callback: Callable[..., object], *args: object) -> None:
        """Call ``callback(*args)`` on the thread's loop soon (a no-op when not started)."""
        with self._lock:
            loop = self._loop
        if loop is not None:
            loop.call_soon_threadsafe(callback, *args)

    def stop(self) -> None:
        """Cancel what still runs on the thread and end it (a no-op when not started)."""
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is None or thread is None:
            return
        asyncio.run_coroutine_threadsafe(_cancel_all(), loop).result()
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        loop.close()
