"""What every request of the service shares: settings, journal, run specification,
tokens, sessions, the runner, the review desk and the shift watch (``app.state.service``).

Choices this module makes:

* A bearer token is the bytes the client sent, read as UTF-8: the HTTP layer hands a
  header over decoded as Latin-1, so a token written by hand with a character outside
  ASCII (``pässwort``) hashed to other bytes than its line's sha256 (of its UTF-8, as
  ``hash_token``, ``sha256sum`` and the review page's login form take it) and was
  refused ``unknown token`` on the API while the login form took it. A header whose
  bytes are not UTF-8 matches no line and is counted as a failed check (401 ``unknown
  token``): compared as it came, read as Latin-1, ``p\xe4sswort`` (Latin-1 bytes) was
  the line of ``hash_token("pässwort")``, a token the client never sent as its bytes.
"""

from __future__ import annotations

from collections.abc import Callable

from fastapi import Request

from dissensus.guard import ReliabilityFit
from dissensus.pipeline import RunSpec
from dissensus.serve.auth import LOCAL, TOKENS_UNAVAILABLE, Principal, SessionStore, TokenFile
from dissensus.serve.http import ApiError
from dissensus.serve.journal_adapter import ReviewDesk, open_journal
from dissensus.serve.runs import Runner
from dissensus.serve.settings import ServeSettings
from dissensus.serve.shift_watch import ShiftWatch
from dissensus.serve.throttle import FailedLogins, peer_of, throttled_message
from dissensus.store.journal import Journal
from dissensus.store.targets import mask_url

__all__ = ["Service"]


class Service:
    """What every request shares: settings, journal, policy, tokens, runs, review desk."""

    def __init__(
        self,
        settings: ServeSettings,
        journal: Journal,
    ) -> None:
        self.settings = settings
        self.journal = journal
        # One run specification for every request, built (and every file it names checked)
        # before the server answers anything: the CLI's records, through this door too.
        self.spec = RunSpec.from_policy(settings.policy)
        self.policy = self.spec.policy
        # Read again when it changes (at most every tokens_check_s): see dissensus.serve.auth.
        self.tokens: TokenFile | None = (
            TokenFile(settings.tokens, check_s=settings.tokens_check_s) if settings.tokens else None
        )
        self.sessions = SessionStore(settings.session_ttl_s, tokens=self.tokens)
        self.failed_logins = FailedLogins(settings.login_failures)
        reopen = _reopener(journal, settings.journal)
        self.runner = Runner(journal, self.spec, open_journal=reopen)
        self.shift_watch = ShiftWatch(
            journal,
            self.spec,
            every=settings.shift_every,
            interval_s=settings.shift_interval_s,
            open_journal=reopen,
        )
        self.desk = ReviewDesk(
            journal, claim_ttl_s=settings.claim_ttl_s, max_field_chars=settings.max_field_chars
        )
        self.guard_calibration: ReliabilityFit | None = self.spec.guard_calibration

    def authenticate(self, request: Request) -> Principal:
        """The bearer token's principal (401 without a valid one; 503 while the tokens
        file does not load: every token is refused, and the client may try again; 429,
        the token not checked, after too many unknown ones from the caller's address:
        :mod:`~dissensus.serve.throttle`)."""
        if self.tokens is None:
            return LOCAL
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise ApiError(
                401, "missing bearer token (Authorization: Bearer TOKEN)", "Authorization"
            )
        # The caller's address is read only when some check failed lately (a token
        # refused below reads it to count the failure).
        logins = self.failed_logins
        wait = logins.retry_after(peer_of(request.scope)) if logins.lately else None
        if wait is not None:
            raise ApiError(
                429, throttled_message(wait), "Authorization", headers={"Retry-After": str(wait)}
            )
        store = self.tokens.current()
        if store is None:
            raise ApiError(503, TOKENS_UNAVAILABLE, "Authorization", headers={"Retry-After": "1"})
        sent = _sent(token.strip())
        principal = None if sent is None else store.authenticate(sent)
        if principal is None:
            logins.failed(peer_of(request.scope))
            raise ApiError(401, "unknown token", "Authorization")
        return principal


def _sent(token: str) -> str | None:
    """The token a client sent, from a header value decoded as Latin-1 (its bytes): read
    as UTF-8; ``None`` when its bytes are not UTF-8, a token that matches no line (see
    the module docstring)."""
    if token.isascii():
        return token
    try:
        return token.encode("latin-1").decode("utf-8")
    except (UnicodeEncodeError, UnicodeDecodeError):
        return None


def _reopener(journal: Journal, given: str) -> Callable[[], Journal] | None:
    """How a run's thread opens its own connection to ``journal`` (``None`` for an
    in-memory journal, which no second connection can see). ``given`` is the target the
    settings name: a URL with its password, which ``journal.path`` shows masked (a
    connection opened with the mask would be refused)."""
    target = str(journal.path)
    if target == ":memory:":
        return None
    if given != target and mask_url(given) == target:
        target = given
    signer, after = journal.signer, journal.after_append
    return lambda: open_journal(target, signer=signer, after_append=after)
