"""Settings of ``dissensus serve``: where the journal is, who may call, and the limits.

Choices this module makes:

* Every limit has a default that a single reviewer team never meets and a batch client
  meets only on purpose: 8 MiB of request body, 1,000 panels per request, 256 decide
  runs and 64 MiB of panels accepted and not decided yet (a run holds its panels in
  memory until it is decided), 256 agents per panel, 32,768 characters per text field, 60 s per request, review claims held for
  15 minutes. The agent and field bounds may be lowered, not raised above those of
  :mod:`dissensus.io.limits`, which every reader applies. The review page asks for a
  note when a reviewer overrides the panel's suggestion and allows undoing a resolution
  for 5 minutes.
* The server binds to loopback unless told otherwise; any other host requires a tokens
  file (:func:`check_exposure`), so a service is never reachable without authentication.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from dissensus.errors import ConfigError
from dissensus.io.limits import MAX_AGENTS, MAX_FIELD_CHARS
from dissensus.serve.auth import TOKENS_CHECK_S
from dissensus.store.claims import MAX_CLAIM_TTL

__all__ = ["ServeSettings", "check_exposure", "is_loopback"]


class ServeSettings(BaseModel):
    """Everything ``dissensus serve`` is configured with."""

    model_config = ConfigDict(frozen=True)

    journal: str = "dissensus-journal.sqlite"
    """Journal: an SQLite path (or, with the PostgreSQL back end, a ``postgresql://`` URL)."""
    host: str = "127.0.0.1"
    """Interface to bind."""
    port: int = Field(default=8000, ge=0, le=65535)
    """TCP port (0: any free port)."""
    policy: str | None = None
    """Pipeline policy (YAML) every decide request runs under; ``None``: built-in defaults."""
    tokens: str | None = None
    """Tokens file (``token_sha256 name role`` per line); ``None``: no authentication (loopback only)."""
    tokens_check_s: float = Field(default=TOKENS_CHECK_S, ge=0)
    """Seconds between two looks at the tokens file for changes (0: at every request);
    see :class:`~dissensus.serve.auth.TokenFile`."""
    login_failures: int = Field(default=20, ge=0)
    """Unknown tokens one client address may present in a minute before its tokens are
    refused (429) unchecked; 0: no limit (see :mod:`~dissensus.serve.throttle`)."""
    max_connections: int = Field(default=1024, ge=1, le=1_000_000)
    """Most connections open at once; a further one is answered 503 and closed
    (:mod:`~dissensus.serve.protocol`)."""
    max_connections_per_address: int = Field(default=128, ge=1, le=1_000_000)
    """Most connections one client address may hold open at once (503 above)."""
    max_body_bytes: int = Field(default=8 * 1024 * 1024, ge=1024)
    """Largest request body accepted (413 above)."""
    max_panels: int = Field(default=1000, ge=1)
    """Most panels in one decide / route request (413 above)."""
    max_queued_runs: int = Field(default=256, ge=1)
    """Most decide runs accepted and not decided yet (waiting or deciding): a decide
    request beyond them is 503 with ``Retry-After``, nothing journalled."""
    max_queued_bytes: int = Field(default=64 * 1024 * 1024, ge=1024)
    """Most characters of panels (their JSONL) in the decide runs accepted and not
    decided yet: a decide request that would pass them is 503 with ``Retry-After``
    (one run alone is always taken: ``max_body_bytes`` bounds it)."""
    max_agents: int = Field(default=MAX_AGENTS, ge=2, le=MAX_AGENTS)
    """Most agents per panel, voters per vote case, agents per negotiation (413 above)."""
    max_field_chars: int = Field(default=MAX_FIELD_CHARS, ge=1, le=MAX_FIELD_CHARS)
    """Most characters of one text field of a panel or vote case (422 above)."""
    allow_hosts: tuple[str, ...] = ()
    """More names the ``Host`` header may carry (``*``: any); see :mod:`.origin`."""
    request_timeout_s: float = Field(default=60.0, gt=0)
    """Longest a request may take (504 after; a decide run keeps going and can be polled)."""
    claim_ttl_s: float = Field(default=900.0, gt=0, le=MAX_CLAIM_TTL)
    """How long a review claim holds before another reviewer may take the case; at most
    ten years (:data:`~dissensus.store.claims.MAX_CLAIM_TTL`, the journal's bound on a
    claim, so a longer one is refused at start-up, not on every claim)."""
    session_ttl_s: float = Field(default=8 * 3600.0, gt=0)
    """How long a review-page login lasts."""
    review_note: Literal["override", "always", "never"] = "override"
    """When the review page requires a note: ``override`` (default) when the decision is
    not the panel's suggestion, ``always``, or ``never``."""
    undo_window_s: float = Field(default=300.0, ge=0)
    """How long after resolving a reviewer may undo the resolution (0: never)."""
    shift_every: int = Field(default=100, ge=0)
    """Judged cases between two checks of the shift watch (:mod:`.shift_watch`; 0: none)."""
    shift_interval_s: float = Field(default=30.0, gt=0)
    """Seconds between two counts of the judged cases by the shift watch."""
    policy_dir: Path | None = None
    """Directory relative policy paths resolve against (set from ``policy``)."""


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback addresses (``127.0.0.0/8``, ``::1``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_exposure(settings: ServeSettings) -> None:
    """Refuse to serve a non-loopback interface without a tokens file."""
    if not is_loopback(settings.host) and not settings.tokens:
        raise ConfigError(
            f"refusing to listen on {settings.host} without authentication: give --tokens FILE "
            "(or listen on 127.0.0.1)",
            field="host",
        )
