"""Bearer tokens, roles, review-page sessions and CSRF tokens of ``dissensus serve``.

The tokens file holds one ``token_sha256 name role`` per line (``#`` comments and blank
lines allowed); only hashes are ever on disk, and :func:`token_line` makes a line for a
fresh token. A request authenticates with ``Authorization: Bearer TOKEN``; the token's
sha256 is compared with **every** entry by :func:`hmac.compare_digest`, so neither the
comparison nor the number of comparisons depends on where a match is.

Choices where the design is silent:

* Roles: ``submit`` (decide, route, vote, negotiate, verify, bound, read runs),
  ``review`` (the review queue, API and page), ``admin`` (everything). A wrong role is
  403, a missing or unknown token 401.
* Without a tokens file (loopback only) every caller is the ``admin`` named ``local``.
* A tokens file any user may write is refused (on POSIX): whoever can write it can
  add a token. Group-writable files are accepted (a team may share one).
* The reviewer recorded with a resolution is always the token's name; a ``reviewer``
  field in a request body is ignored. A token name is a reviewer name, so
  :func:`token_line` and the tokens file refuse one a resolution would
  (:func:`dissensus.pipeline.review.reviewer_name_problem`: over 128 characters, or a
  control or invisible character that makes ``al\u200bice`` look like ``alice``); such a
  token could otherwise claim cases under a look-alike name and resolve none.
* Review-page logins are server-side sessions: the cookie holds a random session id
  (HttpOnly, SameSite=Strict, Path=/review), never the token. Sessions live in memory
  and end with the process. A form's CSRF token is an HMAC of the session id under a
  per-process secret; the login form uses a double-submit pre-session cookie.
* The session store is bounded: at most :data:`MAX_SESSIONS` (10,000) sessions, kept
  in the order they were opened (the order they expire in); opening one drops the
  expired ones from the front and, when the store is full, ends the oldest. Opening
  costs O(1) amortised however many sessions there are (it used to filter them all).
* Without a tokens file every browser is ``local``, so they share **one** session
  (:meth:`SessionStore.local`): a page asked for without its cookie gets that session's
  id, and nothing new is opened. Any web page can make a browser send cookie-less GETs
  to a loopback server; each used to open a session living ``--session-ttl``. The
  shared session ends like any other (after ``--session-ttl``, or "log out"); the next
  page then opens the next one.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import stat
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from dissensus.errors import ConfigError
from dissensus.pipeline.review import reviewer_name_problem

__all__ = [
    "MAX_SESSIONS",
    "ROLES",
    "Principal",
    "SessionStore",
    "TokenStore",
    "allows",
    "hash_token",
    "load_tokens",
    "token_line",
]

Role = Literal["submit", "review", "admin"]
ROLES: tuple[Role, ...] = ("submit", "review", "admin")


@dataclass(frozen=True)
class Principal:
    """Who is calling: the token's name and role."""

    name: str
    role: Role


LOCAL = Principal(name="local", role="admin")
"""The caller of a server without a tokens file (loopback only)."""


def allows(principal: Principal, needed: Role) -> bool:
    """``admin`` may do everything; otherwise the role must match."""
    return principal.role == "admin" or principal.role == needed


