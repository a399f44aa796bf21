"""What the review page shows of a case, computed from the journalled item (pure, no I/O).

The review page renders these plain values; nothing here is markup, and the templates
escape every string (agent text is never interpreted).

Choices where the design is silent:

* **Option labels and texts** are the case's (:class:`~dissensus.cases.CaseSpec`, the
  one parser of ``meta``): the way the agents refer to an option (a panel's
  ``meta.option_labels``; "Output (a)", "Output (b)", ... for pairwise judging or when the
  agents' reasoning speaks of "Output (a)"; otherwise the option id itself). The id stays
  visible beside the label, since it is what gets journalled.
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
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from dissensus.cases import CaseSpec

__all__ = [
    "DiffSegment",
    "OptionView",
    "option_views",
    "plain_reasons",
    "word_diff",
]


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


def option_views(
    options: Sequence[str],
    panel: dict[str, Any],  # the journalled panel JSON, read as it is
    positions: Sequence[tuple[str, str | None, str]],
    suggestion: str | None,
) -> list[OptionView]:
    """The options on the table, labelled, with texts and who chose each.

    ``positions`` are ``(agent, decision, reasoning)``; ``panel`` is the journalled
    panel's JSON (:attr:`~dissensus.pipeline.records.ReviewItem.panel`), only read.
    """
    meta = panel.get("meta")
    meta = meta if isinstance(meta, dict) else {}
    reasoning = [r for _, _, r in positions]
    case = CaseSpec.from_meta(meta, reasoning)
    ids = list(options) or case.option_ids()
    texts = {o.id: o.text for o in case.options}
    if not case.options:  # labels of the options on the table, when the panel lists none
        case = CaseSpec.from_meta({**meta, "options": [{"id": i} for i in ids]}, reasoning)
    known = {o.id: o for o in case.options}
    return [
        OptionView(
            id=oid,
            label=known[oid].label if oid in known else oid,
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
