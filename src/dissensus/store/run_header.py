"""A run's header and the event it is made from: what ``runs verify`` compares.

The ``runs`` table's header columns, ``created``, ``kind`` and ``meta`` (what
``runs list`` and ``runs show`` display), lie outside the hash chain. A run started by
the run loop (:func:`~dissensus.pipeline.batch.start_run`) is created together with its
``run.started`` event, and its header is made from that event (:func:`run_meta` derives
``meta`` for the writer and the check alike): so verification compares each column with
what the chained event says (:func:`header_problems`), and an edit of the header row
outside dissensus is named like an edited event.

What each column is, for a run whose ``run.started`` names its ``kind`` (written so
from this version on):

* ``created`` is the event's time (``at``): the run and its first event are written
  with one reading of the clock;
* ``kind`` is the event's ``kind``;
* ``meta`` is the canonical JSON of ``{input, policy_file}`` (the event's input's path,
  its policy file) and ``via`` (the door that started the run) when the event names
  one: the text itself is compared, so a re-spelling of the same JSON differs too.

Choices this module makes:

* **Runs made by earlier versions** (a ``run.started`` without ``kind``) journalled
  neither their kind nor their door, and their header's time was read from the clock
  just before their event's: their ``kind`` must be ``decide`` (the only kind such a
  run was made with), their ``meta``'s input and policy file are checked and its
  ``via`` is not (not derivable), and their ``created`` only must not be later than
  their event's time (a time moved earlier is not derivable, and verifies).
* **Runs with no header to compare.** A run without a ``run.started`` event (an
  earlier version's one-panel ``decide-one`` runs), or whose ``run.started`` holds no
  input path (a run made through the journal's Python API with another first event),
  was not made from an event: its header is not checked, its chain is.
* **A damaged event is the chain's to report.** A ``run.started`` whose payload does
  not read gives no header to compare; the chain's check names the event.
* **Values are quoted** (:func:`~dissensus.quoting.quote_short`, at most
  :data:`SHOWN` characters each): the header's value, then the journal's.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from dissensus.quoting import quote_short
from dissensus.store import event_types as ev
from dissensus.store.canonical import canonical
from dissensus.store.chain import strict_loads
from dissensus.store.events import EventRow

__all__ = [
    "EARLIER_KIND",
    "HEADER_COLUMNS",
    "SHOWN",
    "STARTED_KEY",
    "header_problems",
    "run_meta",
]

HEADER_COLUMNS = ("created", "kind", "meta")
"""The header's columns verification compares with the run's ``run.started``."""

STARTED_KEY = "run/started"
"""The key of the event a run's header is made from."""

EARLIER_KIND = "decide"
"""The kind of every run an earlier version made with a ``run.started`` (which did not
journal it)."""

SHOWN = 240
"""How many characters of a header's value, and of the journal's, a problem quotes."""


def run_meta(started: Mapping[str, Any]) -> dict[str, Any]:  # JSON: the header's meta
    """The ``meta`` of the run whose ``run.started`` payload is ``started``: its input's
    path, its policy file, and the door that started it (``via``) when one did."""
    source = started.get("input")
    meta: dict[str, Any] = {
        "input": source.get("path") if isinstance(source, Mapping) else None,
        "policy_file": started.get("policy_file"),
    }
    if started.get("via"):
        meta["via"] = started["via"]
    return meta


def header_problems(run_id: str, header: Mapping[str, Any], started: EventRow | None) -> list[str]:
    """What differs between the run's stored ``header`` (its ``runs`` row) and its
    ``run.started`` event's row ``started`` (``None``: the run has none): one problem
    per column, naming the run, the column and both values."""
    payload = _made_from(started)
    if started is None or payload is None:
        return []
    at = str(started["at"])
    stored = {column: str(header[column]) for column in HEADER_COLUMNS}
    if "kind" in payload:
        want = {"created": at, "kind": payload["kind"], "meta": canonical(run_meta(payload))}
        return [
            _differs(run_id, column, stored[column], want[column])
            for column in HEADER_COLUMNS
            if stored[column] != want[column]
        ]
    return _earlier_problems(run_id, stored, payload, at)


def _made_from(started: EventRow | None) -> dict[str, Any] | None:  # JSON: the payload
    """The payload of ``started`` when a header was made from it (a readable
    ``run.started`` with an input path), else ``None``."""
    if started is None or started["type"] != ev.RUN_STARTED:
        return None
    try:
        payload = strict_loads(str(started["payload"]))
    except ValueError:
        return None
    if not isinstance(payload, dict):
        return None
    source = payload.get("input")
    if not isinstance(source, dict) or not isinstance(source.get("path"), str):
        return None
    return payload


def _earlier_problems(
    run_id: str,
    stored: Mapping[str, str],
    payload: Mapping[str, Any],  # JSON: the run.started payload
    at: str,
) -> list[str]:
    """:func:`header_problems` of a run an earlier version made (see the module
    docstring: its door is taken from its header, its time only bounded)."""
    problems: list[str] = []
    if _later(stored["created"], at):
        problems.append(
            f"run {quote_short(run_id)}: header created is "
            f"{quote_short(stored['created'], SHOWN)}, later than its run.started event's "
            f"time {quote_short(at, SHOWN)} (a run made by an earlier version)"
        )
    if stored["kind"] != EARLIER_KIND:
        problems.append(_differs(run_id, "kind", stored["kind"], EARLIER_KIND))
    meta = run_meta(payload)
    via = _stored_via(stored["meta"])
    if via is not None:
        meta["via"] = via
    want = canonical(meta)
    if stored["meta"] != want:
        problems.append(_differs(run_id, "meta", stored["meta"], want))
    return problems


def _later(created: str, at: str) -> bool:
    """Whether the header's time ``created`` is not a time, or one after the event's
    ``at`` (an ``at`` that does not read is the chain's to report)."""
    made, event = _instant(created), _instant(at)
    if made is None or event is None:
        return made is None
    try:
        return made > event
    except TypeError:  # one with a zone, one without: not what a run was written with
        return True


def _instant(text: str) -> datetime | None:
    """A stored time read back (``None``: not a time)."""
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return None


def _stored_via(text: str) -> str | None:
    """The door a stored ``meta`` names (``None``: none, or a ``meta`` that does not read)."""
    try:
        meta = strict_loads(text)
    except ValueError:
        return None
    via = meta.get("via") if isinstance(meta, dict) else None
    return via if isinstance(via, str) and via else None


def _differs(run_id: str, column: str, header: str, journal: object) -> str:
    return (
        f"run {quote_short(run_id)}: header {column} is {quote_short(header, SHOWN)}, "
        f"its run.started event says {quote_short(str(journal), SHOWN)}"
    )
