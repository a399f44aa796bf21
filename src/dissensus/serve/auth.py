"""Bearer tokens, roles, review-page sessions and CSRF tokens of ``dissensus serve``.

The tokens file holds one ``token_sha256 name role`` per line (``#`` comments and blank
lines allowed); only hashes are ever on disk, and :func:`token_line` makes a line for a
fresh token. A request authenticates with ``Authorization: Bearer TOKEN``; the token's
sha256 is compared with **every** entry by :func:`hmac.compare_digest`, so neither the
comparison nor the number of comparisons depends on where a match is.

Choices this module makes:

* Roles: ``submit`` (decide, route, vote, negotiate, verify, bound, read runs),
  ``review`` (the review queue, API and page), ``admin`` (everything). A wrong role is
  403, a missing or unknown token 401.
* Without a tokens file (loopback only) every caller is the ``admin`` named ``local``.
* A tokens file any user may write is refused (on POSIX): whoever can write it can
  add a token. Group-writable files are accepted (a team may share one). A UTF-8 byte
  order mark at its start, which some editors write, is dropped.
* The reviewer recorded with a resolution is always the token's name; a ``reviewer``
  field in a request body is ignored. A token name is a reviewer name, so
  :func:`token_line` and the tokens file refuse one a resolution would
  (:func:`dissensus.pipeline.review.reviewer_name_problem`: over 128 characters, or a
  control or invisible character that makes ``al\u200bice`` look like ``alice``); such a
  token could otherwise claim cases under a look-alike name and resolve none.
* Review-page logins are server-side sessions: the cookie holds a random session id
  (HttpOnly, SameSite=Strict, Path=/review), never the token. Sessions live in memory
  and end with the process. A form's CSRF token is an HMAC of the session id under a
  per-process secret; the login form uses a double-submit pre-session cookie. It is
  compared as bytes, so a form sending any text (``é``) as its token is refused 403
  like a wrong one, never an error.
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
* **A changed tokens file is used from the next request on** (:class:`TokenFile`): the
  server looks at the file (one ``os.stat``: device, inode, size, modification and
  change times, mode) at most every ``check_s`` seconds (the ``tokens_check_s`` setting,
  1 s) and reads it again when any of these changed, or while the file was last changed
  under :data:`RACY_NS` ago (a second write within the file system's timestamp
  granularity, same size and inode, would otherwise go unseen). Deleting a line revokes
  its token, adding one grants it, within about a second and without a restart. Each
  reload that changes the tokens logs one line (how many tokens, added, removed: never a
  token or a hash).
* **A changed file that does not load refuses every token** until it loads again: a bad
  line, a mode any user may write, an unreadable or missing file, a file caught half
  written. Keeping the last good tokens instead would undo a revocation whenever the
  edit that made it broke the file (a typo in the next line), and loading the good
  lines only would read a half-written file as a revocation of the lines not written
  yet; refusing all grants nothing the operator did not write and revokes everything
  they meant to. The server stays up and answers a bearer token ``503`` with
  ``Retry-After: 1`` (the file being replaced is usually whole again by then; a 401
  would tell a client its token is wrong). One line is logged per failing version of
  the file (the error naming file, line and field, as at start); the answer names
  neither the file nor anything in it. A file that does not load at start stays a
  configuration error (exit 2). Replace a tokens file in one step (write a copy, then
  ``mv`` it over the file) and no request ever sees it half written: a write caught
  between two lines loads, the lines not written yet read as removed.
* **A session is its token's**: each request of a review-page session is authorised as
  its token would be now (:meth:`SessionStore.get`). A session whose token's line the
  server has seen gone ends for good at its next request (putting the line back grants
  the token again, not the sessions the removal ended: a session cookie feared stolen
  stays dead); a session whose line changed role or name takes the line's new role and
  name; while the file does not load a session is refused, not ended, and goes on once
  the file loads again with its token in it.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import secrets
import stat
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from dissensus.errors import ConfigError
from dissensus.pipeline.review import reviewer_name_problem

__all__ = [
    "MAX_SESSIONS",
    "RACY_NS",
    "ROLES",
    "TOKENS_CHECK_S",
    "TOKENS_UNAVAILABLE",
    "Principal",
    "SessionStore",
    "TokenFile",
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
    token_sha256: str | None = field(default=None, compare=False, repr=False)
    """The hash of the token that authenticated it (``None``: ``local``); a review-page
    session opened with it ends when that token is revoked."""


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
        self._entries = [
            _Entry(bytes.fromhex(h), replace(p, token_sha256=h.lower())) for h, p in entries
        ]
        self._by_hash = {e.digest.hex(): e.principal for e in self._entries}

    def __len__(self) -> int:
        return len(self._entries)

    def hashes(self) -> frozenset[str]:
        """The token hashes of the file (hex)."""
        return frozenset(self._by_hash)

    def holder(self, token_sha256: str) -> Principal | None:
        """The principal of the line with this token hash (``None``: no such line)."""
        return self._by_hash.get(token_sha256)

    def same(self, other: TokenStore) -> bool:
        """Whether both hold the same lines (hash, name and role)."""
        return self._lines() == other._lines()

    def _lines(self) -> list[tuple[bytes, str, str]]:
        return [(e.digest, e.principal.name, e.principal.role) for e in self._entries]

    def authenticate(self, token: str) -> Principal | None:
        """The principal of ``token``, compared in constant time against every entry."""
        digest = hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()
        found: Principal | None = None
        for entry in self._entries:
            if hmac.compare_digest(entry.digest, digest):
                found = entry.principal
        return found


def _read_regular(path: str | Path) -> tuple[int, bytes | None]:
    """The mode and bytes of the file at ``path``; ``None`` for bytes when it is not a
    regular file. Opened without blocking and judged by what was opened (``fstat``), so
    a pipe put in the file's place is never waited on: opening a FIFO for reading
    blocks until a writer comes, and the server reads its tokens on its event loop."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags)
    with os.fdopen(fd, "rb") as opened:
        mode = os.fstat(opened.fileno()).st_mode
        if not stat.S_ISREG(mode):
            return mode, None
        return mode, opened.read()


