"""Failed token checks, counted per client address: guessing a token is slowed down.

A request that presents a token the tokens file does not hold (a bearer token, or one
typed into the review page's login form) is a failed check. After ``limit`` failed
checks from one address within :data:`WINDOW_S` seconds, every token that address
presents is refused ``429`` with ``Retry-After`` until the oldest of them leaves the
window, **without being checked**: answering a right guess while refusing wrong ones
would let the guessing go on.

Choices this module makes:

* The default is 20 failed checks a minute (``--login-failures``; 0: no limit). A token
  made by ``dissensus serve-token`` holds 256 random bits, out of reach at any rate; the
  limit is for a token someone wrote by hand. A person mistyping a token never meets it.
* What counts: a token presented and not found. A request without a token, a token
  refused for its role (it is a real token), and a refusal while the tokens file does
  not load (every token is refused then) count for nothing. A refused attempt is not
  counted either, so a client that keeps trying while refused does not stay refused
  longer than the window.
* The address is the connection's peer as the server's protocol saw it
  (:func:`peer_of`), never a forwarded-for header (which a client writes: uvicorn
  rewrites the request's ``client`` from ``X-Forwarded-For`` for connections from
  loopback, so a local client, an SSH tunnel or a proxy passing the header on could
  pick the address its failures count under). An IPv6 address counts by its /64 network, the block one host is usually
  given. Behind a reverse proxy every client has the proxy's address, so one client
  guessing slows every client's *new* logins and bearer requests for up to a minute;
  review-page sessions already open are not token checks and go on.
* Memory is bounded: at most :data:`MAX_ADDRESSES` addresses are remembered, in the
  order of their last failed check. A new address beyond them makes the server forget
  the one whose last failure is oldest (its failures have usually left the window
  already), in O(1): a client with many addresses costs no more per request than one.
* Time is :func:`time.monotonic`, passed in by the tests; every method is safe to call
  from several threads.
"""

from __future__ import annotations

import ipaddress
import math
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping
from typing import Any

__all__ = [
    "MAX_ADDRESSES",
    "PEER_KEY",
    "WINDOW_S",
    "FailedLogins",
    "address_key",
    "peer_of",
    "throttled_message",
]

PEER_KEY = "dissensus.peer"
"""The ASGI scope key under which the server's protocol keeps the connection's own peer
address (:mod:`dissensus.serve.protocol`)."""

WINDOW_S = 60.0
"""Seconds a failed token check is remembered for."""

MAX_ADDRESSES = 10_000
"""Most client addresses whose failed checks are remembered at once."""


def peer_of(scope: Mapping[str, Any]) -> str | None:
    """The address a request's connection comes from: the peer the server's protocol
    recorded (:data:`PEER_KEY`), which no header can change, else the ASGI ``client``
    (an application served some other way, the tests' in-process transport)."""
    if PEER_KEY in scope:
        peer = scope[PEER_KEY]
        return peer if isinstance(peer, str) else None
    client = scope.get("client")
    return str(client[0]) if client else None


def address_key(host: str | None) -> str:
    """What failed checks from ``host`` are counted under: an IPv4 address itself, an
    IPv6 address's /64 network, anything else (a Unix socket's peer: ``None``) as given,
    cut to 64 characters."""
    if not host:
        return ""
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return host[:64]
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.IPv6Network((int(address) >> 64 << 64, 64)))
    return str(address)


def throttled_message(retry_after_s: int) -> str:
    """What a refused client is told."""
    return (
        f"too many unknown tokens from this address: try again in {retry_after_s} s "
        "(the token was not checked)"
    )


class FailedLogins:
    """Failed token checks per client address within the last :data:`WINDOW_S` seconds."""

    def __init__(
        self,
        limit: int,
        *,
        window_s: float = WINDOW_S,
        max_addresses: int = MAX_ADDRESSES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if limit < 0:
            raise ValueError(f"limit must be 0 (none) or more, not {limit}")
        self.limit = limit
        self.window_s = window_s
        self.max_addresses = max_addresses
        self._clock = clock
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        """How many addresses are remembered."""
        return len(self._failures)

    @property
    def lately(self) -> bool:
        """Whether some check failed within the window and is remembered (a caller reads
        its client's address only then: :meth:`retry_after` of any address is ``None``
        otherwise). Read without the lock: a failure counted meanwhile by another
        request is seen by the next one, as it would be had it come a moment later."""
        return bool(self._failures)

    def retry_after(self, host: str | None) -> int | None:
        """Whole seconds until ``host`` may present a token again, or ``None`` when it may
        now (always ``None`` without a limit)."""
        if self.limit == 0:
            return None
        with self._lock:
            if not self._failures:  # nobody failed lately: the address need not be read
                return None
            key = address_key(host)
            times = self._failures.get(key)
            if times is None:
                return None
            now = self._clock()
            self._expire(times, now)
            if len(times) < self.limit:
                if not times:
                    del self._failures[key]
                return None
            return max(1, math.ceil(times[0] + self.window_s - now))

    def failed(self, host: str | None) -> None:
        """Count a failed token check from ``host``."""
        if self.limit == 0:
            return
        key = address_key(host)
        with self._lock:
            now = self._clock()
            times = self._failures.get(key)
            if times is None:
                while len(self._failures) >= self.max_addresses:
                    self._failures.popitem(last=False)  # the longest without a failure
                times = self._failures[key] = deque(maxlen=self.limit)
            else:
                self._failures.move_to_end(key)
            times.append(now)

    def _expire(self, times: deque[float], now: float) -> None:
        while times and times[0] <= now - self.window_s:
            times.popleft()
