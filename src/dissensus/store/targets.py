"""Where a journal is, how it is named on screen, and the settings read when it opens.

A journal *target* is an SQLite file path (``":memory:"`` for a throw-away one) or a
``postgresql://`` URL. Choices this module makes:

* **Which journal.** The ``--journal`` option, else ``$DISSENSUS_JOURNAL``, else
  :data:`DEFAULT_JOURNAL` in the working directory. An empty or blank ``--journal`` is
  refused (an unset shell variable must not pick the default unseen); an empty
  ``$DISSENSUS_JOURNAL`` counts as unset.
* **Naming it.** Every message, log line and page names a journal through
  :func:`mask_url`, so a password in a URL is never shown: neither the user-info's
  (``user:pw@``) nor a ``password`` / ``sslpassword`` query parameter (libpq's
  ``?password=`` form), its name compared once percent-decoded as libpq decodes it
  (``?pass%77ord=`` is the password), and ignoring case. A driver's own error text may quote the URL or a part of it (a
  malformed one, a bad percent-encoding): :func:`scrub_secrets` takes every form of the
  URL's secrets out of such text before it is shown: the password as written and
  percent-decoded, each ``@``-separated part of it of 3 characters or more, and the raw
  user-info (libpq ends the user-info at the *first* ``@``, Python's ``urlsplit`` at the
  last, so a driver may quote what follows an unencoded ``@`` as a host name), under
  both readings (libpq's user-info also keeps an unencoded ``?`` or ``#``).
* **PostgreSQL meant, a path given.** A libpq keyword/value string (``host=db
  password=pw dbname=j``) or a URL whose scheme is not in lower case
  (``PostgreSQL://``) is refused (exit 2, the password masked) rather than taken for an
  SQLite file path, which made a file named after the credentials and quoted its
  password in every message (:func:`check_journal_target`); an existing file of that
  name is still opened, and ``./NAME`` names a file of any name.
* **An unencoded ``@`` in the user-info** (``postgresql://u:pa@ss@host/db``) is refused
  before connecting (:func:`check_postgres_url`, exit 2): the URL is ambiguous (libpq
  and ``urlsplit`` read different hosts and passwords), and connecting would send part
  of the password to a name server as a host name. The message says to percent-encode
  ``@`` as ``%40``.
* **Naming it in a command.** A command a message tells the user to run (resume a run,
  resolve a case) names the journal with ``--journal`` (:func:`journal_option`) unless
  it is the one the bare command would open (``$DISSENSUS_JOURNAL``, else
  :data:`DEFAULT_JOURNAL`): copied as shown, it acts on the journal the message is about.
  A URL's password is *left out* there, not masked (:func:`command_url`): libpq then
  takes it from ``$PGPASSWORD`` or ``~/.pgpass``, or says that none was given, where a
  masked ``***`` pasted as it is would be sent as the password and refused as a wrong one.
* **The busy timeout** (``$DISSENSUS_JOURNAL_BUSY_TIMEOUT``, :func:`busy_timeout`) is
  a number of seconds from 0 to :data:`MAX_BUSY_TIMEOUT`, anything else exit 2 naming
  the variable: a larger one passed the check and made every PostgreSQL write fail
  with the server's ``invalid value for parameter "lock_timeout"``.
* **Run ids** are limited to what is safe in file names, URLs, shells and review ids
  (:data:`RUN_ID_PATTERN`): a run is created only under such an id. A lookup of an id
  no journal can hold (one holding a NUL, which PostgreSQL's text cannot even be asked
  about, or a lone surrogate, which is no UTF-8) finds no run without querying
  (:func:`may_be_held`): both back ends give one answer. Any other id is looked up,
  since a journal written before run ids were checked (before 2026-12-01) may hold a
  run under an id outside the pattern (``nightly run #1``), which stays readable.
* **Busy timeout.** A writer waits up to ``$DISSENSUS_JOURNAL_BUSY_TIMEOUT`` seconds
  (default 30) for another writer's lock.
"""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path
from urllib.parse import unquote, urlsplit, urlunsplit

from dissensus.errors import ConfigError, InputError
from dissensus.types import lone_surrogate_at

