"""The journal every command of the composed pipeline opens: ``--journal``, ``--json`` and
the hooks the CLI runs after each append.

The journal is ``--journal PATH``, else ``$DISSENSUS_JOURNAL``, else
``./dissensus-journal.sqlite``; a PostgreSQL journal is a ``postgresql://`` URL.

Choices this module makes:

* A journal that must exist and does not, or a file that is not a dissensus journal, is
  one line and exit 2 (``check_journal_file``), before anything is read or written.
* The signing key, when one is set, comes from the environment (``signer_from_env``).
* A command that shows a run's records (``runs show``, ``runs export``, ``review show``)
  also recomputes the run's hash chain (``warn_if_altered``, writing nothing) and, when
  it does not verify, says so on stderr: the exit code stays 0 (the records are still
  shown, as they are stored); ``--json`` carries ``verified``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated

import typer

from dissensus.cli.common import check_journal_file, err_console, shown, shown_message

if TYPE_CHECKING:
    from dissensus.store.journal import Event, Journal

JournalOpt = Annotated[
    str | None,
    typer.Option(
        "--journal",
        help="Run journal: an SQLite file or a postgresql:// URL. Default: $DISSENSUS_JOURNAL or ./dissensus-journal.sqlite.",
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable output.")]

JOURNAL_HOOKS: list[Callable[[Event], None]] = []
"""Called with every event the CLI's journal appends (progress, tests' fault injection)."""


def _after_append(event: Event) -> None:
    for hook in JOURNAL_HOOKS:
        hook(event)


def open_journal(path: str | None, *, must_exist: bool = False) -> Journal:
    """The command's journal, checked (``check_journal_file``) and opened as every door
    opens one (``store.journal.open_journal``: sealed with ``$DISSENSUS_SIGNING_KEY``)."""
    from dissensus.store.journal import is_postgres_url, journal_path
    from dissensus.store.journal import open_journal as open_store

    target = journal_path(path)
    if not is_postgres_url(target):
        check_journal_file(target, must_exist=must_exist)
    return open_store(target, after_append=_after_append if JOURNAL_HOOKS else None)


@contextmanager
def opened_journal(path: str | None, *, must_exist: bool = True) -> Iterator[Journal]:
    """The journal, opened and closed around one command."""
    store = open_journal(path, must_exist=must_exist)
    try:
        yield store
    finally:
        store.close()


def warn_if_altered(
    store: Journal,
    run_id: str,
    *,
    what: str = "what is shown",
    each: Callable[[Event], None] | None = None,
) -> bool:
    """Whether the run's hash chain verifies; when it does not, one warning on stderr
    naming the first problem and the command that lists them all. Called once the
    command has read what it shows, or with ``each`` reading it in the same pass (each
    stored row's event, in sequence order, as the check reads it): an event that cannot
    be read at all is the command's error (exit 2), not also a warning."""
    report = store.verify(run_id, review_index=False, each=each)
    if report.ok:
        return True
    from dissensus.store.targets import journal_option

    n = len(report.problems)
    first = report.problems[0] if report.problems else "the chain does not verify"
    on = journal_option(store.path)  # the command names the journal this one read
    err_console.print(
        f"warning: run {shown(run_id)} does not verify ({n} problem{'s' if n != 1 else ''}; "
        f"first: {shown_message(first)}): {what} may have been altered since it was "
        f"written. `dissensus runs verify {shown(run_id)}{shown(on)}` lists every problem."
    )
    return False
