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
* ``regex`` — a group of ``panel.pattern`` (or the whole match, for a pattern without
  groups), normalised like an unconstrained structured decision: the group named
  ``decision`` (``(?P<decision>...)``) when the pattern has one; else group 1 when it
  took part in the match; else the first group of another top-level alternative of the
  pattern when that one matched (``Answer: ([A-D])|ANSWER=([A-D])``: an answer matching
  the second votes its group, not an "empty decision"); else the member abstains.

Choices this module makes: an answer without a usable decision (no JSON object,
a decision outside the options, no number, no match) is an **abstention** — the member
spoke, its text is its reasoning, and it gives no vote; it is never an error. So is a
decision holding a control character once its white space is collapsed (a NUL, a BEL:
a panel's decisions hold none, :class:`~dissensus.types.AgentOutput`). A
structured answer without a ``reasoning`` string keeps its raw text as the reasoning.
A regex's other groups never vote: in ``Answer: ?([A-D])? ?([0-9]+)%`` a member writing
"Answer: 80%" left group 1 out, and its confidence figure is not a decision; a later
group stands in for group 1 only when the two are in different top-level alternatives
(found with Python's own regex parser, ``re._parser``), so one alternative's decision
group is never read from another part of the same alternative.
A decision given as a JSON number or boolean is read exactly as the CLI and the library
read a panel's decision (:func:`dissensus.types.normalise_label`), a whole number written
with a fraction as the whole number (``1.0`` is ``"1"``, as ``1`` is; ``1e16`` is
``"10000000000000000"`` at any size), ``true`` as ``"true"``: otherwise a member writing
``1.0`` abstained with "not one of the options" beside the option ``"1"``, without
options ``7`` and ``7.0`` were two decisions, and one answer gave another decision at the
chat door than through ``dissensus decide``.
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

import functools
import importlib
import re
from typing import Any

from pydantic import BaseModel, ConfigDict

from dissensus.convert.zeroeval import extract_answer
from dissensus.families import decision_form
from dissensus.llm.jsonparse import DuplicateKeyError, JSONExtractError, extract_json
from dissensus.pipeline.policy import PanelSettings
from dissensus.types import JsonSchema
from dissensus.types import normalise_label as panel_label

_sre: Any = importlib.import_module("re._parser")
"""Python's own regex parser (its opcodes with it): which top-level alternative a group is in."""

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
    # A number or a boolean as every other door reads one (the CLI's and the library's
    # panel reader): JSON's 1.0 is the number 1, the option "1", one vote with 1.
    value = panel_label(value)
    if not isinstance(value, str):
        return None
    text = normalise_label(value)
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


@functools.lru_cache(maxsize=256)
def _top_level_alternatives(pattern: str, flags: int = 0) -> dict[int, tuple[int, int]]:
    """Each group of ``pattern`` (compiled with ``flags``) inside a top-level alternative,
    mapped to which one: ``(i, j)``, branch ``j`` of the ``i``-th top-level alternation
    (a common prefix the parser factors out, ``Answer: (x)|Answer: (y)``, or a group
    around the whole that captures nothing keeps them top-level: ``(?:...)``, with
    scoped flags ``(?i:...)``, atomic ``(?>...)``, or repeated ``(?:...)+``). An
    alternation is read only when it holds every group of its sequence: one beside a
    group of its own (``(?:(Note): |(Hint): )?Answer: ([A-D])``) is a prefix, and its
    groups never vote. A group outside every top-level alternation is not in the map. Parsed once per pattern (a
    member answer is read on every request)."""
    where: dict[int, tuple[int, int]] = {}

    def groups_in(items: Any) -> list[int]:
        found: list[int] = []
        for op, arg in items:
            if op is _sre.SUBPATTERN:
                if arg[0] is not None:
                    found.append(arg[0])
                found += groups_in(arg[3])
            elif op is _sre.BRANCH:
                for branch in arg[1]:
                    found += groups_in(branch)
            elif op in (_sre.MAX_REPEAT, _sre.MIN_REPEAT, _sre.POSSESSIVE_REPEAT):
                found += groups_in(arg[2])
            elif op in (_sre.ASSERT, _sre.ASSERT_NOT):
                found += groups_in(arg[1])
            elif op is _sre.ATOMIC_GROUP:
                found += groups_in(arg)
            elif op is _sre.GROUPREF_EXISTS:
                found += groups_in(arg[1])
                if arg[2] is not None:
                    found += groups_in(arg[2])
        return found

    alternations = 0

    def walk(items: Any) -> None:
        nonlocal alternations
        every = set(groups_in(items))
        for op, arg in items:
            if set(groups_in([(op, arg)])) != every:
                continue  # groups outside it too: a prefix, not the answer's alternatives
            if op is _sre.BRANCH:
                alternations += 1
                for j, branch in enumerate(arg[1]):
                    for group in groups_in(branch):
                        where[group] = (alternations, j)
            elif op is _sre.SUBPATTERN and arg[0] is None:  # (?:...), (?i:...)
                walk(arg[3])
            elif op is _sre.ATOMIC_GROUP:  # (?>...)
                walk(arg)
            elif op in (_sre.MAX_REPEAT, _sre.MIN_REPEAT, _sre.POSSESSIVE_REPEAT):
                walk(arg[2])  # (?:...){1}, (?:...)+

    walk(_sre.parse(pattern, flags))
    return where


def _regex_value(found: re.Match[str]) -> str | None:
    """The decision text of a regex match: the group named ``decision`` when the
    pattern has one; else group 1 when it took part; else the first group of another
    top-level alternative that took part (``Answer: ([A-D])|ANSWER=([A-D])``); else
    ``None``. A pattern without groups gives the whole match."""
    if "decision" in found.re.groupindex:
        return found.group("decision")
    if not found.re.groups:
        return found.group(0)
    if found.group(1) is not None:
        return found.group(1)
    where = _top_level_alternatives(found.re.pattern, found.re.flags)
    home = where.get(1)
    seen: set[tuple[int, int]] = set() if home is None else {home}
    for group in range(2, found.re.groups + 1):
        alternative = where.get(group)
        if alternative is None or alternative in seen:
            continue  # not the first group of another top-level alternative
        seen.add(alternative)
        if found.group(group) is not None:
            return found.group(group)
    return None


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
    value = _regex_value(found)
    decision = _label(value, None) if value is not None else None
    why = None if decision is not None else "the pattern matched an empty decision"
    if decision is None and value and normalise_label(value):
        why = "the pattern matched a decision with a control character"
    return MemberAnswer(decision=decision, reasoning=trace, why=why)
