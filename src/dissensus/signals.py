"""Per-agent signals read from a panel and its perturbed re-ask (pure, no I/O).

The pipeline's follow-up and the acceptance features both read them, so the module sits
below both (``docs/architecture.md``); ``dissensus.pipeline.signals`` is its former path.

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

Choices this module makes: markers are counted over both traces (the
original and the re-asked one) because a decisive judge is decisive in both orders;
an agent without a re-ask is never stable; the lexicons are policy settings
(:class:`MarkerLexicon`) so that a calibration file records the lexicon it was built
with and is refused under another one. The default lexicon is empty: marker words are
idioms of a kind of judge (``examples/llmbar-policy.yaml`` sets LLMBar's), not of every
panel.

Who answered: a recorded re-ask (``reask`` on a panel output, or LLMBar's legacy
``swap_decision`` / ``swap_reasoning`` fields, read as an alias) is the agent's own. A
live re-ask names the model that answered (:attr:`SecondAnswer.model`) and its family
(:func:`model_family`), and a signal's family is the family of the model that answered
the re-ask, not the panel's label. A model shared by several agents is one
:class:`Voice` of its own, never any agent's stability.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache

from pydantic import BaseModel, ConfigDict, Field

from dissensus.families import model_family
from dissensus.types import Panel

__all__ = [
    "DEFAULT_CONCESSION_MARKERS",
    "AgentSignal",
    "MarkerLexicon",
    "SecondAnswer",
    "Voice",
    "agent_signals",
    "count_markers",
    "model_family",
    "recorded_second_answers",
]

DEFAULT_CONCESSION_MARKERS: tuple[str, ...] = ()
"""Default concession markers: none (a policy names the idioms of its judges)."""


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
    model: str | None = None
    """The model that answered a live re-ask; ``None``: recorded in the panel by the agent."""
    family: str | None = None
    """Family of :attr:`model` (:func:`model_family`)."""
    fault: str | None = None
    """Why the answer counts as an abstention (an answer that did not parse or named no option)."""


class Voice(BaseModel):
    """A model asked in place of no particular agent: one extra voice, in both presentations.

    A model that several agents share (the run's ``seek_context.model``) is asked once in
    the original presentation and once under the perturbation; its stability is its own,
    attributed to the model and its family, never to an agent of the panel.
    """

    model_config = ConfigDict(frozen=True)

    voice: str
    """``model:<model id>``."""
    model: str
    family: str
    first: SecondAnswer
    """Answer in the original presentation."""
    second: SecondAnswer
    """Answer under the perturbation."""


class AgentSignal(BaseModel):
    """What the pipeline knows about one agent's answer after the follow-up."""

    model_config = ConfigDict(frozen=True)

    agent: str
    """The agent, or a :class:`Voice`'s ``model:<id>``."""
    family: str | None
    """Family of the model that answered the re-ask (the panel's label for a recorded one)."""
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
    """Re-asked answers recorded in the panel: each output's ``reask``, or LLMBar's
    ``swap_decision`` / ``swap_reasoning`` extra fields (a documented alias).

    An agent without either is absent from the result.
    """
    found: dict[str, SecondAnswer] = {}
    for out in panel.outputs:
        if out.reask is not None:
            found[out.agent] = SecondAnswer(
                decision=out.reask.decision, reasoning=out.reask.reasoning
            )
            continue
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


def _signal(
    agent: str,
    family: str | None,
    first: str | None,
    first_text: str,
    again: SecondAnswer | None,
    lexicon: MarkerLexicon,
) -> AgentSignal:
    text = first_text + "\n" + ((again.reasoning or "") if again else "")
    concession = count_markers(text, lexicon.concession)
    grounding = count_markers(text, lexicon.grounding)
    second_decision = again.decision if again else None
    return AgentSignal(
        agent=agent,
        family=family,
        decision=first,
        second=second_decision,
        stable=first is not None and second_decision == first,
        concession=concession,
        grounding=grounding,
        score=concession - grounding,
    )


def agent_signals(
    panel: Panel,
    second: dict[str, SecondAnswer],
    lexicon: MarkerLexicon,
    voices: Sequence[Voice] = (),
) -> list[AgentSignal]:
    """One :class:`AgentSignal` per agent of ``panel`` (panel order), then one per voice."""
    signals: list[AgentSignal] = []
    for out in panel.outputs:
        again = second.get(out.agent)
        family = again.family if again is not None and again.model is not None else out.family
        signals.append(_signal(out.agent, family, out.decision, out.reasoning, again, lexicon))
    for voice in voices:
        signals.append(
            _signal(
                voice.voice,
                voice.family,
                voice.first.decision,
                voice.first.reasoning or "",
                voice.second,
                lexicon,
            )
        )
    return signals
