"""The server's settings: its journal, policy, reviewer, served directory and whether it
runs code, and how a call opens its journal and builds its run specification.

A call opens its journal as every door opens one
(:func:`dissensus.store.journal.open_journal`), with the signer of
``$DISSENSUS_SIGNING_KEY`` read once when the server is built: with it set, every run a
call decides or resolves is sealed; a key set but unusable is a ``ConfigError`` naming
the variable before the server serves.

A message naming the server's own journal names it as the operator configured it, its
password masked (:func:`~dissensus.store.targets.mask_url`), as the store itself names
it: a tool's answer goes to the caller, who never sees the server's credentials.

Choices this module makes:

* **What the server keeps per journal is bounded.** A caller may name any number of
  journals. The lock a call holds while it checks and opens a journal file is kept only
  while a call holds it or waits for it (a later call makes a new one: nothing is left
  to exclude). The shift watches of ``decide`` (one per journal, acceptance file and
  level) are kept for the :data:`WATCHES` most recently used; a watch a call is
  stepping is never dropped (so two calls on one journal step one watch, one step at a
  time), and an older one, unused, is dropped when a new one would pass that number.
  A dropped watch is made anew at its journal's next ``decide``, as a restarted
  server's is (:mod:`dissensus.pipeline.shift_watch`): its first step looks at the
  journal and makes the check of the latest multiple of ``every`` again -- the same
  check of the same cases, with the same outcome, so no more of the level is spent --
  at the cost of one read of the file's judged cases and one fit. A flag it would
  journal is found in the journal, never in the watch, so a dropped watch loses no
  hold.
* **A new journal two servers open at once.** A journal argument naming an existing
  empty file is refused (SQLite would make any empty file a journal), but an empty file
  made in the last :data:`NEW_JOURNAL_WAIT` seconds is given that long to become one
  first: another server creating the journal (each MCP client runs a server of its own,
  with locks of its own) leaves it empty for a few milliseconds, and a call of this one
  that looked then was refused with ``an existing empty file is not a journal``."""

from __future__ import annotations

import contextlib
import os
import shlex
import stat
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Generic, TypeVar

from dissensus.errors import ConfigError, DissensusError, InputError
from dissensus.integrations.mcp.caller_files import _caller_file, _CodeRefused
from dissensus.integrations.mcp.paths import _check_journal, _confined, _file_arg, _served_root
from dissensus.loading import is_code_name
from dissensus.pipeline import RunSpec
from dissensus.pipeline.learned import load_learned_data
from dissensus.pipeline.policy import Policy, load_policy
from dissensus.pipeline.review import reviewer_name_problem
from dissensus.pipeline.shift_watch import EVERY, ShiftWatch, check_every
from dissensus.signing import signer_from_env
from dissensus.store import Journal, is_postgres_url, journal_path, open_journal
from dissensus.store.targets import mask_url

WATCHES = 64
"""Shift watches of ``decide`` the server keeps, the most recently used (see above)."""

REVIEWER_ENV = "DISSENSUS_REVIEWER"
"""The reviewer identity ``review_resolve`` records when ``--reviewer`` is not given."""

T = TypeVar("T")


def _code_setting(policy: Policy, base: Path | None, file: str | None) -> str | None:
    """The setting of ``policy`` that would have the run import code, if any: checked
    before :meth:`RunSpec.from_policy`, which imports it."""
    if policy.allow_code:
        return "allow_code"
    if is_code_name(policy.reading.similarity.strip()):
        return "reading.similarity"
    if policy.acceptance.model:
        learned = load_learned_data(
            policy.acceptance.model, base, policy_file=file, field="acceptance.model"
        )
        if ((learned or {}).get("settings") or {}).get("user"):
            return "acceptance.model"  # user features, loaded with the spec
    return None


NEW_JOURNAL_WAIT = 2.0
"""Seconds an empty journal file made that recently is given to become a journal."""


def _empty_file(path: Path, wait: float | None = None) -> bool:
    """Whether ``path`` is an empty file that is no journal: empty, and still empty after
    up to ``wait`` seconds when it was made less than ``wait`` seconds ago. Another server
    (a process of its own, with its own locks: each MCP client starts one) creating the
    same new journal makes the file, empty, then writes the journal's header within
    milliseconds; a call that looked in between took the journal for an empty file (a
    package's ``__init__.py``) and was refused. ``wait`` is :data:`NEW_JOURNAL_WAIT` unless
    given."""
    wait = NEW_JOURNAL_WAIT if wait is None else wait
    deadline = time.monotonic() + wait
    while True:
        found = path.stat()
        if found.st_size > 0:
            return False
        if time.time() - found.st_mtime > wait or time.monotonic() >= deadline:
            return True
        time.sleep(0.02)


