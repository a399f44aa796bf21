"""Retry timing and request-rate limiting for the model client.

* Backoff is exponential with "full jitter" (AWS architecture blog, 2015): attempt
  ``n`` (0-based) waits ``uniform(0, min(cap, base * 2**n))`` drawn from a seeded
  ``random.Random``, so a run's waits are reproducible. The generator is seeded at the
  first retry, not when the client is made (seeding costs more than a call's own work,
  and a panel makes a client per member per request).
* The ceiling stops doubling once it passes the cap, so any number of retries
  (``max_retries`` has no upper bound) keeps waiting ``uniform(0, cap)``; the doubling
  itself overflowed a float at the 1,025th retry and crashed the call.
* A server's ``Retry-After`` (seconds, or an HTTP date) overrides the backoff when it
  is longer, capped at ``retry_after_cap_s`` so a hostile or broken server cannot park
  the client for hours. A date in the past means "now".
* The requests-per-minute limiter spaces request *starts* at least ``60 / rpm`` seconds
  apart (a virtual schedule, no background task), which is the strictest reading of
  "N per minute" and needs no lock inside one event loop. A request cancelled while
  it waits for its slot gives the slot back (when no later slot is claimed): twenty
  calls queued at ``rpm=60`` and cancelled at a deadline pushed the next call twenty
  seconds out, for slots nobody used.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from email.utils import parsedate_to_datetime

from dissensus.errors import ConfigError

__all__ = ["Backoff", "RateLimiter", "parse_retry_after"]


def parse_retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header value; None when absent or invalid."""
    if value is None:
        return None
    value = value.strip()
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when is None:
            return None
        current = time.time() if now is None else now
        return max(0.0, when.timestamp() - current)
    if seconds != seconds or seconds < 0:  # NaN or negative
        return None
    return seconds


class Backoff:
    """Exponential backoff with full jitter from a seeded generator."""

    def __init__(self, *, base_s: float, cap_s: float, retry_after_cap_s: float, seed: int) -> None:
        self.base_s = base_s
        self.cap_s = cap_s
        self.retry_after_cap_s = retry_after_cap_s
        self._seed = seed
        self._rng: random.Random | None = None
        self._lock = threading.Lock()

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        """Seconds to wait before retry number ``attempt + 1`` (``attempt`` is 0-based)."""
        # 2.0**1024 overflows (OverflowError, out of any try: a client retrying a long
        # outage crashed at its 1025th retry); the cap is reached long before.
        ceiling = min(self.cap_s, self.base_s * (2.0 ** min(attempt, 1023)))
        with self._lock:
            if self._rng is None:  # seeded on the first retry: most clients never retry
                self._rng = random.Random(self._seed)
            wait = self._rng.uniform(0.0, ceiling) if ceiling > 0 else 0.0
        if retry_after is not None:
            wait = max(wait, min(retry_after, self.retry_after_cap_s))
        return wait


class RateLimiter:
    """At most ``rpm`` request starts per minute, evenly spaced."""

    def __init__(self, rpm: float) -> None:
        if rpm <= 0:
            raise ConfigError("rpm must be positive", field="rpm")
        self.interval = 60.0 / rpm
        self._next = 0.0
        self._waiting: list[float] = []  # slots claimed and not yet reached, in order
        self._last_start = -self.interval  # the latest slot a request started in
        self._lock = threading.Lock()

    def _claim(self) -> float:
        """Claim the next slot; the seconds until it."""
        return self._claim_slot()[1]

    def _claim_slot(self) -> tuple[float, float]:
        """Claim the next slot: it and the seconds until it."""
        with self._lock:
            now = time.monotonic()
            slot = max(now, self._next)
            self._next = slot + self.interval
            self._waiting.append(slot)
            return slot, slot - now

    def _settle(self, slot: float, *, started: bool) -> None:
        """``slot`` is reached (``started``) or given up: a waiter cancelled gives its slot
        back when no later slot is claimed, so the schedule ends after the last slot still
        claimed or started, never after slots nobody will use."""
        with self._lock:
            self._waiting.remove(slot)
            if started:
                self._last_start = max(self._last_start, slot)
            else:
                latest = self._waiting[-1] if self._waiting else self._last_start
                self._next = max(latest, self._last_start) + self.interval

    async def wait(self) -> None:
        """Sleep until this request's slot."""
        slot, delay = self._claim_slot()
        try:
            if delay > 0:
                await asyncio.sleep(delay)
        except BaseException:
            self._settle(slot, started=False)
            raise
        self._settle(slot, started=True)