__all__ = [
    "BUSY_TIMEOUT_ENV",
    "DEFAULT_JOURNAL",
    "RUN_ID_PATTERN",
    "busy_timeout",
    "check_journal_target",
    "check_postgres_url",
    "check_run_id",
    "command_url",
    "is_postgres_url",
    "is_run_id",
    "journal_option",
    "journal_path",
    "mask_url",
    "may_be_held",
    "scrub_secrets",
]

_QUERY_PARAM = re.compile(r"(^|[?&])([^=&#?]*)=([^&]*)")
"""A query parameter of a URL: the separator before it, its name and its value, as written."""

_SECRET_KEYS = frozenset({"password", "sslpassword"})
"""Query parameters of a libpq URL whose values are secrets (by name once decoded)."""


def _secret_key(name: str) -> bool:
    """Whether query parameter ``name`` (as written) is a secret: libpq percent-decodes a
    name before matching it (``pass%77ord`` is ``password``); compared ignoring case, which
    hides more than libpq (case-sensitive) would take as a password, never less."""
    return unquote(name).lower() in _SECRET_KEYS


DEFAULT_JOURNAL = "dissensus-journal.sqlite"
"""Journal file used when neither ``--journal`` nor ``$DISSENSUS_JOURNAL`` is given."""

BUSY_TIMEOUT_ENV = "DISSENSUS_JOURNAL_BUSY_TIMEOUT"
"""Seconds a writer waits for another writer's lock before :class:`JournalBusy` (default 30)."""

MAX_BUSY_TIMEOUT = 2_147_483.0
"""The longest ``$DISSENSUS_JOURNAL_BUSY_TIMEOUT`` (about 24.8 days): PostgreSQL's
``lock_timeout`` holds at most 2,147,483,647 milliseconds."""


def journal_path(option: str | None = None) -> str:
    """The journal to use: the option, else ``$DISSENSUS_JOURNAL``, else :data:`DEFAULT_JOURNAL`.

    An empty option is a ConfigError, not the default: ``--journal "$UNSET_VAR"`` must not
    write to ``./dissensus-journal.sqlite`` unseen. An empty ``$DISSENSUS_JOURNAL`` counts
    as unset, as empty environment variables usually do."""
    if option is not None:
        if not option.strip():
            raise ConfigError(
                "the journal is an empty path: name an SQLite file or a postgresql:// URL, "
                "or leave the option out for $DISSENSUS_JOURNAL or ./" + DEFAULT_JOURNAL,
                field="journal",
            )
        check_journal_target(option)
        return option
    found = os.environ.get("DISSENSUS_JOURNAL") or DEFAULT_JOURNAL
    check_journal_target(found)
    return found


def journal_option(target: str | Path) -> str:
    """`` --journal TARGET`` (shell-quoted, a URL masked) for a command shown to the user
    about journal ``target``; empty when a command without ``--journal`` opens it anyway."""
    if mask_url(target) == mask_url(journal_path(None)):
        return ""
    return " --journal " + shlex.quote(command_url(target))


def command_url(target: str | Path) -> str:
    """``target`` as a command shown to the user names it: a ``postgresql://`` URL
    without its password (neither the user-info's nor a ``password`` / ``sslpassword``
    query parameter), so that libpq, given the command, takes the password from
    ``$PGPASSWORD`` or ``~/.pgpass``; anything else as :func:`mask_url` shows it.

    The URL is cut as libpq reads it, not as ``urlsplit`` does: the user-info ends at the
    first ``@`` before any ``/``, the user name at its first ``:``, the host list (``h1:5432,h2``)
    is kept as written, and the query runs to the end (libpq knows no fragment: a ``#``
    is part of a value). An empty host (``postgresql:///db?host=...``) stays empty."""
    text = str(target)
    if not is_postgres_url(text):
        return mask_url(text)
    scheme, _, rest = text.partition("://")
    cut = re.search(r"[@/]", rest)
    user = None
    if cut is not None and cut.group() == "@":
        user = rest[: cut.start()].partition(":")[0]
        rest = rest[cut.end() :]
    head, _, query = rest.partition("?")
    kept = [p for p in query.split("&") if p and not _secret_key(p.partition("=")[0])]
    named = f"{user}@" if user else ""
    return f"{scheme}://{named}{head}" + ("?" + "&".join(kept) if kept else "")


