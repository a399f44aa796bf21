"""What the journal holds: events, the events to append, and a run's header and head.

Every event of a run has a sequence number (0, 1, 2, ... without gaps), a *key* unique
within the run, a type (:mod:`dissensus.store.event_types`), an optional case reference,
a JSON payload stored as canonical text, and ``hash = sha256(prev_hash + canonical(body))``
(:mod:`dissensus.store.chain`). This module holds the models and the one conversion from
a stored ``events`` row to an :class:`Event`.

Choices this module makes:

* **Payloads are JSON passing through.** The journal stores whatever JSON object it is
  given and hands it back untouched; the typed models of each event type live with the
  code that writes them (``pipeline/steps.py``, ``pipeline/run_events.py``), so
  ``payload`` and a run's ``meta`` stay ``dict[str, Any]`` here.
* **An event just written is not validated again.** :func:`written_event` builds the
  :class:`Event` of a row the log has just made from typed values (what pydantic's
  ``model_construct`` does, without its per-call overhead); an event read back from the
  database is validated (:func:`event_from_row`).
* **Rows are typed at the seam.** :class:`EventRow` is what a back end's ``SELECT * FROM
  events`` returns; :func:`event_from_row` turns it into an :class:`Event` (the payload
  read back from its canonical text). A row edited outside dissensus so that it no
  longer reads (a payload that is not JSON, nested too deeply to read, or not an object) is
  :class:`~dissensus.store.errors.JournalDamaged` naming the run, sequence number and
  key: every command prints it as one line (exit 2); ``runs verify`` names every such
  event.
"""

from __future__ import annotations

import builtins
import json
from typing import Any, NamedTuple, TypedDict, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from dissensus.store.errors import JournalDamaged
from dissensus.store.schema import EVENTS, RUNS

__all__ = [
    "EVENTS_COLUMNS",
    "RUNS_COLUMNS",
    "Event",
    "EventBody",
    "EventRow",
    "EventValues",
    "NewEvent",
    "RunHead",
    "RunInfo",
    "RunRow",
    "event_from_row",
    "run_from_row",
    "stored_int",
    "written_event",
]

ModelT = TypeVar("ModelT", bound=BaseModel)

RUNS_COLUMNS = RUNS.column_names
"""The ``runs`` table's columns in order (a table with others is not a journal's)."""
EVENTS_COLUMNS = EVENTS.column_names
"""The ``events`` table's columns in order."""


class EventBody(TypedDict):
    """The hashed part of an event (its canonical JSON is what the chain covers)."""

    run: str
    seq: int
    key: str
    type: str
    case: str | None
    at: str
    payload: dict[str, Any]  # JSON passing through: the event's payload, untouched


class Event(BaseModel):
    """One journal event, as stored."""

    model_config = ConfigDict(frozen=True)

    run_id: str
    seq: int
    key: str
    """Unique within the run; appending it again is a no-op."""
    type: str
    """What happened, e.g. ``case.reading``, ``model.call``, ``case.record``."""
    case: str | None
    """The case the event belongs to (``None`` for run-level events)."""
    at: str
    payload: dict[str, Any]  # JSON passing through: typed by the code that wrote it
    prev_hash: str
    hash: str

    def read_as(self, model: builtins.type[ModelT]) -> ModelT:
        """The payload as ``model`` (the type its writer used). A payload edited outside
        dissensus into JSON of another shape is :class:`JournalDamaged` naming the run,
        the event and the field, as a payload that is not JSON is: never a traceback."""
        try:
            return model.model_validate(self.payload)
        except ValidationError as exc:
            problem = exc.errors()[0]
            field = ".".join(str(p) for p in problem["loc"]) or "payload"
            raise JournalDamaged(
                f"journal damaged: run {self.run_id}, event {self.seq} ({self.key}): "
                f"{field}: {problem['msg']}{_SEE}"
            ) from None

    def body(self) -> EventBody:
        """The hashed part of the event."""
        return {
            "run": self.run_id,
            "seq": self.seq,
            "key": self.key,
            "type": self.type,
            "case": self.case,
            "at": self.at,
            "payload": self.payload,
        }


class NewEvent(NamedTuple):
    """An event to append: what happened, its payload, its key and its case."""

    type: str
    payload: dict[str, Any]  # JSON passing through: stored as its canonical text
    key: str
    case: str | None = None
    text: str | None = None
    """The payload's canonical JSON text when the caller already has it (a worker made
    it): stored and hashed as given, so it must be ``canonical(payload)``."""


class RunHead(NamedTuple):
    """Where a run's chain stands: how many events it holds and the hash of the last."""

    n_events: int
    head_hash: str


class RunInfo(BaseModel):
    """One run's header."""

    run_id: str
    created: str
    kind: str
    meta: dict[str, Any]  # JSON passing through: what the caller registered the run with
    head_hash: str
    n_events: int


