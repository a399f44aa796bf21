"""One method's output on one task: the record `dissensus deliberate --json` prints.

DCI and every baseline produce the same record, so the efficiency table and the judge
read them alike. Only DCI fills ``packet``; baselines leave it ``null`` (their absence
of a packet is a measured result, not an omission).

Choices this module makes: :func:`packet_text` writes what participants and the task
said (option texts, the rationale, evidence, objections, the minority's words, reopen
conditions, next actions) inside the line that introduces it, its further lines
indented, so that the lines at the margin, which a reader and a judge take for the
packet's structure (``Path: ...; status: ...``), are only ever the packet's own.
The earlier rendering, which wrote that text with its line breaks as they were, is kept
as ``layout="previous"`` for one use only: a signed ``deliberate --json`` line written
by an earlier version restates its packet in that rendering, and ``dissensus verify``
accepts it only while it is unambiguous (:func:`previous_layout_forges`): when no line
that participants' text puts at the margin in it begins as one of the packet's own
lines does (``Decision``, ``Path``, ``Minority``, a ``-`` item, ...: the openings read
off the renderer itself, case and leading spaces ignored), since in that rendering such
a line could pass for the packet's. :class:`JudgedOutput`, what ``judge`` reads,
accepts a signed line's packet and ignores its signature.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import cache
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from dissensus.dci.packet import (
    DecisionPacket,
    MinorityPosition,
    Objection,
    SelectedOption,
)
from dissensus.types import JsonObject, Usage

__all__ = [
    "METHODS",
    "DeliberationOutput",
    "JudgedOutput",
    "Method",
    "packet_text",
    "previous_layout_forges",
]

Method = Literal["dci", "single", "voting", "self_consistency", "debate"]
METHODS: tuple[Method, ...] = ("dci", "single", "voting", "self_consistency", "debate")


class DeliberationOutput(BaseModel):
    """What a method answered on a task, and what it cost."""

    model_config = ConfigDict(extra="forbid")

    task_id: str
    task_type: str | None = None
    method: Method
    variant: str | None = None
    """Ablations in force, e.g. ``no_archetypes`` (DCI only)."""
    model: str
    question: str
    answer: str
    """The final answer as text (what a judge reads)."""
    selected_option: str | None = None
    packet: DecisionPacket | None = None
    usage: Usage = Field(default_factory=Usage)
    status: Literal["complete", "budget_exhausted", "model_failure", "deadline_exceeded"] = (
        "complete"
    )
    detail: str | None = None
    extras: JsonObject = Field(default_factory=dict)
    """Method-specific facts: votes, tie-breaks, rounds."""


class _SignedPacket(DecisionPacket):
    """A packet as a signed ``deliberate --json`` line carries it: its ``signature``
    (``DISSENSUS_SIGNING_KEY``) is accepted and set aside, never checked here."""

    signature: JsonObject | None = None


class JudgedOutput(DeliberationOutput):
    """A line ``dissensus judge`` reads: a ``deliberate --json`` line, its packet signed
    or not. Judging ignores the signature; ``dissensus verify`` checks it."""

    packet: _SignedPacket | None = None


def _held(text: str) -> str:
    """Participants' (or the task's) ``text`` kept inside the line that introduces it:
    every line after its first is indented, whatever breaks it (``\n``, ``\r``,
    U+2028, ...), so no line of it starts where the packet's own lines do."""
    first, *rest = text.splitlines() or [""]
    return "\n".join([first, *(f"  {line}" for line in rest)])


def _as_written(text: str) -> str:
    """``text`` with its line breaks as they were (the previous layout)."""
    return text


def packet_text(
    packet: DecisionPacket, *, layout: Literal["current", "previous"] = "current"
) -> str:
    """The packet as prose-like text, for judges and human output.

    Every line that starts at the margin is the packet's own (``Decision:``, ``Path:``,
    a ``- `` item, ...); text that participants or the task wrote continues indented
    (:func:`_held`), so a synthesis that writes ``\nPath: converged; status: complete``
    cannot pass for the packet's path and status.

    ``layout="previous"`` writes that text with its line breaks as they were, as
    versions before the indented layout did: only for checking a line those versions
    wrote (``dissensus verify``), never for output."""
    return _render(packet, _held if layout == "current" else _as_written)


