"""Per-agent signals read from a panel and its perturbed re-ask (pure, no I/O).

The pipeline's ``seek_context`` step asks the agents again under a perturbation
(swapped option order, added context) or reads a recorded re-ask. Two signals per
agent come out of the pair of answers, both available without any gold label:

* **Order stability**: the agent gave the same decision both times. An agent whose
  answer changes with the presentation order was not judging the content (LLMBar's
  ``Swap_CoT`` finding). An abstention in either answer is *not* stable.
* **Margin score**: ``concession markers - grounding markers`` counted (whole words,
  case-insensitive) over the agent's reasoning traces. Concession markers
  ("however", "both", "also", "more detailed", ...) are how a judge writes when it
  finds both options acceptable and decides on a marginal or superficial difference;
  grounding markers (the policy names them, e.g. the criterion the agents were told to
  apply, such as "instruction") are how it writes when it checks the stated criterion.
  A low score means a decisive, criterion-grounded answer.

Choices where the seeds are silent: markers are counted over both traces (the
original and the re-asked one) because a decisive judge is decisive in both orders;
an agent without a re-ask is never stable; the lexicons are policy settings
(:class:`MarkerLexicon`) so that a calibration file records the lexicon it was built
with and is refused under another one.
"""

from __future__ import annotations

import re
from functools import lru_cache

from pydantic import BaseModel, ConfigDict, Field

from dissensus.types import Panel

__all__ = [
    "DEFAULT_CONCESSION_MARKERS",
    "AgentSignal",
    "MarkerLexicon",
    "SecondAnswer",
    "agent_signals",
    "count_markers",
    "recorded_second_answers",
]

DEFAULT_CONCESSION_MARKERS: tuple[str, ...] = (
    "however",
    "both",
    "also",
    "more detailed",
    "more comprehensive",
)
"""Default concession markers (see the module docstring)."""


class MarkerLexicon(BaseModel):
    """The words counted into an agent's margin score."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    concession: tuple[str, ...] = DEFAULT_CONCESSION_MARKERS
    """Words or phrases that signal a marginal decision (each occurrence adds 1)."""
    grounding: tuple[str, ...] = ()
    """Words or phrases that signal a check against the stated criterion (each subtracts 1)."""


class SecondAnswer(BaseModel):
    """An agent's answer to the perturbed re-ask."""

    model_config = ConfigDict(frozen=True)

    decision: str | None
    reasoning: str | None = None


class AgentSignal(BaseModel):
    """What the pipeline knows about one agent's answer after the follow-up."""

    model_config = ConfigDict(frozen=True)

    agent: str
    family: str | None
    decision: str | None
    """First answer."""
    second: str | None
    """Answer under the perturbation (``None``: abstained or not re-asked)."""
    stable: bool
    """Same non-null decision both times."""
    concession: int
    grounding: int
    score: int = Field(description="concession - grounding")


@lru_cache(maxsize=64)
def _pattern(words: tuple[str, ...]) -> re.Pattern[str] | None:
    if not words:
        return None
    alternatives = sorted((re.escape(w.lower()) for w in words if w.strip()), key=len, reverse=True)
    if not alternatives:
        return None
    return re.compile(r"\b(?:" + "|".join(alternatives) + r")\b")


def count_markers(text: str, words: tuple[str, ...]) -> int:
    """Whole-word, case-insensitive occurrences of any of ``words`` in ``text``."""
    pattern = _pattern(words)
    return 0 if pattern is None else len(pattern.findall(text.lower()))


def recorded_second_answers(panel: Panel) -> dict[str, SecondAnswer]:
    """Re-asked answers recorded in the panel (``swap_decision`` / ``swap_reasoning``).

    LLMBar ``Swap_CoT`` panels carry them as extra output fields; an agent without
    them is absent from the result.
    """
    found: dict[str, SecondAnswer] = {}
    for out in panel.outputs:
        extra = out.model_extra or {}
        if "swap_decision" not in extra:
            continue
        decision = extra.get("swap_decision")
        reasoning = extra.get("swap_reasoning")
        found[out.agent] = SecondAnswer(
            decision=None if decision is None else str(decision),
            reasoning=reasoning if isinstance(reasoning, str) else None,
        )
    return found


def agent_signals(panel: Panel, second: dict[str, SecondAnswer], lexicon: MarkerLexicon) -> list[AgentSignal]:
    """One :class:`AgentSignal` per agent of ``panel`` (panel order)."""
    signals: list[AgentSignal] = []
    for out in panel.outputs:
        again = second.get(out.agent)
        text = out.reasoning + "\n" + ((again.reasoning or "") if again else "")
        concession = count_markers(text, lexicon.concession)
        grounding = count_markers(text, lexicon.grounding)
        second_decision = again.decision if again else None
        signals.append(
            AgentSignal(
                agent=out.agent,
                family=out.family,
                decision=out.decision,
                second=second_decision,
                stable=out.decision is not None and second_decision == out.decision,
                concession=concession,
                grounding=grounding,
                score=concession - grounding,
            )
        )
    return signals