def hash_token(token: str) -> str:
    """sha256 of a token, hex."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def token_line(name: str, role: str) -> tuple[str, str]:
    """A fresh random token and its tokens-file line ``(token, line)``."""
    if role not in ROLES:
        raise ConfigError(
            f"unknown role {role!r}; expected one of {', '.join(ROLES)}", field="role"
        )
    if not name or any(c.isspace() for c in name):
        raise ConfigError("a token name is one word", field="name")
    problem = reviewer_name_problem(name, "a token name")
    if problem is not None:
        raise ConfigError(problem, field="name")
    token = secrets.token_urlsafe(32)
    return token, f"{hash_token(token)} {name} {role}"


@dataclass(frozen=True)
class _Entry:
    digest: bytes
    principal: Principal


class TokenStore:
    """The hashed tokens of a tokens file."""

    def __init__(self, entries: list[tuple[str, Principal]]) -> None:
        self._entries = [_Entry(bytes.fromhex(h), p) for h, p in entries]

    def __len__(self) -> int:
        return len(self._entries)

    def authenticate(self, token: str) -> Principal | None:
        """The principal of ``token``, compared in constant time against every entry."""
        digest = hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()
        found: Principal | None = None
        for entry in self._entries:
            if hmac.compare_digest(entry.digest, digest):
                found = entry.principal
        return found


def load_tokens(path: str | Path) -> TokenStore:
    """Read a tokens file (:class:`ConfigError` naming the file, line and field)."""
    file = str(path)
    try:
        mode = os.stat(path).st_mode
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read tokens file: {exc.strerror}", file=file) from exc
    if os.name == "posix" and mode & stat.S_IWOTH:
        raise ConfigError(
            f"tokens file is writable by every user (mode {stat.S_IMODE(mode):o}): anyone could "
            "add a token; chmod o-w it",
            file=file,
        )
    entries: list[tuple[str, Principal]] = []
    names: set[str] = set()
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split()
        where = f"{file}:{number}"
        if len(parts) != 3:
            raise ConfigError("expected 'token_sha256 name role'", file=where, field="line")
        digest, name, role = parts
        if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest.lower()):
            raise ConfigError(
                "not a sha256 (64 hex digits); store hashes, never tokens",
                file=where,
                field="token_sha256",
            )
        if role not in ROLES:
            raise ConfigError(
                f"unknown role {role!r}; expected one of {', '.join(ROLES)}",
                file=where,
                field="role",
            )
        problem = reviewer_name_problem(name, "the name")
        if problem is not None:
            raise ConfigError(problem, file=where, field="name")
        if name in names:
            raise ConfigError(f"duplicate name {name!r}", file=where, field="name")
        names.add(name)
        entries.append((digest.lower(), Principal(name=name, role=role)))
    if not entries:
        raise ConfigError("no tokens", file=file)
    return TokenStore(entries)


@dataclass
class _Session:
    principal: Principal
    expires: float


MAX_SESSIONS = 10_000
"""Sessions a server keeps at most; opening one more ends the oldest."""


class SessionStore:
    """Review-page sessions (in memory) and their CSRF tokens.

    Sessions are kept in the order they were opened, which is the order they expire in
    (each lasts ``ttl_s`` from its opening): opening one drops the expired ones from the
    front and, past ``max_sessions``, the oldest, so it costs O(1) amortised and the
    store never holds more than ``max_sessions``.
    """

    def __init__(self, ttl_s: float, max_sessions: int = MAX_SESSIONS) -> None:
        if max_sessions < 1:
            raise ValueError(f"max_sessions must be at least 1, got {max_sessions!r}")
        self.ttl_s = ttl_s
        self.max_sessions = max_sessions
        self._secret = secrets.token_bytes(32)
        # An OrderedDict: taking its first key stays O(1) however many were popped
        # (a plain dict scans the holes left at its front).
        self._sessions: OrderedDict[str, _Session] = OrderedDict()
        self._local: str | None = None

    def __len__(self) -> int:
        """Sessions held (expired ones not yet dropped included)."""
        return len(self._sessions)

    def _drop_stale(self, now: float) -> None:
        sessions = self._sessions
        while sessions:
            oldest = next(iter(sessions.values()))
            if oldest.expires > now and len(sessions) < self.max_sessions:
                return
            sessions.popitem(last=False)

    def open(self, principal: Principal) -> str:
        """A new session id for ``principal`` (ending the oldest session when
        ``max_sessions`` are open)."""
        now = time.monotonic()
        self._drop_stale(now)
        sid = secrets.token_urlsafe(32)
        self._sessions[sid] = _Session(principal, now + self.ttl_s)
        return sid

    def local(self, principal: Principal) -> str:
        """The one shared session of ``principal`` (a server without tokens: every
        browser is ``local``): its id while it lives, else a new one's. Asking again
        opens nothing, so cookie-less requests cannot pile sessions up."""
        if self._local is not None and self.get(self._local) == principal:
            return self._local
        self._local = self.open(principal)
        return self._local

    def get(self, sid: str | None) -> Principal | None:
        if not sid:
            return None
        session = self._sessions.get(sid)
        if session is None or session.expires <= time.monotonic():
            return None
        return session.principal

    def close(self, sid: str | None) -> None:
        if sid:
            self._sessions.pop(sid, None)

    def csrf(self, sid: str) -> str:
        """The CSRF token bound to a session (or pre-session) id."""
        return hmac.new(self._secret, sid.encode("utf-8"), hashlib.sha256).hexdigest()

    def check_csrf(self, sid: str | None, token: str | None) -> bool:
        if not sid or not token:
            return False
        return hmac.compare_digest(self.csrf(sid), token)