class EventRow(TypedDict):
    """One row of the ``events`` table, as a back end returns it."""

    run_id: str
    seq: int
    key: str
    type: str
    case_ref: str | None
    at: str
    payload: str
    """The payload's canonical JSON text."""
    prev_hash: str
    hash: str


class RunRow(TypedDict):
    """One row of the ``runs`` table."""

    run_id: str
    created: str
    kind: str
    meta: str
    """The run's meta as canonical JSON text."""
    head_hash: str
    n_events: int


EventValues = tuple[str, int, str, str, str | None, str, str, str, str]
"""An event row to insert, in :data:`EVENTS_COLUMNS` order."""


_FIELDS = frozenset(Event.model_fields)
_new = Event.__new__
_set = object.__setattr__


def written_event(
    run_id: str,
    seq: int,
    key: str,
    type: str,
    case: str | None,
    at: str,
    payload: dict[str, Any],  # JSON passing through: the payload as the caller gave it
    prev_hash: str,
    hash: str,
) -> Event:
    """The :class:`Event` of a row just written from these (already typed) values,
    unvalidated: equal to ``Event(...)`` of the same values, for a fraction of its cost."""
    event = _new(Event)
    _set(
        event,
        "__dict__",
        {
            "run_id": run_id,
            "seq": seq,
            "key": key,
            "type": type,
            "case": case,
            "at": at,
            "payload": payload,
            "prev_hash": prev_hash,
            "hash": hash,
        },
    )
    _set(event, "__pydantic_fields_set__", set(_FIELDS))
    _set(event, "__pydantic_extra__", None)
    _set(event, "__pydantic_private__", None)
    return event


_SEE = "; dissensus runs verify names every damaged event"


def stored_int(value: Any, where: str) -> int:
    """A stored integer column (a sequence number, a count) read back; text edited into
    it outside dissensus is :class:`JournalDamaged` naming ``where``, never a
    ``ValueError``."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    try:
        return int(str(value).strip(), 10)
    except ValueError:
        raise JournalDamaged(f"{where} is not an integer ({str(value)[:40]!r}){_SEE}") from None


def _stored_json(text: Any, where: str) -> Any:
    try:
        return json.loads(text)
    except (TypeError, ValueError) as exc:  # json.JSONDecodeError is a ValueError
        raise JournalDamaged(f"{where} is not valid JSON ({exc}){_SEE}") from None
    except RecursionError:  # nested deeper than the parser goes: no run writes that
        raise JournalDamaged(f"{where} is nested too deeply to read{_SEE}") from None


def event_from_row(
    row: EventRow,
    payload: dict[str, Any] | None = None,  # JSON passing through: the row's, read
) -> Event:
    """The :class:`Event` a stored row holds (with ``payload``: its payload already
    read from the row's text, by a reader that reads it as :func:`json.loads` does).

    A row whose payload is not JSON, or does not make an event (a payload that is not
    an object: the row was edited outside dissensus), is :class:`JournalDamaged` naming
    the run and the event's sequence number and key, never a raw decoding error.
    """
    event_at = f"journal damaged: run {row['run_id']}, event {row['seq']} ({row['key']})"
    if payload is None:
        payload = _stored_json(row["payload"], f"{event_at}: stored payload")
    try:
        return Event(
            run_id=row["run_id"],
            seq=stored_int(row["seq"], f"{event_at}: sequence number"),
            key=row["key"],
            type=row["type"],
            case=row["case_ref"],
            at=row["at"],
            payload=payload,
            prev_hash=row["prev_hash"],
            hash=row["hash"],
        )
    except ValidationError as exc:
        problem = exc.errors()[0]
        field = ".".join(str(p) for p in problem["loc"])
        raise JournalDamaged(
            f"journal damaged: run {row['run_id']}, event {row['seq']} ({row['key']}): "
            f"{field}: {problem['msg']}{_SEE}"
        ) from None


def run_from_row(row: RunRow) -> RunInfo:
    """The :class:`RunInfo` a stored ``runs`` row holds (a ``meta`` that is not JSON:
    :class:`JournalDamaged` naming the run)."""
    meta = _stored_json(row["meta"], f"journal damaged: run {row['run_id']}: stored meta")
    try:
        return RunInfo(
            run_id=row["run_id"],
            created=row["created"],
            kind=row["kind"],
            meta=meta,
            head_hash=row["head_hash"],
            n_events=stored_int(
                row["n_events"], f"journal damaged: run {row['run_id']}: event count"
            ),
        )
    except ValidationError as exc:
        problem = exc.errors()[0]
        field = ".".join(str(p) for p in problem["loc"])
        raise JournalDamaged(
            f"journal damaged: run {row['run_id']}: {field}: {problem['msg']}"
        ) from None