def load_tokens(path: str | Path) -> TokenStore:
    """Read a tokens file (:class:`ConfigError` naming the file, line and field)."""
    file = str(path)
    try:
        mode, data = _read_regular(path)
    except OSError as exc:
        raise ConfigError(f"cannot read tokens file: {exc.strerror}", file=file) from exc
    if data is None:
        raise ConfigError(
            "tokens file is not a regular file (a pipe, a device or a directory)", file=file
        )
    try:
        # A byte order mark at the start (an editor saving "UTF-8 with BOM") is dropped.
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise ConfigError("tokens file is not UTF-8", file=file) from None
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


log = logging.getLogger("dissensus.serve")

TOKENS_CHECK_S = 1.0
"""Seconds between two looks at the tokens file (the ``tokens_check_s`` setting)."""

RACY_NS = 2_000_000_000
"""A tokens file modified less than this long ago (ns) is read again at the next look
even if its ``stat`` did not change: a write within the file system's timestamp
granularity that kept the size and inode would show the same ``stat``."""

TOKENS_UNAVAILABLE = (
    "the server cannot check tokens now: its tokens file does not load (its log says "
    "why); every token is refused until it does"
)
"""What a request with a token is answered (503) while the tokens file does not load."""


@dataclass(frozen=True)
class _Stamp:
    """What ``os.stat`` says of the tokens file; another stamp means another file."""

    device: int
    inode: int
    size: int
    mtime_ns: int
    ctime_ns: int
    mode: int


