"""The compact layout of a case's first steps: one ``case.steps`` event, read back whole.

A case that makes no model call before its first write journals its input, reading,
route and guard as one ``case.steps`` event (:class:`~dissensus.pipeline.steps.CaseSteps`)
instead of one event per step; :func:`fold` makes it from the case's buffered events and
:func:`case_steps` / :func:`case_step` read either layout.

Choices this module makes:

* **Steps the review item holds are not written twice.** A case escalated before any
  model call writes its ``case.steps`` and its ``review.opened`` in the same batch, and
  the review item holds the case's reading, its guard check and the panel (without
  ``meta.gold``). Then ``case.steps`` leaves out what the item holds, field for field
  equal, and names it in ``in_review`` (a sorted list of step names); a thin input keeps
  its ``id`` and ``line``, and ``gold`` when the panel's ``meta`` had one. About a third
  of such a case's journalled bytes. Readers put the steps back from the item
  (:func:`case_steps` from the case's events, :func:`case_step` with one more read), so
  a thin ``case.steps`` reads exactly as the whole one: the same payloads, equal as
  JSON. The two events are one transaction, so a thin ``case.steps`` never lacks its
  item; one that does (a journal edited by hand) reads as the steps it still holds.
* A ``case.steps`` written whole (cases with a model call, journals before this layout)
  and journals with one event per step are read as before.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from dissensus.store import event_types as ev
from dissensus.store.journal import Event, Journal, NewEvent
from dissensus.types import JsonObject

__all__ = [
    "COMPACT_STEPS",
    "IN_REVIEW",
    "REVIEW_STEP",
    "STEPS_STEP",
    "STEPS_TYPE",
    "case_step",
    "case_steps",
    "fold",
]

STEPS_STEP = "steps"
"""Step key of the compact event holding a case's first steps."""

STEPS_TYPE = ev.CASE_STEPS
"""Type of the compact event (:class:`~dissensus.pipeline.steps.CaseSteps`)."""

REVIEW_STEP = "review"
"""Step key of a case's review item (``review.opened``)."""

IN_REVIEW = "in_review"
"""Field of a thin ``case.steps``: the steps its case's review item holds."""

COMPACT_STEPS: dict[str, frozenset[str]] = {
    ev.CASE_INPUT: frozenset({"input"}),
    ev.CASE_READING: frozenset({"reading"}),
    ev.CASE_ROUTE: frozenset({"route"}),
    ev.CASE_GUARD: frozenset({"guard"}),
}
"""Event types (and their step names) folded into one ``case.steps`` event when a case
first writes: the steps every case takes before any model call. Later readings (after a
follow-up), acceptance, review items and the record stay events of their own (the
review index, the shift check and the record readers select them by type)."""

_FOLDED = frozenset(name for names in COMPACT_STEPS.values() for name in names)
_SHARED = ("reading", "guard")
"""Steps a review item holds under the same name, as the step's JSON."""


def _step(key: str) -> str:
    return key.rpartition("/")[2]


def fold(events: Sequence[NewEvent], ref: str) -> list[NewEvent]:
    """A case's first batch of events with its :data:`COMPACT_STEPS` folded into one
    ``case.steps`` event (in the place of the first of them), thinned by what the batch's
    review item holds; unchanged when fewer than two steps fold."""
    folded: dict[str, JsonObject] = {}
    keys: set[str] = set()
    for e in events:
        names = COMPACT_STEPS.get(e.type)
        if names is not None:
            step = _step(e.key)
            if step in names:
                folded[step] = e.payload
                keys.add(e.key)
    if len(folded) < 2:
        return events if isinstance(events, list) else list(events)
    prefix = f"case/{ref}/"
    review = next(
        (e.payload for e in events if e.type == ev.REVIEW_OPENED and e.key == prefix + REVIEW_STEP),
        None,
    )
    payload = _thinned(folded, review) if review is not None else folded
    out: list[NewEvent] = []
    placed = False
    for e in events:
        if e.key in keys and e.type in COMPACT_STEPS:
            if not placed:
                out.append(NewEvent(STEPS_TYPE, payload, prefix + STEPS_STEP, ref))
                placed = True
            continue
        out.append(e)
    return out


