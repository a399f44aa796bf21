"""The journal form of a review item: each agent's reasoning held once.

A review item (:class:`~dissensus.pipeline.records.ReviewItem`) holds the panel as the
reviewer sees it and, beside it, each agent's position (its decision, its confidence,
its value profile and its reasoning). The position's reasoning is the panel output's
reasoning, so an item journalled whole held every reasoning twice: about a quarter of an
escalated LLMBar case's journal, a sixth of a GSM8K one's.

Choices this module makes:

* **What is left out.** :func:`journal_form` leaves out the ``reasoning`` of position
  ``i`` when output ``i`` of the item's panel is the same agent's and holds the same
  text (equal strings, nothing else); every other position keeps its reasoning, so an
  item whose positions and panel differ (none does today) is journalled whole.
* **Read back whole.** :func:`whole_form` puts each missing reasoning back from the
  panel's output at the same place and of the same agent; the review item's model does
  it before validating, so every reader (``review show``, the review pages, resume,
  labels, audits, the integrations) sees the item whole. A position missing its
  reasoning without such an output stays as it is, and validating it names the field
  (``positions.N.reasoning``), as any other damaged payload.
* **Old journals.** Items journalled whole read as before; the journal's schema revision
  4 marks journals that may hold items in this form, so versions before it that know
  schema revisions refuse them instead of misreading them; 0.1 and 0.2, which know none,
  fail on such an item (:mod:`dissensus.store.migrations`).
* **The content hash** binds the item whole, as every door returns it
  (:func:`dissensus.pipeline.review.content_sha256` applies :func:`whole_form` to a
  payload): an item and its journalled payload, in either form, hash alike, and alike
  before and after this form.
"""

from __future__ import annotations

from typing import Any

from dissensus.types import JsonObject

__all__ = ["journal_form", "whole_form"]

_REASONING = "reasoning"


def _pairs(data: JsonObject) -> list[tuple[Any, Any]] | None:
    """The item's positions beside its panel's outputs, place by place (``None`` when
    the payload has no such lists of equal length)."""
    positions = data.get("positions")
    panel = data.get("panel")
    outputs = panel.get("outputs") if isinstance(panel, dict) else None
    if not isinstance(positions, list) or not isinstance(outputs, list):
        return None
    if len(positions) != len(outputs):
        return None
    return list(zip(positions, outputs, strict=True))


def _same_agent(position: Any, output: Any) -> bool:
    return (
        isinstance(position, dict)
        and isinstance(output, dict)
        and "agent" in position
        and position["agent"] == output.get("agent")
        and isinstance(output.get(_REASONING), str)
    )


def journal_form(data: JsonObject) -> JsonObject:
    """The review item's JSON with each position's reasoning left out where the panel's
    output at its place holds it (see the module docstring); ``data`` is not changed."""
    pairs = _pairs(data)
    if pairs is None:
        return data
    positions: list[Any] = []
    changed = False
    for position, output in pairs:
        if _same_agent(position, output) and position.get(_REASONING) == output[_REASONING]:
            positions.append({k: v for k, v in position.items() if k != _REASONING})
            changed = True
        else:
            positions.append(position)
    if not changed:
        return data
    out = dict(data)
    out["positions"] = positions
    return out


def whole_form(data: Any) -> Any:
    """``data`` with each missing position reasoning put back from the panel's output at
    its place (see the module docstring); anything else is returned as it is."""
    if not isinstance(data, dict):
        return data
    pairs = _pairs(data)
    if pairs is None or all(
        not isinstance(position, dict) or _REASONING in position for position, _ in pairs
    ):
        return data
    positions: list[Any] = []
    for position, output in pairs:
        if (
            isinstance(position, dict)
            and _REASONING not in position
            and _same_agent(position, output)
        ):
            position = {**position, _REASONING: output[_REASONING]}
        positions.append(position)
    out = dict(data)
    out["positions"] = positions
    return out