def _stamp(path: str) -> _Stamp | None:
    """The file's stamp (``None`` when it cannot be stat'ed: missing, no access)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return _Stamp(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_mode)


def _settled(stamp: _Stamp | None) -> bool:
    """Whether a file's stamp can stand for its content: last changed over
    :data:`RACY_NS` ago (a missing file is settled: there is nothing to read)."""
    if stamp is None:
        return True
    return time.time_ns() - max(stamp.mtime_ns, stamp.ctime_ns) > RACY_NS


class TokenFile:
    """The tokens file of a running server, read again when it changes.

    Loaded at start (a :class:`ConfigError` naming file, line and field, as
    :func:`load_tokens`); after that, :meth:`current` looks at the file at most every
    ``check_s`` seconds of ``clock`` and reads it again when it changed. A version that
    does not load makes :meth:`current` ``None`` (every token refused) until one loads.
    Each token set that loads after another is a new :attr:`generation`; a token hash
    missing from it is remembered as removed at that generation (:meth:`revoked`).
    """

    def __init__(
        self,
        path: str | Path,
        *,
        check_s: float = TOKENS_CHECK_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = str(path)
        self.check_s = check_s
        self._clock = clock
        self._lock = threading.Lock()
        stamp = _stamp(self.path)  # before reading: a change after it is seen next time
        self._good = load_tokens(self.path)
        self._store: TokenStore | None = self._good
        self._stamp = stamp
        self._settled = _settled(stamp)
        self._checked = clock()
        self._failure: tuple[_Stamp | None, str] | None = None
        self.generation = 0
        """Token sets loaded since start (a session remembers the one it opened in)."""
        self._removed: dict[str, int] = {}

    def __len__(self) -> int:
        """Tokens of the file as last loaded (0 while it does not load)."""
        store = self._store
        return 0 if store is None else len(store)

    @property
    def loads(self) -> bool:
        """Whether the file as last looked at loads (tokens can be checked)."""
        return self._store is not None

    def current(self) -> TokenStore | None:
        """The tokens now (the file looked at if ``check_s`` passed since the last look);
        ``None`` while the file does not load."""
        with self._lock:
            now = self._clock()
            if now - self._checked >= self.check_s:
                self._checked = now
                self._look()
            return self._store

    def authenticate(self, token: str) -> Principal | None:
        """The principal of ``token`` now (``None``: unknown, or the file does not load)."""
        store = self.current()
        return None if store is None else store.authenticate(token)

    def revoked(self, token_sha256: str, since: int) -> bool:
        """Whether a token set loaded after generation ``since`` lacked this hash."""
        return self._removed.get(token_sha256, -1) > since

    def _look(self) -> None:
        stamp = _stamp(self.path)
        if stamp == self._stamp and self._settled:
            return
        self._stamp, self._settled = stamp, _settled(stamp)
        try:
            store = load_tokens(self.path)
        except ConfigError as exc:
            self._fail(stamp, exc)
            return
        self._take(store)

    def _fail(self, stamp: _Stamp | None, exc: ConfigError) -> None:
        self._store = None
        failure = (stamp, str(exc))
        if failure != self._failure:  # once per version of the file, not per request
            self._failure = failure
            log.warning("%s; every token is refused until the tokens file loads", exc)

    def _take(self, store: TokenStore) -> None:
        was_failing, self._failure = self._failure is not None, None
        self._store = store
        if store.same(self._good):
            if was_failing:
                log.warning("tokens file %s loads again: %d token(s)", self.path, len(store))
            return
        before, after = self._good.hashes(), store.hashes()
        self.generation += 1
        for gone in before - after:
            self._removed[gone] = self.generation
        self._good = store
        log.warning(
            "tokens file %s reloaded: %d token(s), %d added, %d removed",
            self.path,
            len(store),
            len(after - before),
            len(before - after),
        )


@dataclass
class _Session:
    principal: Principal
    expires: float
    generation: int = 0


MAX_SESSIONS = 10_000
"""Sessions a server keeps at most; opening one more ends the oldest."""


class SessionStore:
    """Review-page sessions (in memory) and their CSRF tokens.

    Sessions are kept in the order they were opened, which is the order they expire in
    (each lasts ``ttl_s`` from its opening): opening one drops the expired ones from the
    front and, past ``max_sessions``, the oldest, so it costs O(1) amortised and the
    store never holds more than ``max_sessions``.
    """

    def __init__(
        self, ttl_s: float, max_sessions: int = MAX_SESSIONS, tokens: TokenFile | None = None
    ) -> None:
        if max_sessions < 1:
            raise ValueError(f"max_sessions must be at least 1, got {max_sessions!r}")
        self.ttl_s = ttl_s
        self.max_sessions = max_sessions
        self.tokens = tokens
        """The server's tokens file: a session is authorised as its token is now."""
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
        generation = 0 if self.tokens is None else self.tokens.generation
        self._sessions[sid] = _Session(principal, now + self.ttl_s, generation)
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
        """The session's principal now: ``None`` when there is no such live session, when
        its token was revoked (the session ends) or while the tokens file does not load
        (it is kept); with the role and name of its token's line as the file has them."""
        if not sid:
            return None
        session = self._sessions.get(sid)
        if session is None or session.expires <= time.monotonic():
            return None
        if self.tokens is None:
            return session.principal
        return self._holder(self.tokens, sid, session)

    def _holder(self, tokens: TokenFile, sid: str, session: _Session) -> Principal | None:
        """The principal of a session's token now, the session ended if it was revoked."""
        store = tokens.current()
        digest = session.principal.token_sha256
        if digest is not None and not tokens.revoked(digest, session.generation):
            if store is None:
                return None  # the file does not load: refused, not ended
            holder = store.holder(digest)
            if holder is not None:
                return holder
        self._sessions.pop(sid, None)
        return None

    def close(self, sid: str | None) -> None:
        if sid:
            self._sessions.pop(sid, None)

    def csrf(self, sid: str) -> str:
        """The CSRF token bound to a session (or pre-session) id."""
        return hmac.new(self._secret, sid.encode("utf-8"), hashlib.sha256).hexdigest()

    def check_csrf(self, sid: str | None, token: str | None) -> bool:
        if not sid or not token:
            return False
        # As bytes: compare_digest raises on a str that is not ASCII, and a form may send
        # any text (``csrf=%C3%A9`` was a 500 with a traceback in the log).
        sent = token.encode("utf-8", "surrogatepass")
        return hmac.compare_digest(self.csrf(sid).encode("ascii"), sent)
