"""The run controls of CONCORD, checked once for the problem file and the Python API.

Floor and margin lie in [0, 1] (finite), the round budget is an integer in
[0, :data:`MAX_ROUNDS`], agent ids are unique and there are 1 to :data:`MAX_AGENTS`
agents (the most one panel may hold, :mod:`dissensus.io.limits`), and every edge of a workflow
graph names two known agents. :class:`~dissensus.concord.protocol.Negotiation` and
:func:`~dissensus.concord.problem.parse_problem` both call :func:`check_controls`, so a
bad value gets the same message whichever door it came through; the field names the
place (``topology.edges.I`` in a problem file, ``edges.I`` in the API).

Choices this module makes: agent ids are told apart as a reader tells them apart
(:func:`same_name`): an id that is blank or shows as nothing (``" "``, ``"\u200b"``) is
refused, and so is one that reads as another (``x`` and ``x\u200b``, fullwidth ``ｘ``,
an ``é`` written as ``e`` and a combining accent): the record, its shortfall and
``negotiate``'s tables name agents by their ids. Letters of two scripts that look alike
(Latin ``x``, Cyrillic ``х``) are not folded: NFKC keeps them apart. The Python API's arguments are checked for their
kind before any agent is called (:func:`check_arguments`), as a problem file's are by
its schema. A number is any real number (``int``, ``float``, a NumPy scalar, a
``Fraction``: :class:`numbers.Real`), never a ``bool`` or a string, and the round budget
any integer (:class:`numbers.Integral`, a NumPy integer too); :class:`Negotiation` keeps
them as ``float`` and ``int``, so the record is plain JSON. An integer too large for a
float is out of range, not an ``OverflowError``; the agents are a sequence (not a string) of
:class:`~dissensus.concord.agent.NegotiationAgent` with string ids; the anchors and the
options are :class:`~dissensus.concord.agent.Outcome` instances (a dict or an id string
is refused, not read), and the two anchors differ (equal anchors, or two anchors with
one id, give no scale). Each option has an id of its own, as in a problem file: not
blank (table agents score by id; an option without one was passed over by every agent),
none reading as an anchor's or an earlier option's (the second of two was never
proposed; one under an anchor's id was renamed and tabled again). Without these checks a wrong kind surfaced only as every agent
faulting on the view it could not be shown (each fault a paid call for an LLM agent)
or as an internal error after the run.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Sequence

from dissensus.concord.agent import NegotiationAgent, Outcome
from dissensus.concord.rules import RULES
from dissensus.errors import ConfigError
from dissensus.families import comparable_name
from dissensus.io.limits import MAX_AGENTS

__all__ = [
    "MAX_AGENTS",
    "MAX_ROUNDS",
    "as_real",
    "check_arguments",
    "check_controls",
    "same_name",
]

MAX_ROUNDS = 1000
"""Largest round budget (repair rounds) of one negotiation."""


def _check_agent_names(agents: Sequence[str], fail: Callable[[str, str], ConfigError]) -> None:
    """Every agent id shows as something, and no two read alike (:func:`same_name`)."""
    seen: dict[str, int] = {}
    for i, agent in enumerate(agents):
        if not isinstance(agent, str):
            continue  # check_arguments names an id of the wrong kind
        name = same_name(agent)
        if not name:
            raise fail(
                f"agent id {agent!r} is blank or shows as nothing; "
                "the record and its shortfall name agents by their ids",
                f"agents.{i}.id",
            )
        if name in seen:
            j = seen[name]
            # spelt in escapes: two ids that read alike would print alike (é, e + U+0301)
            raise fail(
                f"agent id {agent!a} reads as {agents[j]!a}, the id of agents.{j}; "
                "give agents ids a reader tells apart",
                f"agents.{i}.id",
            )
        seen[name] = i


def same_name(text: str) -> str:
    """``text`` as a reader tells ids apart (:func:`dissensus.families.comparable_name`:
    Unicode NFKC, without the characters that show as nothing), with its outer white
    space stripped: two ids with the same form read alike."""
    return comparable_name(text).strip()


def plan_text(text: str) -> str:
    """``text`` as the protocol tells plans apart: its outer white space stripped (a
    model's trailing newline or space writes no other plan). The one comparison of a
    proposal with a tabled candidate, of a proposal with an anchor, and of a problem
    file's options with each other and with the anchors."""
    return text.strip()


def check_controls(
    *,
    floor: float,
    margin: float,
    rounds: int,
    agents: Sequence[str],
    edges: Sequence[Sequence[str]] | None,
    file: str | None = None,
    edges_field: str = "edges",
    deadline_s: float | None = None,
) -> None:
    """Raise :class:`ConfigError` naming the field of the first invalid control."""

    def fail(message: str, field: str) -> ConfigError:
        return ConfigError(message, file=file, field=field)

    for name, value in (("floor", floor), ("margin", margin), ("deadline_s", deadline_s)):
        if value is not None and not _is_number(value):
            raise fail(f"{name} must be a number, got {type(value).__name__}", name)
    if floor is None:
        raise fail("floor must be a number, got NoneType", "floor")
    if isinstance(rounds, bool) or not isinstance(rounds, numbers.Integral):
        raise fail(f"rounds must be an integer, got {type(rounds).__name__}", "rounds")
    if not (math.isfinite(value := as_real(floor)) and 0.0 <= value <= 1.0):
        raise fail(f"floor must lie in [0, 1], got {_shown(floor)}", "floor")
    if not (math.isfinite(value := as_real(margin)) and 0.0 <= value <= 1.0):
        raise fail(f"margin must lie in [0, 1], got {_shown(margin)}", "margin")
    if rounds < 0:
        raise fail(f"rounds must be >= 0, got {_shown(rounds)}", "rounds")
    if rounds > MAX_ROUNDS:
        raise fail(f"rounds must be at most {MAX_ROUNDS}, got {_shown(rounds)}", "rounds")
    if deadline_s is not None and not (math.isfinite(value := as_real(deadline_s)) and value >= 0):
        # checked before any agent is asked: a NaN deadline ran every (paid) call and then
        # failed to record the run
        raise fail(
            f"deadline_s must be a finite number >= 0, got {_shown(deadline_s)}", "deadline_s"
        )
    if not agents:
        raise fail("at least one agent is needed", "agents")
    if len(agents) > MAX_AGENTS:
        raise fail(f"at most {MAX_AGENTS} agents, got {len(agents)}", "agents")
    if len(set(agents)) != len(agents):
        raise fail("agent ids must be unique", "agents")
    _check_agent_names(agents, fail)
    known = set(agents)
    for i, edge in enumerate(edges or []):
        if isinstance(edge, str | bytes) or not isinstance(edge, Sequence) or len(edge) != 2:
            raise fail("an edge names exactly two agents", f"{edges_field}.{i}")
        for end in edge:
            if not isinstance(end, str) or end not in known:
                raise fail(f"edge names unknown agent {end!r}", f"{edges_field}.{i}")


def _is_number(value: object) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _shown(value: object) -> str:
    """A control's value as a message shows it: a number of more digits than Python
    writes out (or than a line holds) by its size, never an error of its own."""
    try:
        text = str(value)
    except ValueError:  # an int past sys.get_int_max_str_digits
        return "a number of more than 4,300 digits"
    return text if len(text) <= 40 else f"{text[:20]}... ({len(text)} characters)"


def as_real(value: float) -> float:
    """``value`` as a ``float``; ``nan`` for an integer too large for one (out of every
    range), so a check refuses it rather than raising ``OverflowError``."""
    try:
        return float(value)
    except OverflowError:
        return math.nan


def _check_options(options: Sequence[Outcome], rejected: Outcome, ideal: Outcome) -> None:
    """Every option has an id of its own, as a problem file's options must: no blank id
    (table agents score by id), none reading as an anchor's or an earlier option's."""
    ids: dict[str, str] = {}
    for name, anchor in (("rejected", rejected), ("ideal", ideal)):
        if anchor.id is not None:
            ids[same_name(anchor.id)] = f"the {name} anchor"
    for i, option in enumerate(options):
        where = f"options.{i}.id"
        if option.id is None or not same_name(option.id):
            raise ConfigError(
                "an option needs an id that is not blank (table agents score by id)",
                field=where,
            )
        seen = ids.get(same_name(option.id))
        if seen is not None:
            raise ConfigError(f"option id {option.id!a} reads as the id of {seen}", field=where)
        ids[same_name(option.id)] = f"options.{i} ({option.id!r})"


def check_arguments(
    *,
    agents: object,
    rejected: object,
    ideal: object,
    options: object,
    rule: object,
    problem: object,
    edges: object,
    clock: object,
) -> None:
    """Raise :class:`ConfigError` naming the first Python API argument of the wrong kind
    (one type check per argument, agent and option; before any agent is called)."""
    if isinstance(agents, str | bytes) or not isinstance(agents, Sequence):
        raise ConfigError(
            f"expected a sequence of agents, got {type(agents).__name__}", field="agents"
        )
    for i, agent in enumerate(agents):
        if not isinstance(agent, NegotiationAgent):
            raise ConfigError(
                f"expected a NegotiationAgent, got {type(agent).__name__}", field=f"agents.{i}"
            )
        if not isinstance(agent.id, str):
            raise ConfigError(
                f"an agent id is a string, got {type(agent.id).__name__}", field=f"agents.{i}.id"
            )
    for name, anchor in (("rejected", rejected), ("ideal", ideal)):
        if not isinstance(anchor, Outcome):
            raise ConfigError(f"expected an Outcome, got {type(anchor).__name__}", field=name)
    assert isinstance(rejected, Outcome) and isinstance(ideal, Outcome)
    if rejected == ideal or (rejected.id is not None and rejected.id == ideal.id):
        raise ConfigError("the two anchors must differ (and not share an id)", field="ideal")
    if isinstance(options, str | bytes) or not isinstance(options, Sequence):
        raise ConfigError(
            f"expected a sequence of Outcome, got {type(options).__name__}", field="options"
        )
    for i, option in enumerate(options):
        if not isinstance(option, Outcome):
            raise ConfigError(
                f"expected an Outcome, got {type(option).__name__}", field=f"options.{i}"
            )
    _check_options(options, rejected, ideal)
    if rule not in RULES:
        raise ConfigError(f"unknown selection rule {rule!r}", field="rule")
    if not isinstance(problem, str):
        raise ConfigError(f"expected a string, got {type(problem).__name__}", field="problem")
    if edges is not None and (isinstance(edges, str | bytes) or not isinstance(edges, Sequence)):
        raise ConfigError(
            f"expected a sequence of agent id pairs, got {type(edges).__name__}", field="edges"
        )
    if not callable(clock):
        raise ConfigError(f"expected a callable, got {type(clock).__name__}", field="clock")
