"""The four DCI reasoning archetypes as data (``docs/dci.md``).

An archetype constrains a participant's *tendency*, not its capability: it names the
acts the participant reaches for first and a one-paragraph stance shown in its prompt.
Every participant may still speak any act its stage admits.

Choices this module makes:

* Stage duties: the first Framer frames the problem (stage 1) and the first Integrator
  writes the synthesis (stage 8). Without archetypes (the "no archetypes" ablation) the
  first and the last participant take these duties.
* The default panel is one participant per archetype, ids ``framer``, ``explorer``,
  ``challenger``, ``integrator``.

>>> ARCHETYPES["Challenger"].preferred_acts
('challenge', 'ask', 'ground')
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from dissensus.dci.acts import ACTS
from dissensus.errors import ConfigError

__all__ = ["ARCHETYPES", "NEUTRAL", "Archetype", "archetype"]


class Archetype(BaseModel):
    """One reasoning archetype."""

    model_config = ConfigDict(frozen=True)

    name: str
    """Archetype name (``Framer``, ``Explorer``, ``Challenger``, ``Integrator``)."""
    stance: str
    """The tendency, in one short paragraph, shown to the participant."""
    preferred_acts: tuple[str, ...]
    """Acts the participant reaches for first, most preferred first."""


ARCHETYPES: dict[str, Archetype] = {
    a.name: a
    for a in (
        Archetype(
            name="Framer",
            stance="You define the problem well: scope, stakes, constraints, what a good decision must satisfy.",
            preferred_acts=("frame", "reframe", "clarify"),
        ),
        Archetype(
            name="Explorer",
            stance="You widen the option space: new paths, variants, and builds on others' ideas.",
            preferred_acts=("propose", "spawn", "extend"),
        ),
        Archetype(
            name="Challenger",
            stance="You test assumptions, weaknesses and consequences; you keep dissent visible.",
            preferred_acts=("challenge", "ask", "ground"),
        ),
        Archetype(
            name="Integrator",
            stance="You connect positions, settle tensions where evidence allows, and drive to a judgement.",
            preferred_acts=("bridge", "synthesize", "recommend"),
        ),
    )
}

NEUTRAL = Archetype(
    name="Participant",
    stance="You deliberate with the others toward a good decision.",
    preferred_acts=(),
)
"""The role every participant takes in the "no archetypes" ablation."""

for _a in ARCHETYPES.values():
    for _act in _a.preferred_acts:
        if _act not in ACTS:  # pragma: no cover - guards the table above
            raise RuntimeError(f"archetype {_a.name} prefers unknown act {_act}")


def archetype(name: str, *, field: str = "archetype") -> Archetype:
    """The archetype called ``name`` (case-insensitive); :class:`ConfigError` naming ``field`` if unknown."""
    for key, value in ARCHETYPES.items():
        if key.lower() == name.strip().lower():
            return value
    raise ConfigError(
        f"unknown archetype {name!r}; known archetypes: {', '.join(ARCHETYPES)}", field=field
    )
