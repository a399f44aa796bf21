"""A member's answer -> a decision and a reasoning trace (``panel.answer`` of the policy).

Three ways, chosen by the policy:

* ``structured`` — the member is asked for a JSON object ``{"decision": ..., "reasoning":
  ...}`` (:func:`verdict_schema`; the decision is an enum when ``panel.options`` is set).
  The decision is matched to the options in the form a reader tells decisions apart
  by (:func:`~dissensus.families.decision_form`), or, without options, put in that
  form: fullwidth letters and digits as ASCII, invisible format and filler characters
  dropped (``yes\u200b`` is ``yes``), white space collapsed, case folded. Without it,
  members writing one answer with an invisible character or in fullwidth letters split
  the vote into as many decisions as spellings, a disagreement nobody had. What a
  reader does tell apart stays apart: ``2⁵`` is not ``25``, and letters of another
  script that look alike (Cyrillic ``е`` in ``yеs``) are other letters.
* ``number`` — a free-form answer's final number, exactly as ``dissensus convert
  zeroeval`` extracts it (:func:`dissensus.convert.zeroeval.extract_answer`), so a panel
  built from live answers equals the panel the converter builds from the same texts.
* ``regex`` — the first group of ``panel.pattern`` that took part in the match (or the
  whole match, for a pattern without groups), normalised like an unconstrained
  structured decision: with alternatives, ``Answer: ([A-D])|ANSWER=([A-D])``, an answer
  matching the second one votes its group, not an "empty decision".

Choices this module makes: an answer without a usable decision (no JSON object,
a decision outside the options, no number, no match) is an **abstention** — the member
spoke, its text is its reasoning, and it gives no vote; it is never an error. So is a
decision holding a control character once its white space is collapsed (a NUL, a BEL:
a panel's decisions hold none, :class:`~dissensus.types.AgentOutput`). A
structured answer without a ``reasoning`` string keeps its raw text as the reasoning.
A decision given as a JSON number is read as the number's text, a whole number written
with a fraction as the whole number (``1.0`` is ``"1"``, as ``1`` is): otherwise a member
writing ``1.0`` abstained with "not one of the options" beside the option ``"1"``, and
without options ``7`` and ``7.0`` were two decisions.
A structured answer whose JSON holds a key twice in one object (``{"decision": "A",
"decision": "B"}``, or a repeated key anywhere in it) is an abstention too, its reason
naming the key (``the answer's JSON holds a key twice in one object: 'decision'``): no
value of it is taken, neither the last nor the first. A ``number`` answer is read
exactly as the converter reads a recorded output, a repeated key included
(:func:`dissensus.convert.zeroeval.extract_answer`).
An empty (or blank) answer is an abstention with **empty reasoning**: no text is
invented for it (a placeholder would read as identical reasoning for every silent
member, similarity 1.0), and the reading names the member in ``missing_reasoning``.
Pure functions, no I/O.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict

from dissensus.convert.zeroeval import extract_answer
from dissensus.families import decision_form
from dissensus.llm.jsonparse import DuplicateKeyError, JSONExtractError, extract_json
from dissensus.pipeline.policy import PanelSettings
from dissensus.types import JsonSchema

__all__ = ["MemberAnswer", "normalise_label", "read_answer", "verdict_schema"]


class MemberAnswer(BaseModel):
    """What one member's text means for the panel."""

    model_config = ConfigDict(frozen=True)

    decision: str | None
    """The member's decision; ``None``: an abstention."""
    reasoning: str
    """The member's reasoning trace (its ``reasoning`` field, else its whole text)."""
    why: str | None = None
    """Why the answer is an abstention (``None`` when it holds a decision)."""


_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")
"""A control character, which no decision holds."""


def normalise_label(text: str) -> str:
    """A free-text decision in canonical form (:func:`~dissensus.families.decision_form`)."""
    return decision_form(text)


def verdict_schema(settings: PanelSettings) -> JsonSchema:
    """JSON schema of the structured answer (strict-mode compatible)."""
    decision: JsonSchema = {"type": "string"}
    if settings.options:
        decision["enum"] = list(settings.options)
    return {
        "type": "object",
        "properties": {
            "decision": decision,
            "reasoning": {"type": "string"},
        },
        "required": ["decision", "reasoning"],
        "additionalProperties": False,
    }


def _label(value: Any, options: list[str] | None) -> str | None:
    if not isinstance(value, str | int | float) or isinstance(value, bool):
        return None
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        value = int(value)  # JSON's 1.0 is the number 1: the option "1", one vote with 1
    text = normalise_label(str(value))
    if not text or _CONTROL.search(text) is not None:
        return None
    if options is None:
        return text
    for option in options:
        if normalise_label(option) == text:
            return option
    return None


def _structured(text: str, settings: PanelSettings) -> MemberAnswer:
    trace = text.strip()
    try:
        data = extract_json(text, want_object=True)
    except DuplicateKeyError as exc:
        return MemberAnswer(decision=None, reasoning=trace, why=str(exc))
    except JSONExtractError:
        return MemberAnswer(decision=None, reasoning=trace, why="no JSON object in the answer")
    if not isinstance(data, dict):
        return MemberAnswer(decision=None, reasoning=trace, why="the answer is not a JSON object")
    reasoning = data.get("reasoning")
    if isinstance(reasoning, str) and reasoning.strip():
        trace = reasoning
    decision = _label(data.get("decision"), settings.options)
    if decision is None:
        shown = "missing" if "decision" not in data else "not one of the options"
        if settings.options is None and "decision" in data:
            shown = "not a non-empty string without control characters"
        return MemberAnswer(decision=None, reasoning=trace, why=f"decision {shown}")
    return MemberAnswer(decision=decision, reasoning=trace)


def read_answer(text: str, settings: PanelSettings) -> MemberAnswer:
    """The decision and reasoning of one member's answer ``text`` under ``settings``.

    >>> from dissensus.pipeline.policy import PanelSettings
    >>> read_answer('{"reasoning": "3 + 4 = 7", "answer": "$7"}', PanelSettings(answer="number")).decision
    '7'
    >>> read_answer('{"decision": " YES ", "reasoning": "r"}', PanelSettings(options=["yes", "no"])).decision
    'yes'
    """
    if settings.answer == "structured":
        return _structured(text, settings)
    if settings.answer == "number":
        number, reasoning = extract_answer(text)
        why = None if number is not None else "no number in the answer"
        return MemberAnswer(decision=number, reasoning=reasoning, why=why)
    assert settings.pattern is not None
    trace = text.strip()
    found = re.search(settings.pattern, text)
    if found is None:
        return MemberAnswer(decision=None, reasoning=trace, why="the pattern does not match")
    # The first group that took part in the match: with alternatives
    # (``Answer: (\w+)|ANSWER=(\w+)``) the second one's match is the decision too.
    taken = [g for g in found.groups() if g is not None]
    value = taken[0] if taken else (found.group(0) if not found.groups() else None)
    decision = _label(value, None) if value is not None else None
    why = None if decision is not None else "the pattern matched an empty decision"
    if decision is None and value and normalise_label(value):
        why = "the pattern matched a decision with a control character"
    return MemberAnswer(decision=decision, reasoning=trace, why=why)