_LIBPQ_KEYWORDS = frozenset(
    {
        "application_name",
        "connect_timeout",
        "dbname",
        "host",
        "hostaddr",
        "options",
        "passfile",
        "password",
        "port",
        "service",
        "sslcert",
        "sslkey",
        "sslmode",
        "sslpassword",
        "sslrootcert",
        "target_session_attrs",
        "user",
    }
)
"""libpq's keywords a keyword/value connection string (``host=... dbname=...``) is made of."""

_KEYWORD = re.compile(r"(?:^|\s)([A-Za-z_]+)\s*=")
_SECRET_KEYWORD = re.compile(
    r"((?:^|\s)(?:ssl)?password\s*=\s*)('(?:[^'\\]|\\.)*'?|\S*)", re.IGNORECASE
)


def check_journal_target(target: str | Path) -> None:
    """Refuse (:class:`~dissensus.errors.InputError`, exit 2) a journal target that means
    PostgreSQL but would be taken for an SQLite file path: a libpq keyword/value string
    (``host=db user=u password=pw dbname=j``) or a URL whose scheme is not written in
    lower case (``PostgreSQL://``, which libpq does not read either). Such a path made an
    SQLite file named after the credentials in the working directory, and every message
    quoted its password. An existing file of that name stays a journal; ``./NAME`` names
    a file of any name."""
    text = str(target)
    if is_postgres_url(text):
        return
    scheme, sep, _ = text.partition("://")
    if sep and scheme.lower() in ("postgresql", "postgres"):
        raise InputError(
            f"journal {mask_url(text)}: write the URL's scheme in lower case "
            f"({scheme.lower()}://); in any other case it would be an SQLite file path"
        )
    keywords = {m.group(1).lower() for m in _KEYWORD.finditer(text)}
    if keywords & _LIBPQ_KEYWORDS and not os.path.lexists(text):
        shown = _SECRET_KEYWORD.sub(lambda m: f"{m.group(1)}***", text)
        raise InputError(
            f"journal {shown!r}: a PostgreSQL keyword/value connection string is not taken; "
            "give a postgresql:// URL (postgresql://USER:PASSWORD@HOST:PORT/DBNAME), or "
            "./NAME for an SQLite file of that name"
        )


def is_postgres_url(target: str | Path) -> bool:
    """Whether ``target`` names a PostgreSQL journal (``postgresql://`` or ``postgres://``)."""
    return str(target).startswith(("postgresql://", "postgres://"))


RUN_ID_PATTERN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
"""What a run id may be: letters, digits, ``_``, ``-`` and ``.`` (not first, never ``..``),
at most 128 characters: safe in file names, URLs, shells and review ids."""


def is_run_id(run_id: object) -> bool:
    """Whether ``run_id`` is a valid run id (:data:`RUN_ID_PATTERN`, never ``..``): the
    only ids a run can have, so a lookup of any other finds nothing without asking."""
    return (
        isinstance(run_id, str)
        and RUN_ID_PATTERN.fullmatch(run_id) is not None
        and (".." not in run_id)
    )


def may_be_held(run_id: object) -> bool:
    """Whether a journal could hold a run under ``run_id``: a text without a NUL that is
    UTF-8 (no lone surrogate). Lookups of any other id find nothing without querying
    (PostgreSQL refuses to be asked about a NUL); ids outside :data:`RUN_ID_PATTERN` are
    looked up, for runs an older version created under them."""
    return isinstance(run_id, str) and "\x00" not in run_id and lone_surrogate_at(run_id) is None


def check_run_id(run_id: str) -> str:
    """``run_id`` when it is a valid run id (:data:`RUN_ID_PATTERN`); ConfigError otherwise."""
    if not is_run_id(run_id):
        shown = repr(run_id) if len(str(run_id)) <= 80 else repr(str(run_id)[:80]) + "..."
        if isinstance(run_id, str) and not may_be_held(run_id) and "\x00" not in run_id:
            # Bytes that are not UTF-8, passed through by the shell as lone surrogates.
            raise ConfigError(
                f"invalid run id {shown}: it is not valid UTF-8: give text as UTF-8",
                field="run_id",
            )
        raise ConfigError(
            f"invalid run id {shown}: use 1-128 letters, digits, '_', '-' or '.' "
            "(not first, never '..')",
            field="run_id",
        )
    return run_id


