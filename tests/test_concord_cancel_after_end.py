"""``Negotiation.cancel()`` after the run has ended does nothing, from any thread.

It used to hand the cancellation to the run's event loop, which :func:`asyncio.run` had
closed by then: ``RuntimeError: Event loop is closed`` in the thread that cancelled
(a server cancelling a negotiation whose request ended just as the run did, a user
cancelling a task that had finished). Cancelling a finished run now changes nothing,
as for a finished task; the race test cancels from another thread at arbitrary points
of many runs (fixed seed), before, during and after each run ends.
"""

from __future__ import annotations

import random
import threading
import time

import pytest

from concord_helpers import IDEAL, REJECTED, HashAgent
from dissensus.concord import Negotiation, Outcome, TableAgent, verify
from dissensus.concord.record import Certificate
from dissensus.errors import ConfigError


def _table_run() -> Negotiation:
    agents = [
        TableAgent("a", {"R0": 0, "I0": 1, "x": 0.8, "y": 0.4}),
        TableAgent("b", {"R0": 0, "I0": 1, "x": 0.6, "y": 0.9}),
    ]
    options = [Outcome(id="x", text="x"), Outcome(id="y", text="y")]
    return Negotiation(agents, rejected=REJECTED, ideal=IDEAL, floor=0.5, options=options)


def _in_thread(call: object) -> list[BaseException]:
    errors: list[BaseException] = []

    def go() -> None:
        try:
            call()  # type: ignore[operator]
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=go)
    thread.start()
    thread.join()
    return errors


def test_cancel_after_the_run_ended_is_a_no_op_from_another_thread() -> None:
    run = _table_run()
    cert = run.run_sync()
    assert cert.status == "certified" and cert.spent.stopped == "floor_cleared"
    assert _in_thread(run.cancel) == []
    run.cancel()  # and from the thread that ran it
    assert _in_thread(run.cancel) == []
    assert cert.spent.stopped == "floor_cleared"  # the certificate stands as returned


def test_cancel_before_the_run_still_stops_it_as_it_starts() -> None:
    run = _table_run()
    assert _in_thread(run.cancel) == []
    cert = run.run_sync()
    assert cert.spent.stopped == "cancelled" and cert.spent.agent_calls == 0


def _agents(seed: int) -> list[HashAgent]:
    return [HashAgent(f"a{i}", seed + i, lo=0.0, hi=10.0) for i in range(4)]


def _race(seed: int, delay: float) -> tuple[Certificate | None, list[BaseException]]:
    """One run in a thread of its own; another thread starts cancelling after ``delay``
    seconds and keeps cancelling until some time after the run has ended."""
    run = Negotiation(_agents(seed), rejected=REJECTED, ideal=IDEAL, floor=0.95, rounds=20)
    ended = threading.Event()
    certs: list[Certificate] = []
    errors: list[BaseException] = []

    def negotiate() -> None:
        try:
            certs.append(run.run_sync())
        except BaseException as exc:
            errors.append(exc)
        finally:
            ended.set()

    def cancel() -> None:
        time.sleep(delay)
        try:
            while not ended.is_set():
                run.cancel()
            for _ in range(200):  # as the run's loop closes, and after
                run.cancel()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=negotiate), threading.Thread(target=cancel)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return (certs[0] if certs else None), errors


def test_cancel_from_another_thread_at_any_point_never_raises() -> None:
    rng = random.Random(20240611)
    reference = Negotiation(_agents(0), rejected=REJECTED, ideal=IDEAL, floor=0.95, rounds=20)
    started = time.perf_counter()
    reference.run_sync()
    whole = time.perf_counter() - started  # a run's length, to spread the cancels over
    for k in range(60):
        cert, errors = _race(k, rng.uniform(0.0, 1.5 * whole))
        assert errors == [], errors
        assert cert is not None
        assert cert.spent.stopped in ("cancelled", "floor_cleared", "budget_exhausted")
        assert verify(cert.model_dump(mode="json")).valid


def test_a_negotiation_runs_once() -> None:
    """A second run of one negotiation is refused: its counts and steps were the first
    run's (a re-run carried them over, and a cancel() before it was ignored)."""
    negotiation = _table_run()
    first = negotiation.run_sync()
    assert first.status in {"certified", "best_effort"}
    negotiation.cancel()  # after the end: nothing
    with pytest.raises(ConfigError, match="runs once"):
        negotiation.run_sync()