def _not_a_file(path: Path) -> str | None:
    """What is at ``path`` when it is there but is no regular file (``None``: nothing)."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return None
    for test, kind in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a named pipe"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a device"),
        (stat.S_ISBLK, "a device"),
    ):
        if test(mode):
            return kind
    return "neither a file nor a directory"


class _NamedError(DissensusError):
    """A library error raised while a tool used a journal, its text naming the journal as
    the caller named it (:func:`_as_named`)."""


def _as_named(text: str, place: str, name: str) -> str:
    """``text`` with the journal at ``place`` (its path as the store names it, shell-quoted
    or not, as in a ``--journal`` option) named ``name``, as the caller named it: the
    server's own root is not the caller's."""
    if not place or place == name:
        return text
    for found, shown in dict.fromkeys(((shlex.quote(place), shlex.quote(name)), (place, name))):
        text = text.replace(found, shown)
    return text


def _server_reviewer(given: str | None) -> str | None:
    """The identity ``review_resolve`` records: ``given`` (``--reviewer``), else
    ``$DISSENSUS_REVIEWER``, stripped; an empty or blank one is unset (``None``), as an
    empty variable is. A name that could not be a reviewer's (a control character, an
    escape sequence, more than 128 characters) is a :class:`ConfigError` naming where it
    came from, raised before the server serves, by the rule ``review resolve`` and
    ``serve-token`` apply (:func:`~dissensus.pipeline.review.reviewer_name_problem`)."""
    where = "--reviewer"
    if given is None or not given.strip():
        given, where = os.environ.get(REVIEWER_ENV), f"${REVIEWER_ENV}"
    if given is None or not given.strip():
        return None
    problem = reviewer_name_problem(given.strip(), where)
    if problem is not None:
        raise ConfigError(problem)
    return given.strip()


class _Kept(Generic[T]):
    """A value the server keeps for a journal, with the calls using it now."""

    __slots__ = ("users", "value")

    def __init__(self, value: T) -> None:
        self.value = value
        self.users = 0


class _Settings:
    def __init__(
        self,
        journal: str | None,
        policy: str | None,
        reviewer: str | None,
        *,
        root: str | os.PathLike[str] | None = None,
        allow_functions: bool = False,
        shift_every: int = EVERY,
    ) -> None:
        self.journal = _check_journal(journal) if journal else journal
        self.policy = _file_arg(policy, "policy")
        self.reviewer = _server_reviewer(reviewer)
        # Every journal a call opens seals its runs with this key (as the CLI's): a key
        # that cannot be used is named before the server serves.
        self.signer = signer_from_env()
        self.root = _served_root(root)
        self.allow_functions = allow_functions
        # The lock of each journal file a call is checking and opening, with the calls
        # holding or waiting for it: dropped when none does.
        self._opening: dict[Path, _Kept[threading.Lock]] = {}
        self._opening_guard = threading.Lock()
        # One shift watch per journal and acceptance file (dissensus.pipeline.shift_watch),
        # the WATCHES most recently used, with the calls stepping it.
        self.shift_every = check_every(shift_every)
        self._watches: OrderedDict[tuple[str, str, float], _Kept[ShiftWatch]] = OrderedDict()

    @contextlib.contextmanager
    def _opening_lock(self, path: Path) -> Iterator[None]:
        """Hold the lock of the journal at ``path`` while a call checks and opens it: the
        first call to open a new journal creates its file, empty until its schema is
        written, and a call checking it then would take it for an empty file that is no
        journal. Kept while a call holds or waits for it, never longer."""
        with self._opening_guard:
            kept = self._opening.get(path)
            if kept is None:
                kept = self._opening[path] = _Kept(threading.Lock())
            kept.users += 1
        try:
            with kept.value:
                yield
        finally:
            with self._opening_guard:
                kept.users -= 1
                if kept.users == 0:
                    del self._opening[path]

    def file(self, value: str, field: str) -> str:
        """The file a path argument names, under the served directory and existing."""
        path = _confined(self.root, value, field)
        if not path.is_file():
            # A directory or a named pipe is there, but is no file to read (a pipe would
            # hold the call until something wrote to it): said so, not "no such file".
            kind = _not_a_file(path)
            if kind is not None:
                raise ConfigError(f"not a regular file ({kind})", field=field)
            given = Path(value) if Path(value).is_absolute() else self.root / value
            # a link `ls` shows, to no file: said so, as for the journal, its target unnamed
            link = " (a broken symbolic link)" if given.is_symlink() else ""
            raise ConfigError(
                f"no such file under the directory the server serves{link}", field=field
            )
        return str(path)

    @contextlib.contextmanager
    def using(
        self, journal: str | None, *, must_exist: bool
    ) -> Iterator[tuple[Journal, Callable[[str], str]]]:
        """The journal a call uses (:meth:`open`), with the function naming it in a text as
        the caller named it (the ``journal`` argument, else the server's own as
        configured, a database URL's password masked); an error of the library raised
        while it is used is re-raised so named, never by the path it has under the served
        directory."""
        name = journal or mask_url(journal_path(self.journal))
        with self.open(journal, must_exist=must_exist) as store:
            place = str(store.path)

            def named(text: str) -> str:
                return _as_named(text, place, name)

            try:
                yield store, named
            except DissensusError as exc:
                text = named(str(exc))
                if text == str(exc):
                    raise
                raise _NamedError(text) from exc

    def open(self, journal: str | None, *, must_exist: bool) -> Journal:
        if not journal:  # the server's: the operator's, as the CLI resolves it
            target = _check_journal(journal_path(self.journal))
            if must_exist and not is_postgres_url(target) and not os.path.exists(target):
                link = " (a broken symbolic link)" if os.path.islink(target) else ""
                raise InputError(f"journal not found: {target}{link} (field 'journal')")
            return open_journal(target, signer=self.signer)
        _check_journal(journal)
        if is_postgres_url(journal):
            raise ConfigError(
                "a journal argument is a file under the directory the server serves, not a "
                "URL (the server's own --journal may be one)",
                field="journal",
            )
        path = _confined(self.root, journal, "journal")
        if must_exist and not path.exists():
            given = Path(journal) if Path(journal).is_absolute() else self.root / journal
            # a link `ls` shows, to no file: said so, its target left unnamed
            link = " (a broken symbolic link)" if given.is_symlink() else ""
            raise InputError(
                f"journal not found under the directory the server serves{link} (field 'journal')"
            )
        with self._opening_lock(path):
            if path.is_file() and _empty_file(path):
                # SQLite would make any empty file (a package's __init__.py) a journal.
                raise InputError("an existing empty file is not a journal (field 'journal')")
            try:
                return open_journal(str(path), signer=self.signer)
            except DissensusError as exc:
                # Named as the caller named it: the server's own root is not the caller's.
                text = str(exc).replace(str(path), journal).replace(str(self.root), ".")
                raise InputError(f"{text} (field 'journal')") from None

    @contextlib.contextmanager
    def watching(self, store: Journal, spec: RunSpec) -> Iterator[ShiftWatch | None]:
        """The shift watch of the cases ``decide`` decides with ``spec`` into ``store``
        (``None``: nothing to watch): one per journal, acceptance file and level, so that
        its count goes on from call to call, kept while the call uses it and then among
        the :data:`WATCHES` most recently used (see the module docstring)."""
        if spec.acceptance is None or self.shift_every == 0:
            yield None
            return
        key = (
            str(store.path),
            str(spec.acceptance.get("sha256")),
            spec.policy.acceptance.shift_alpha,
        )
        with self._opening_guard:
            kept = self._watches.get(key)
            if kept is None:
                kept = self._watches[key] = _Kept(ShiftWatch(spec, every=self.shift_every))
            self._watches.move_to_end(key)
            kept.users += 1
            self._drop_watches()
        try:
            yield kept.value
        finally:
            with self._opening_guard:
                kept.users -= 1
                self._drop_watches()

    def _drop_watches(self) -> None:
        """Drop the least recently used watches no call is using, past :data:`WATCHES`."""
        unused = [k for k, kept in self._watches.items() if kept.users == 0]
        for key in unused[: max(0, len(self._watches) - WATCHES)]:
            del self._watches[key]

    def spec(self, policy: str | None) -> RunSpec:
        """The run specification of a call: its policy file, else the server's (built per
        call, so a changed file is read again, as each ``dissensus decide`` would). A
        policy that would import code is refused unless the server allows functions."""
        if not policy:
            return self._spec(self.policy)
        name = self.file(policy, "policy")
        return _caller_file(
            lambda: self._spec(name), name, field="policy", what="policy", schema=Policy
        )

    def _spec(self, name: str | None) -> RunSpec:
        if not self.allow_functions:
            loaded, base = load_policy(name)
            setting = _code_setting(loaded, base, name)
            if setting is not None:
                raise _CodeRefused(
                    f"the policy's {setting!r} imports server-side code: start the server "
                    "with --allow-functions",
                    field="policy",
                )
        return RunSpec.from_policy(name)
