"""What the review page shows of a case, computed from the journalled item (pure, no I/O).

The review page renders these plain values; nothing here is markup, and the templates
escape every string (agent text is never interpreted).

Choices where the design is silent:

* **Option labels.** An option is shown the way the agents refer to it: a panel's
  ``meta.option_labels`` (``{id: label}``) when given; otherwise, when the options are
  the numbers ``1``..``n`` and the agents' reasoning speaks of "Output (a)" (LLMBar's
  pairwise prompt), option ``1`` is "Output (a)", ``2`` "Output (b)" and so on; otherwise
  the option id itself. The id stays visible beside the label, since it is what gets
  journalled.
* **Word diff.** When at least two options have texts, the first two are compared word
  by word (:class:`difflib.SequenceMatcher` over whitespace-split words, no junk
  heuristic) into segments marked ``same``, ``a`` (only in the first) or ``b`` (only in
  the second).
* **Plain reasons.** The escalation reason is a technical trail; the page leads with
  sentences derived from the positions and from known phrases of that trail (guard,
  re-ask, deliberation, negotiation, routing, reliability). The trail itself stays one
  click away, verbatim.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = [
    "DiffSegment",
    "OptionView",
    "option_views",
    "plain_reasons",
    "word_diff",
]

_LETTERED = re.compile(r"\boutput\s*\(([a-z])\)", re.IGNORECASE)


@dataclass(frozen=True)
class OptionView:
    """One option as the page shows it."""

    id: str
    """The option id (what a resolution journals)."""
    label: str
    """How the agents refer to it (e.g. ``Output (a)``); the id when nothing better is known."""
    key: str
    """The key that picks it (``1``-``9``; empty past nine)."""
    text: str
    """The option's text (empty when the panel has none)."""
    chosen_by: list[str] = field(default_factory=list)
    """Agents whose decision it was."""
    suggested: bool = False
    """Whether it is the panel's suggestion."""


@dataclass(frozen=True)
class DiffSegment:
    """A run of words of the word diff."""

    side: Literal["same", "a", "b"]
    text: str


def _texts(meta: dict[str, Any]) -> dict[str, str]:
    raw = meta.get("options")
    texts: dict[str, str] = {}
    if isinstance(raw, list):
        for o in raw:
            if isinstance(o, dict):
                texts[str(o.get("id"))] = str(o.get("text", ""))
            else:
                texts[str(o)] = str(o)
    elif isinstance(raw, dict):
        texts = {str(k): str(v) for k, v in raw.items()}
    elif "output_1" in meta and "output_2" in meta:
        texts = {"1": str(meta["output_1"]), "2": str(meta["output_2"])}
    return texts


def _labels(ids: Sequence[str], meta: dict[str, Any], reasoning: Sequence[str]) -> dict[str, str]:
    given = meta.get("option_labels")
    if isinstance(given, dict):
        return {i: str(given.get(i, i)) for i in ids}
    numbered = bool(ids) and len(ids) <= 26 and all(i.isdigit() for i in ids)
    if numbered and any(_LETTERED.search(r) for r in reasoning):
        return {
            i: f"Output ({chr(ord('a') + int(i) - 1)})" if 1 <= int(i) <= 26 else i for i in ids
        }
    return {i: i for i in ids}


def option_views(
    options: Sequence[str],
    panel: dict[str, Any],
    positions: Sequence[tuple[str, str | None, str]],
    suggestion: str | None,
) -> list[OptionView]:
    """The options on the table, labelled, with texts and who chose each.

    ``positions`` are ``(agent, decision, reasoning)``.
    """
    meta = panel.get("meta") or {}
    if not isinstance(meta, dict):
        meta = {}
    texts = _texts(meta)
    ids = list(options) or list(texts)
    labels = _labels(ids, meta, [r for _, _, r in positions])
    return [
        OptionView(
            id=oid,
            label=labels.get(oid, oid),
            key=str(i + 1) if i < 9 else "",
            text=texts.get(oid, ""),
            chosen_by=[agent for agent, decision, _ in positions if decision == oid],
            suggested=oid == suggestion,
        )
        for i, oid in enumerate(ids)
    ]


def word_diff(a: str, b: str) -> list[DiffSegment]:
    """``a`` and ``b`` compared word by word (see the module docstring)."""
    wa, wb = a.split(), b.split()
    out: list[DiffSegment] = []
    matcher = difflib.SequenceMatcher(None, wa, wb, autojunk=False)
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op == "equal":
            out.append(DiffSegment("same", " ".join(wa[i1:i2])))
            continue
        if i2 > i1:
            out.append(DiffSegment("a", " ".join(wa[i1:i2])))
        if j2 > j1:
            out.append(DiffSegment("b", " ".join(wb[j1:j2])))
    return out


_PHRASES: list[tuple[str, str]] = [
    (
        "guard refused consensus",
        "Agreement among them is not independent evidence: the agents may share a model "
        "family or a source, so agreeing proves little.",
    ),
    (
        "differs from the panel's plurality",
        "The evidence points to a different answer than most agents gave.",
    ),
    ("re-ask", "Asking the agents again (with the options swapped) did not settle it."),
    ("deliberation", "A structured deliberation among the agents did not settle it."),
    ("CONCORD", "A negotiation among the agents did not certify an answer."),
    ("route ", "The routing policy sends cases like this one to a person."),
    ("contradict", "Agents the calibration trusts contradict each other."),
    ("independent famil", "Too few independent model families back the answer."),
    ("trust region", "No calibrated agent answered inside the range where it is reliable."),
]


def plain_reasons(reason: str, options: Sequence[OptionView], abstained: int) -> list[str]:
    """Why the case was escalated, in plain sentences (the technical trail stays apart)."""
    chosen = [(o.label, len(o.chosen_by)) for o in options if o.chosen_by]
    chosen.sort(key=lambda x: -x[1])
    out: list[str] = []
    if len(chosen) > 1:
        parts = [f"{n} chose {label}" for label, n in chosen]
        out.append("The agents split: " + ", ".join(parts) + ".")
    elif len(chosen) == 1:
        label, n = chosen[0]
        out.append(
            f"All {n} agents who answered chose {label}, but that was not enough to decide alone."
            if n > 1
            else f"Only one agent answered ({label})."
        )
    if abstained:
        out.append(f"{abstained} agent(s) gave no answer.")
    lowered = reason.lower()
    for phrase, sentence in _PHRASES:
        if phrase.lower() in lowered and sentence not in out:
            out.append(sentence)
    return out
