"""The ``journal`` argument of a door, checked when the door is made.

A node or a reducer is made once and runs many times; a journal it cannot open (a
directory, a folder that does not exist, a number) would fail every call later, each
as that call's fault. :func:`checked_journal` opens and closes the journal when the door
is made (creating an SQLite file that is not there yet) and turns what refuses it into a
:class:`~dissensus.errors.ConfigError` naming ``journal`` (a ``$DISSENSUS_SIGNING_KEY``
that cannot be used is refused then too, naming the variable); :func:`open_journal` opens it
for one call the same way, so that a journal gone bad meanwhile is named as the
journal's fault, never as the call's input. A URL's password is never shown
(:func:`~dissensus.store.targets.mask_url`).
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from dissensus.errors import ConfigError, DissensusError
from dissensus.signing import signer_from_env
from dissensus.store import Journal
from dissensus.store.journal import is_postgres_url
from dissensus.store.journal import open_journal as open_store
from dissensus.store.targets import mask_url, scrub_secrets

__all__ = ["checked_journal", "open_journal"]

MEMORY = ":memory:"


def checked_journal(journal: object, *, resolve: bool = False) -> str:
    """``journal`` as the door keeps it: a ``postgresql://`` URL or an SQLite path
    (absolute, against the working directory now, when ``resolve``), opened and closed
    once. Anything that is no path, or a journal that cannot be opened or created, is a
    :class:`ConfigError` naming ``journal``."""
    if not isinstance(journal, str | os.PathLike) or not isinstance(os.fspath(journal), str):
        raise ConfigError(
            f"a journal is a path or a postgresql:// URL, not {type(journal).__name__}",
            field="journal",
        )
    target = str(os.fspath(journal))
    if resolve and target != MEMORY and target.strip() and not is_postgres_url(target):
        target = str(Path(target).resolve())
    open_journal(target).close()
    return target


def open_journal(target: str) -> Journal:
    """The journal ``target`` names, open as every door opens one
    (:func:`dissensus.store.journal.open_journal`: sealed with ``$DISSENSUS_SIGNING_KEY``
    when it is set); what refuses it is a :class:`ConfigError` naming ``journal`` (the
    set-up's fault, not the input's), but a signing key that cannot be used, which is
    the :class:`ConfigError` naming the variable (never the key)."""
    signer = signer_from_env()
    try:
        return open_store(target, signer=signer)
    except ConfigError as exc:
        if exc.field == "journal":
            raise
        raise ConfigError(_cannot_open(target, exc), field="journal") from exc
    except (DissensusError, OSError, sqlite3.Error) as exc:
        raise ConfigError(_cannot_open(target, exc), field="journal") from exc


def _cannot_open(target: str, exc: BaseException) -> str:
    """The message of a journal that cannot be opened: its URL's password masked, in the
    target and in the reason (as every message naming a journal)."""
    return f"cannot open {mask_url(target)}: {scrub_secrets(str(exc), target)}"
