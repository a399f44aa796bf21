"""Read-only panel views decoded by msgspec: the route path's first parsing tier.

``dissensus route`` reads a panel's id, metadata and each agent's id, decision and
reasoning, and nothing else; it never journals, re-serialises or changes a panel. For
that path :func:`read_panel_views` decodes each line with ``msgspec`` straight into
frozen structs (:class:`PanelView`, :class:`OutputView`, with :class:`EvidenceView` and
:class:`ReaskView`) that carry the same fields, defaults and constraints as the models
of :mod:`dissensus.types`. On 1.9 kB five-agent panel lines that is about a fifth of
the CPU of the pydantic tiers of :func:`dissensus.io.jsonl.parse_line`, and the
structs are not tracked by the garbage collector.

Like the native tier of :mod:`dissensus.io.wire`, this tier only *accepts*. A line it
does not accept goes to :func:`~dissensus.io.jsonl.parse_line`, which returns a
:class:`~dissensus.types.Panel` (also readable as a view) or the reference's reject:
file, line, field and message are always the reference's. It must accept only lines
the models accept, with the same values; ``tests/test_io_views.py`` checks this
against the reference path, and that the views' fields are the models' fields.

How each model check is met natively:

* labels (``id``, ``decision``): a JSON string only (with the models' minimum
  lengths); a number or boolean label, which the models turn into its string form,
  goes to the next tier;
* an agent id, a decision (a re-ask's too) and a family hold no control character:
  checked after decoding, all of a panel's at once (:func:`_one_line`; a ``pattern``
  costs a Python call per string);
* numbers: msgspec refuses a JSON number out of the float range (``1e999``) wherever
  it sits, ``meta`` included, and JSON text cannot spell ``NaN`` or infinities, so
  every accepted number is finite; confidence lies in [0, 1]; an integer in a float
  field becomes a float, as with the models;
* extra fields, which the models keep and check, are not carried by a struct: a line
  with any (on the panel or an agent) goes to the next tier, as does one with an extra
  field on evidence or a re-ask (which the models forbid);
* lines holding undecodable bytes or a lone surrogate escape never reach msgspec (the
  checks of ``parse_line`` run first); distinct agent ids and the nesting bound
  (:data:`~dissensus.io.jsonl.MAX_DEPTH`, counted only when ``meta`` holds an object or
  an array) are checked after decoding;
* a key written twice, which msgspec reads as the last value: the keys a view shows
  were written (its required fields, ``meta``'s keys, every field not at its default)
  are compared with the keys of the text (:func:`~dissensus.io.jsontext.repeats_key`),
  which is parsed again, with the check, only when it may hold more: a line with a
  field written at its default (``"confidence": null``, ``"present": true``), which
  the view cannot tell from a missing one, costs that second parse. A line with a key
  twice goes to the next tier, whose reference path rejects it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import Annotated, Any

import msgspec
from msgspec import Meta

from dissensus.io.jsonl import (
    MAX_DEPTH,
    Reject,
    blank_line,
    bounded,
    bounded_lines,
    crowded,
    fast_tier_safe,
    line_text,
    overlong,
    parse_line_text,
)
from dissensus.io.jsontext import count_keys, opening_brackets, repeats_key
from dissensus.io.limits import MAX_LINE_CHARS
from dissensus.types import JsonObject, Panel, PanelLike

__all__ = [
    "VIEW_FIELDS",
    "EvidenceView",
    "OutputView",
    "PanelView",
    "ReaskView",
    "decode_panel_view",
    "parse_panel_view",
    "read_numbered_panel_views",
    "read_panel_views",
]

_Label = Annotated[str, Meta(min_length=1)]
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]").search
"""A control character (the models' ``_one_line``)."""


class EvidenceView(msgspec.Struct, frozen=True, gc=False, forbid_unknown_fields=True):
    """:class:`~dissensus.types.Evidence`, read-only."""

    source: _Label
    present: bool = True


class ReaskView(msgspec.Struct, frozen=True, gc=False, forbid_unknown_fields=True):
    """:class:`~dissensus.types.Reask`, read-only."""

    decision: _Label | None = None
    reasoning: str | None = None
    perturbation: str | None = None


class OutputView(msgspec.Struct, frozen=True, gc=False, forbid_unknown_fields=True):
    """:class:`~dissensus.types.AgentOutput` without extra fields, read-only."""

    agent: _Label
    decision: _Label | None
    reasoning: str
    values: dict[str, float] | None = None
    confidence: Annotated[float, Meta(ge=0.0, le=1.0)] | None = None
    evidence: list[EvidenceView] | None = None
    family: str | None = None
    reask: ReaskView | None = None


class PanelView(msgspec.Struct, frozen=True, gc=False, forbid_unknown_fields=True):
    """:class:`~dissensus.types.Panel` without extra fields, read-only.

    Not tracked by the collector (``gc=False``): a view holds no reference back to
    itself, so it can never be part of a cycle.
    """

    id: str
    outputs: Annotated[list[OutputView], Meta(min_length=2)]
    meta: JsonObject = {}


VIEW_FIELDS: dict[type[Any], tuple[str, ...]] = {
    cls: cls.__struct_fields__ for cls in (PanelView, OutputView, EvidenceView, ReaskView)
}
"""The fields of each view (a test checks they are the models' fields)."""

_DECODE = msgspec.json.Decoder(PanelView).decode


def _one_line(outputs: list[OutputView]) -> bool:
    """Whether no agent id, decision (a re-ask's too) or family of ``outputs`` holds a
    control character: all of them joined, printable (one C call) or searched."""
    names = "".join(
        [
            f"{o.agent}{o.decision or ''}{o.family or ''}{o.reask.decision or ''}"
            if o.reask is not None
            else f"{o.agent}{o.decision or ''}{o.family or ''}"
            for o in outputs
        ]
    )
    return names.isprintable() or _CONTROL(names) is None


def decode_panel_view(raw: str) -> PanelView | None:
    """The view of the JSON line ``raw``, or None when this tier does not accept it.

    ``raw`` must hold no undecodable bytes and no lone surrogate escape (the caller
    checks both first). None says nothing about the line: the next tier decides.
    """
    try:
        view = _DECODE(raw)
    except (msgspec.DecodeError, RecursionError):  # ValidationError is a DecodeError
        return None  # msgspec refuses deep nesting with a RecursionError
    outputs = view.outputs
    if len({o.agent for o in outputs}) != len(outputs) or not _one_line(outputs):
        return None
    for value in view.meta.values():
        if value.__class__ is dict or value.__class__ is list:
            if opening_brackets(raw) > MAX_DEPTH:
                return None
            break
    return None if repeats_key(raw, _written_keys(view)) else view


def _written_keys(view: PanelView) -> int:
    """Keys the line of ``view`` wrote, at least: its required fields, and every field
    whose value is not its default (a default may have been written or left out)."""
    count = 2 + (1 + count_keys(view.meta) if view.meta else 0)
    for out in view.outputs:
        count += 3
        if out.values is not None:
            count += 1 + len(out.values)
        if out.evidence is not None:
            count += 1 + sum(1 if item.present else 2 for item in out.evidence)
        if out.reask is not None:
            reask = out.reask
            count += 1 + sum(
                value is not None for value in (reask.decision, reask.reasoning, reask.perturbation)
            )
        count += (out.confidence is not None) + (out.family is not None)
    return count


def parse_panel_view(text: str, *, file: str, line: int) -> PanelLike | Reject:
    """One JSONL line as a panel (a :class:`PanelView`, or a :class:`Panel` from the
    next tiers) or a :class:`Reject`; as :func:`~dissensus.io.jsonl.parse_line`."""
    raw = line_text(text, line)
    if len(raw) > MAX_LINE_CHARS:
        return overlong(raw, file=file, line=line)
    crowd = crowded(raw)  # counted once, for this tier and the next
    if not crowd and fast_tier_safe(raw) and (view := decode_panel_view(raw)) is not None:
        return bounded(view, raw, file=file, line=line)
    return parse_line_text(Panel, raw, file=file, line=line, crowd=crowd)


def read_panel_views(lines: Iterable[str], *, file: str = "-") -> Iterator[PanelLike | Reject]:
    """:func:`parse_panel_view` of every non-blank line, lazily; as
    :func:`~dissensus.io.jsonl.read_models` for :class:`Panel` (a file's lines bounded
    as there)."""
    if hasattr(lines, "readline"):
        lines = bounded_lines(lines)  # type: ignore[arg-type]
    for number, text in enumerate(lines, start=1):
        if blank_line(text, number):
            continue
        yield parse_panel_view(text, file=file, line=number)


def read_numbered_panel_views(
    lines: Iterable[str], *, file: str = "-"
) -> Iterator[tuple[int, PanelLike | Reject]]:
    """:func:`read_panel_views` with each item's input line (1-based; blank lines are
    skipped, so counting the items would fall behind the lines)."""
    if hasattr(lines, "readline"):
        lines = bounded_lines(lines)  # type: ignore[arg-type]
    for number, text in enumerate(lines, start=1):
        if blank_line(text, number):
            continue
        yield number, parse_panel_view(text, file=file, line=number)