def _thinned(folded: dict[str, JsonObject], review: JsonObject) -> JsonObject:
    """``folded`` without the steps ``review`` holds equal to them, which ``in_review`` names."""
    held: list[str] = []
    for name in _SHARED:
        mine = folded.get(name)
        if mine is not None and (review.get(name) is mine or review.get(name) == mine):
            held.append(name)
    given = folded.get("input")
    thin_input = _thin_input(given, review.get("panel")) if given is not None else None
    if thin_input is not None:
        held.append("input")
    if not held:
        return folded
    out: dict[str, Any] = {k: v for k, v in folded.items() if k not in held}
    if thin_input is not None:
        out["input"] = thin_input
    out[IN_REVIEW] = sorted(held)
    return out


def _thin_input(given: JsonObject, shown: Any) -> JsonObject | None:
    """The input step without its panel when the review item's panel is that panel
    (``meta.gold`` aside, kept here); ``None`` when it is not."""
    panel = given.get("panel")
    if not isinstance(panel, dict) or not isinstance(shown, dict):
        return None
    thin = {k: v for k, v in given.items() if k != "panel"}
    meta = panel.get("meta")
    if isinstance(meta, dict) and "gold" in meta:
        thin["gold"] = meta["gold"]
    if _with_panel(thin, shown) != given:
        return None
    return thin


def _with_panel(thin: JsonObject, shown: dict[str, Any]) -> JsonObject:
    """A thin input step whole again: the review item's panel, with ``gold`` put back."""
    out: dict[str, Any] = {k: v for k, v in thin.items() if k != "gold"}
    panel = dict(shown)
    if "gold" in thin:
        meta = panel.get("meta")
        panel["meta"] = {**(meta if isinstance(meta, dict) else {}), "gold": thin["gold"]}
    out["panel"] = panel
    return out


def _whole(steps: JsonObject, review: JsonObject | None) -> JsonObject:
    """A ``case.steps`` payload with the steps its review item holds put back (as they
    are when it names none or its item is missing)."""
    held = steps.get(IN_REVIEW)
    if not isinstance(held, list):
        return steps
    out: dict[str, Any] = {k: v for k, v in steps.items() if k != IN_REVIEW}
    if review is None:
        if not isinstance(out.get("input"), dict) or "panel" not in out["input"]:
            out.pop("input", None)
        return out
    for name in held:
        if name in _SHARED and isinstance(review.get(name), dict):
            out[name] = review[name]
        elif name == "input" and isinstance(out.get("input"), dict):
            shown = review.get("panel")
            if isinstance(shown, dict):
                out["input"] = _with_panel(out["input"], shown)
            else:
                out.pop("input")
    return out


def case_steps(events: Iterable[Event | NewEvent]) -> dict[str, JsonObject]:
    """A case's journalled steps by key (``case/<line>/<step>``), whichever layout wrote
    them: one event per step, or a ``case.steps`` event holding several (thin or whole)."""
    items = list(events)
    reviews = {e.key: e.payload for e in items if e.type == ev.REVIEW_OPENED}
    out: dict[str, JsonObject] = {}
    suffix = "/" + STEPS_STEP
    for event in items:
        if event.type == STEPS_TYPE and event.key.endswith(suffix):
            prefix = event.key[: -len(STEPS_STEP)]
            payload = event.payload
            if IN_REVIEW in payload:
                payload = _whole(payload, reviews.get(prefix + REVIEW_STEP))
            for step, value in payload.items():
                if isinstance(value, dict):
                    out.setdefault(prefix + step, value)
        out[event.key] = event.payload
    return out


def case_step(journal: Journal, run_id: str, line: int | str, step: str) -> JsonObject | None:
    """The payload of case ``line``'s step ``step`` (``input``, ``reading``, ...), read from
    its own event (every journal) or from the case's ``case.steps`` event (and, for a step
    its review item holds, from that item)."""
    event = journal.get(run_id, f"case/{line}/{step}")
    if event is not None:
        return event.payload
    if step not in _FOLDED:
        return None
    steps = journal.get(run_id, f"case/{line}/{STEPS_STEP}")
    if steps is None:
        return None
    payload = steps.payload
    held = payload.get(IN_REVIEW)
    if isinstance(held, list) and step in held:
        review = journal.get(run_id, f"case/{line}/{REVIEW_STEP}")
        payload = _whole(payload, review.payload if review is not None else None)
    found = payload.get(step)
    return found if isinstance(found, dict) else None
