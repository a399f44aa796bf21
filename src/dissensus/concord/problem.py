"""The CONCORD problem file (YAML) and the agents it names (``docs/concord.md``).

```yaml
problem: "Region-wide incident: choose the remediation plan."   # optional
floor: 0.70
margin: 0.01
rounds: 6                      # round budget, in repair rounds
rule: maximin                  # maximin (default) | leximin | nash | utilitarian
owner: region                  # whose proposal "owner decides" takes (default: first agent)
anchors:
  rejected: {id: R0, text: "leave the region down"}
  ideal: {id: I0, text: "full recovery, no data loss, no extra cost"}
options:
  - {id: A, text: "fail over to the standby region"}
agents:
  - {id: security, kind: table, scores: {R0: 0, I0: 10, A: 6}}
  - {id: cost, kind: function, score: "pkg.mod:score", propose: "pkg.mod:propose"}
  - {id: latency, kind: llm, role: "You own p99 latency of the checkout path."}
topology: group                # or {edges: [[security, cost], [cost, latency]]}
```

Every error is a :class:`~dissensus.errors.ConfigError` naming the file and the field,
and the line the field is written on when the file is read from disk
(:func:`load_problem`, ``(line 12)``; :func:`with_line` adds it to an error found
later, an agent's module that does not load or its equal anchors at run time):
missing anchors, a floor or margin outside [0, 1], a negative round budget, duplicate
ids, a blank anchor or option id or text (``id: ""``, ``text: "  "``: a blank id would be
tabled as no id at all), an option reusing an anchor id, a table agent without a score for an anchor or
whose two anchors score equal, an edge naming an unknown agent, and any number that is
not finite (YAML's ``.inf`` and ``.nan`` are floats: a score, floor, margin or timeout).
Numbers are read strictly: a boolean (``floor: true``) or a string (``floor: '0.7'``) is
not a number, and a round budget is an integer (``6``, not ``6.0``).

Choices this module makes:

* A problem file is trusted code: function agents' ``module:function`` names run
  Python. They are resolved by :func:`dissensus.loading.load_callable`, a module beside
  the problem file first (imported by file path, so ``examples/concord/incident.yaml``
  can name ``incident_agents:score_telemetry``; ``sys.path`` is never changed), then an
  importable module. Building agents from the file is an assembly step outside the
  protocol's core: :func:`dissensus.agents.assembly.build_agents`.
* An option's text is no other option's and no anchor's, outer white space aside
  (:func:`~dissensus.concord.controls.plan_text`, the comparison the protocol merges
  and faults plans by; ``options.N.text``): one plan
  under two ids was tabled twice and could be scored 0.5 under one id and 0.9 under the
  other by the same agent, and an anchor is never a candidate.
* Agent ``timeout`` (seconds, optional, finite and positive) bounds each call to that agent.
* ``model:`` (optional) names the model of the LLM agents; relative ``scripted:`` and
  ``replay:`` paths in it are resolved against the problem file's directory.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictInt, ValidationError

from dissensus.concord.agent import NegotiationAgent, Outcome
from dissensus.concord.controls import check_controls, plan_text, same_name
from dissensus.concord.protocol import Negotiation
from dissensus.concord.rules import SelectionRule
from dissensus.concord.scale import check_anchors
from dissensus.errors import ConfigError, field_path
from dissensus.io.yamlfile import load_yaml_text, read_text_file, with_field_line
from dissensus.quoting import missing_misspelt, misspelling

__all__ = [
    "AgentSpec",
    "AnchorSpec",
    "Problem",
    "load_problem",
    "negotiation_for",
    "parse_problem",
    "with_line",
]


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class AnchorSpec(_Spec):
    rejected: Outcome
    ideal: Outcome


class AgentSpec(_Spec):
    """One agent of the problem file."""

    id: str = Field(min_length=1)
    kind: Literal["table", "function", "llm"]
    scores: dict[str, StrictFloat] | None = None
    """Table agents: raw score per outcome id, anchors included."""
    score: str | None = None
    """Function agents: ``module:function`` scoring one outcome."""
    propose: str | None = None
    repair: str | None = None
    role: str | None = None
    """LLM agents: the role prompt."""
    timeout: StrictFloat | None = Field(default=None, gt=0)


class TopologySpec(_Spec):
    edges: list[list[str]]


class Problem(_Spec):
    """A validated problem file."""

    problem: str = ""
    floor: StrictFloat
    margin: StrictFloat = 0.01
    rounds: StrictInt = 6
    rule: SelectionRule = "maximin"
    owner: str | None = None
    model: str | None = None
    """Model spec for LLM agents and the LLM comparison rows (``scripted:FILE`` paths are
    relative to the problem file); ``--model`` overrides it, ``$DISSENSUS_MODEL`` fills in."""
    anchors: AnchorSpec
    options: list[Outcome] = Field(default_factory=list)
    agents: list[AgentSpec]
    topology: Literal["group"] | TopologySpec = "group"

    @property
    def edges(self) -> list[tuple[str, str]] | None:
        if isinstance(self.topology, TopologySpec):
            return [(e[0], e[1]) for e in self.topology.edges]
        return None


def _check(problem: Problem, file: str | None) -> None:
    def fail(message: str, field: str) -> ConfigError:
        return ConfigError(message, file=file, field=field)

    seen_ids: set[str] = set()
    for i, agent in enumerate(problem.agents):
        if agent.id in seen_ids:
            raise fail(f"duplicate agent id {agent.id!r}", f"agents.{i}.id")
        seen_ids.add(agent.id)
    check_controls(
        floor=problem.floor,
        margin=problem.margin,
        rounds=problem.rounds,
        agents=[a.id for a in problem.agents],
        edges=problem.topology.edges if isinstance(problem.topology, TopologySpec) else None,
        file=file,
        edges_field="topology.edges",
    )
    anchor_ids = {problem.anchors.rejected.id, problem.anchors.ideal.id}
    for name in ("rejected", "ideal"):
        anchor = getattr(problem.anchors, name)
        if anchor.id is None or not same_name(anchor.id):
            raise fail("an anchor needs an id that is not blank", f"anchors.{name}.id")
        if not anchor.text.strip():
            raise fail("an anchor's text is blank", f"anchors.{name}.text")
    if len(anchor_ids) != 2 or len({same_name(str(i)) for i in anchor_ids}) != 2:
        raise fail("the two anchors need distinct ids", "anchors")
    seen: set[str] = set()
    # an option's text is no other outcome's: the protocol merges a written plan into the
    # outcome whose text it is, and a record holding one text twice shows two standings
    texts: dict[str, str] = {
        plan_text(a.text): f"the {n} anchor ({a.id!r})"
        for n, a in _anchors(problem)
        if a.text.strip()
    }
    # ids a reader cannot tell apart (x and x\u200b, A and fullwidth Ａ) are one id
    read: dict[str, str] = {same_name(str(a.id)): f"anchors.{n}" for n, a in _anchors(problem)}
    for i, option in enumerate(problem.options):
        if option.id is None or not same_name(option.id):
            raise fail("an option needs an id that is not blank", f"options.{i}.id")
        alike = read.get(same_name(option.id))
        if alike is not None and option.id not in anchor_ids | seen:
            raise fail(
                f"option id {option.id!a} reads as the id of {alike}; "
                "give outcomes ids a reader tells apart",
                f"options.{i}.id",
            )
        read.setdefault(same_name(option.id), f"options.{i}")
        if not option.text.strip():  # nothing an agent could score or propose
            raise fail("an option's text is blank", f"options.{i}.text")
        if option.id in anchor_ids:
            raise fail(
                f"option id {option.id!r} is an anchor id; anchors are never candidates",
                f"options.{i}.id",
            )
        if option.id in seen:
            raise fail(f"duplicate option id {option.id!r}", f"options.{i}.id")
        seen.add(option.id)
        if plan_text(option.text) in texts:
            raise fail(
                f"option {option.id!r} has the text of {texts[plan_text(option.text)]} "
                "(outer white space aside); one plan under "
                "two ids is scored twice, and a table agent may give it two different scores",
                f"options.{i}.text",
            )
        texts[plan_text(option.text)] = f"options.{i} ({option.id!r})"
    ids: set[str] = set()
    for i, agent in enumerate(problem.agents):
        _check_agent(problem, agent, f"agents.{i}", ids, fail)
        ids.add(agent.id)
    if problem.owner is not None and problem.owner not in ids:
        raise fail(f"owner {problem.owner!r} is not an agent", "owner")


def _anchors(problem: Problem) -> list[tuple[str, Outcome]]:
    return [("rejected", problem.anchors.rejected), ("ideal", problem.anchors.ideal)]


def _check_agent(problem: Problem, agent: AgentSpec, where: str, ids: set[str], fail: Any) -> None:
    rejected_id = problem.anchors.rejected.id
    ideal_id = problem.anchors.ideal.id
    if agent.kind == "table":
        if agent.scores is None:
            raise fail(f"table agent {agent.id!r} needs scores", f"{where}.scores")
        for anchor_id in (rejected_id, ideal_id):
            if anchor_id not in agent.scores:
                raise fail(
                    f"table agent {agent.id!r} gives no score for anchor {anchor_id!r}",
                    f"{where}.scores.{anchor_id}",
                )
        assert rejected_id is not None and ideal_id is not None
        why = check_anchors(agent.scores[rejected_id], agent.scores[ideal_id])
        if why is not None:
            raise fail(f"agent {agent.id!r}: {why}", f"{where}.scores")
        for key, value in agent.scores.items():
            if not math.isfinite(value):
                raise fail(f"score of {key!r} is not a finite number", f"{where}.scores.{key}")
    elif agent.kind == "function":
        if not agent.score:
            raise fail(
                f"function agent {agent.id!r} needs score: 'module:function'", f"{where}.score"
            )
    elif agent.kind == "llm" and not agent.role:
        raise fail(f"llm agent {agent.id!r} needs a role", f"{where}.role")


def parse_problem(data: object, *, file: str | None = None) -> Problem:
    """Validate parsed YAML data into a :class:`Problem` (ConfigError naming the field)."""
    if not isinstance(data, dict):
        raise ConfigError("a problem file is a mapping", file=file)
    if "anchors" not in data:
        hint = misspelling("anchors", data, Problem.model_fields)
        raise ConfigError(
            "missing anchors (one rejected and one ideal outcome)" + hint,
            file=file,
            field="anchors",
        )
    anchors = data.get("anchors")
    if isinstance(anchors, dict):
        for name in ("rejected", "ideal"):
            if name not in anchors:
                hint = misspelling(name, anchors, ("rejected", "ideal"))
                raise ConfigError(
                    f"missing the {name} anchor{hint}", file=file, field=f"anchors.{name}"
                )
    try:
        problem = Problem.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors()
        err = errors[0]
        message = err["msg"] + missing_misspelt(errors)
        raise ConfigError(message, file=file, field=field_path(*err["loc"]) or None) from exc
    _check(problem, file)
    return problem


def load_problem(path: str | Path) -> Problem:
    """Read and validate a problem file (an error names the file, the field and the line
    the field is written on: :func:`with_line`)."""
    file = str(path)
    text = read_text_file(path, what="problem file")
    data = load_yaml_text(text, file=file)
    try:
        problem = parse_problem(data, file=file)
    except ConfigError as exc:
        raise with_line(exc, file, text) from None
    if problem.model:
        problem = problem.model_copy(
            update={"model": _relative_model(problem.model, Path(path).parent)}
        )
    return problem


def with_line(
    exc: ConfigError, file: str, text: str | None = None, agents: Sequence[str] = ()
) -> ConfigError:
    """``exc`` naming the line of the problem file ``file`` its field is written on
    (:func:`~dissensus.io.yamlfile.yaml_line_of`; ``text``: the file's text, read again
    when not given), or ``exc`` itself: one about another file or without a field, one
    naming a line already, or a subclass. A field naming an agent by its id
    (``agents.<id>.anchors``, a run-time error) is looked up by the agent's place in
    ``agents`` (the problem's ids, in order)."""
    where = exc.field or ""
    head, _, rest = where.partition(".")
    if head == "agents" and agents:
        # ``agents`` is given only for a run-time error, whose field names the agent by
        # its id: that id, which may be all digits or hold dots (the longest that fits).
        ids = [a for a in agents if rest.startswith(a + ".")]
        if ids:
            name = max(ids, key=len)
            where = f"agents.{list(agents).index(name)}.{rest[len(name) + 1 :]}"
    return with_field_line(exc, file, text, what="problem file", where=where)


def _relative_model(spec: str, base: Path) -> str:
    kind, sep, rest = spec.partition(":")
    if sep and kind in ("scripted", "replay") and rest and not Path(rest).is_absolute():
        return f"{kind}:{base / rest}"
    if sep and kind == "record":
        file, sep2, inner = rest.partition(":")
        if sep2 and file:
            file = file if Path(file).is_absolute() else str(base / file)
            return f"record:{file}:{_relative_model(inner, base)}"
    return spec


def negotiation_for(
    problem: Problem,
    agents: Sequence[NegotiationAgent],
    *,
    deadline_s: float | None = None,
    rule: SelectionRule | None = None,
    floor: float | None = None,
) -> Negotiation:
    """A :class:`~dissensus.concord.protocol.Negotiation` configured from a problem file."""
    return Negotiation(
        agents,
        rejected=problem.anchors.rejected,
        ideal=problem.anchors.ideal,
        floor=problem.floor if floor is None else floor,
        margin=problem.margin,
        rounds=problem.rounds,
        rule=problem.rule if rule is None else rule,
        options=problem.options,
        problem=problem.problem,
        edges=problem.edges,
        deadline_s=deadline_s,
    )
