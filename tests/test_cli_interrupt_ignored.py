"""A signal ``decide`` was started ignoring (SIGINT in a script's background job, SIGHUP
under ``nohup``) stays ignored while its run is decided; SIGTERM still stops the run."""

from __future__ import annotations

import signal

import pytest

from dissensus.cli.interrupts import interruptible


@pytest.mark.parametrize("ignored", [signal.SIGINT, signal.SIGHUP])
def test_an_ignored_signal_stays_ignored_during_a_run(ignored: signal.Signals) -> None:
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGHUP)}
    try:
        signal.signal(ignored, signal.SIG_IGN)
        with interruptible() as complete:
            assert signal.getsignal(ignored) is signal.SIG_IGN
            assert signal.getsignal(signal.SIGTERM) not in (signal.SIG_IGN, signal.SIG_DFL)
            complete()
        assert signal.getsignal(ignored) is signal.SIG_IGN
    finally:
        for sig, old in before.items():
            signal.signal(sig, old)


def test_a_handled_sigint_still_stops_a_run() -> None:
    with interruptible() as complete:
        handler = signal.getsignal(signal.SIGINT)
        assert callable(handler) and handler is not signal.default_int_handler
        complete()