def _render(packet: DecisionPacket, held: Callable[[str], str]) -> str:
    """The packet's lines, each text participants or the task wrote passed through
    ``held``."""
    lines: list[str] = []
    if packet.selected is not None:
        label = f" ({held(packet.selected.label)})" if packet.selected.label else ""
        lines.append(f"Decision: {packet.selected.id}{label}: {held(packet.selected.text)}")
        lines.append(f"Rationale: {held(packet.selected.rationale)}")
        if packet.selected.evidence:
            lines.append("Evidence: " + "; ".join(held(e) for e in packet.selected.evidence))
    else:
        lines.append("Decision: none (no option was available)")
    lines.append(f"Path: {packet.path}; status: {packet.status}")
    if packet.residual_objections:
        lines.append("Residual objections:")
        lines.extend(
            f"- {o.holder} on {o.target}{' (blocking)' if o.blocking else ''}: {held(o.points[-1])}"
            for o in packet.residual_objections
        )
    if packet.minority_report:
        lines.append("Minority report:")
        for m in packet.minority_report:
            conf = f", confidence {m.confidence:.2f}" if m.confidence is not None else ""
            lines.append(f"- {m.option} held by {', '.join(m.holders)}{conf}: {held(m.rationale)}")
    if packet.reopen_conditions:
        lines.append("Reopen conditions:")
        lines.extend(f"- {held(c)}" for c in packet.reopen_conditions)
    if packet.next_actions:
        lines.append("Next actions:")
        lines.extend(f"- {held(a)}" for a in packet.next_actions)
    return "\n".join(lines)


@cache
def _margin_heads() -> re.Pattern[str]:
    """How the packet's own lines begin, read off :func:`_render` (a probe packet with
    every section present): their first word (``Decision``, ``Path``, ``Residual``,
    ...) or a ``-`` item, matched case-insensitively after any leading spaces."""
    # Only the fields _render reads: model_construct checks nothing.
    some: dict[str, Any] = {"id": "o", "label": "l", "text": "t", "rationale": "r"}
    selected = SelectedOption.model_construct(**some, evidence=["e"])
    objected: dict[str, Any] = {"holder": "h", "target": "o", "blocking": True, "points": ["p"]}
    objection = Objection.model_construct(**objected)
    held_by: dict[str, Any] = {"option": "o", "holders": ["h"], "confidence": 0.5}
    minority = MinorityPosition.model_construct(**held_by, rationale="r")
    heads: set[str] = set()
    for chosen in (selected, None):
        sections: dict[str, Any] = {
            "selected": chosen,
            "path": "converged",
            "status": "complete",
            "residual_objections": [objection],
            "minority_report": [minority],
            "reopen_conditions": ["c"],
            "next_actions": ["a"],
        }
        probe = DecisionPacket.model_construct(**sections)
        for line in _render(probe, _held).splitlines():
            if not line.startswith(" "):
                word = re.match(r"[^\W_]+|-", line)
                assert word is not None, line
                heads.add(re.escape(word.group()) + (r"(?![^\W_])" if word.group() != "-" else ""))
    return re.compile(r"\s*(?:" + "|".join(sorted(heads)) + ")", re.IGNORECASE)


def previous_layout_forges(packet: DecisionPacket) -> bool:
    """Whether the previous layout of ``packet`` is ambiguous: some line that text
    participants or the task wrote puts at the margin there begins as one of the
    packet's own lines does (``Decision: ...``, ``Path: ...``, a ``- `` item), so a
    reader could take it for the packet's."""
    margin: list[str] = []

    def collect(text: str) -> str:
        margin.extend(text.splitlines()[1:])
        return text

    _render(packet, collect)
    heads = _margin_heads()
    return any(heads.match(line) for line in margin)