def mask_url(target: str | Path) -> str:
    """``target`` as it may be shown: a URL's password replaced by ``***``.

    The one function every message, log line and page uses to name a journal; a path or
    a URL without a password comes back unchanged. A target that cannot be parsed as a
    URL but holds ``@`` loses everything before the last ``@`` (it may be credentials).
    """
    text = str(target)
    if "://" not in text:
        return text
    text = _QUERY_PARAM.sub(
        lambda m: f"{m.group(1)}{m.group(2)}=***" if _secret_key(m.group(2)) else m.group(0),
        text,
    )
    try:
        parts = urlsplit(text)
        password = parts.password
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        userinfo = _userinfo(text)
        if userinfo is not None and ":" not in userinfo:
            return text  # a user name without a password (a bad port, say): nothing to hide
        scheme, _, rest = text.partition("://")
        return f"{scheme}://***@{rest.rpartition('@')[2]}" if "@" in rest else text
    if password is None:
        return text
    if ":" in host:
        host = f"[{host}]"
    if port is not None:
        host += f":{port}"
    return urlunsplit(parts._replace(netloc=f"{parts.username or ''}:***@{host}"))


def _userinfo(target: str) -> str | None:
    """The user-info of URL ``target`` as written (up to the *last* ``@`` of its
    authority, as ``urlsplit`` reads it); ``None`` when it has none."""
    _, _, rest = target.partition("://")
    netloc = re.split(r"[/?#]", rest, maxsplit=1)[0]
    if "@" not in netloc:
        return None
    return netloc.rpartition("@")[0]


def check_postgres_url(target: str | Path) -> None:
    """Refuse (:class:`~dissensus.errors.InputError`, exit 2) a PostgreSQL URL whose
    user-info holds an unencoded ``@``: libpq and ``urlsplit`` read it differently, and
    libpq would take the part of the password after the first ``@`` for a host name."""
    userinfo = _userinfo(str(target))
    if userinfo is not None and "@" in userinfo:
        raise InputError(
            f"invalid journal URL {mask_url(target)}: its user name or password holds an "
            "unencoded '@', which makes the URL ambiguous; percent-encode '@' as %40"
        )


def _secrets(target: str) -> list[str]:
    """Every form in which ``target``'s secrets may be quoted, longest first: the
    user-info's password, each ``@``-separated part of it of 3 characters or more, the
    raw user-info (when it holds a password), and the secret query values, as written
    and percent-decoded."""
    found: list[str] = []
    # Two readings of the user-info: urlsplit's (the authority ends at / ? #, the
    # user-info at its last @) and libpq's (the user-info ends at the first @ before
    # any /, so an unencoded ? or # belongs to the password).
    _, _, rest = target.partition("://")
    head = rest.split("/", 1)[0]
    readings = {_userinfo(target), head.partition("@")[0] if "@" in head else None}
    for userinfo in readings:
        if userinfo is not None and ":" in userinfo:
            password = userinfo.partition(":")[2]
            found += [password, userinfo]
            found += [part for part in password.split("@") if len(part) >= 3]
    found += [m.group(3) for m in _QUERY_PARAM.finditer(target) if _secret_key(m.group(2))]
    forms = {form for raw in found for form in (raw, unquote(raw)) if form}
    return sorted(forms, key=len, reverse=True)


def scrub_secrets(text: str, target: str | Path) -> str:
    """``text`` (a driver's error message, say) with ``target`` masked (:func:`mask_url`)
    and every form of its secrets replaced by ``***``."""
    url = str(target)
    if "://" not in url:
        return text
    text = text.replace(url, mask_url(url))
    for secret in _secrets(url):
        text = text.replace(secret, "***")
    return text


def busy_timeout(value: float | None = None) -> float:
    """The busy timeout in seconds: ``value``, else ``$DISSENSUS_JOURNAL_BUSY_TIMEOUT``, else 30."""
    if value is not None:
        return float(value)
    raw = os.environ.get(BUSY_TIMEOUT_ENV)
    if not raw:
        return 30.0
    try:
        seconds = float(raw)
    except ValueError:
        seconds = -1.0
    if not (0 <= seconds <= MAX_BUSY_TIMEOUT):
        raise ConfigError(
            f"{BUSY_TIMEOUT_ENV} must be a number of seconds from 0 to "
            f"{MAX_BUSY_TIMEOUT:,.0f}, got {raw!r}"
        )
    return seconds
