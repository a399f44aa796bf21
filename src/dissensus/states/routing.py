"""Defeasible routing: from a reading and case metadata to a meta-action (``docs/states.md``).

Four default rules map each state to the disagreement-states paper's meta-action: CA => ``auto``,
DA => ``auto_explain``, DD => ``seek_context``, CD => ``escalate``. Domain rules, loaded
from YAML, add conditions over case metadata and the reading
(:mod:`dissensus.states.conditions`) and may defeat the defaults or each other. The
outcome names the deciding rule and the applicable rules that lost.

Rules file::

    defaults:              # optional: another action for a default rule
      CD: concord
    rules:
      - id: legal-review
        condition: meta.category == "legal"
        action: escalate
        priority: 10       # optional, default 1 (the four defaults have priority 0)
        defeats: [risky]   # optional: explicit superiority over other rules
      - id: risky
        condition: meta.risk == "high" and state == "DA"
        action: escalate
    superiority:           # optional: [winner, loser] pairs, same as `defeats`
      - [legal-review, default-DA]
    builtins: [cd-without-values]   # optional: built-in rules to switch on (below)

Built-in rules are written like domain rules but ship with the library, so a record
names them like any other rule (:data:`BUILTIN_RULES`):

* ``cd-without-values``: ``state == "CD" and value_profiles == 0`` -> ``seek_context``,
  priority 0, defeats ``default-CD``. A convergent disagreement whose agents state no
  value profile is not (yet) a value conflict: it gets context before a human. A domain
  rule (priority 1 by default) that routes CD still beats it; without the
  ``value_profiles`` fact (``null``: a caller of :meth:`RuleSet.route` that does not give
  it) it never applies. ``dissensus route`` and the pipeline give it.

Semantics (the disagreement-states paper names priorities and superiority but leaves their combination open):

* Rule X *beats* rule Y when X is declared superior to Y (``defeats`` or
  ``superiority``); when neither is declared superior to the other, the rule of higher
  priority beats the other; equal priority and no declaration: neither beats the other.
  Explicit superiority therefore overrides priorities.
* Among the rules whose condition holds, the deciding rule is one that no applicable
  rule beats; every applicable rule beaten by an applicable rule is reported as
  ``defeated``; applicable rules beaten by none besides the decider are ``concurring``
  (they have the same action, see below).
* Checked when the rules are loaded (a :class:`~dissensus.errors.ConfigError` names the
  rules, never a silent pick): ids are unique and not one of the default ids unless
  overriding via ``defaults``; superiority names known rules and is not declared both
  ways; the beats relation over *all* rules has no cycle (conservative: a cycle is an
  error even if its rules could never all apply together); and two rules of equal
  priority with different actions and no superiority between them are an error unless
  their conditions are provably exclusive (:func:`~dissensus.states.exclusive.exclusive`,
  e.g. the same name compared with different constants). Hence every case has exactly
  one action.
* Rules are tried in a fixed linear extension of the beats relation (priority, then
  file order, defaults last), so routing is deterministic.
* Routes are memoised per rule set: the route of a case depends only on the values its
  rules' conditions read (the state, the decision, a few metadata keys...), so a rule
  set keeps up to 4,096 routes keyed by exactly those values (each with its class) and
  returns a fresh :class:`Route` with the remembered action, deciding rule, defeated
  and concurring rules. Rule sets whose conditions read a similarity (a value that
  rarely repeats), and cases whose metadata value read by a rule is a list or a
  mapping, are routed without the memo. A property test checks memoised routes against
  routes evaluated afresh.
* Actions are free lower-case identifiers (``[a-z][a-z0-9_]*``); the four above are the
  standard ones (:class:`Action`), a pipeline may add its own (``concord``,
  ``deliberate``, ...), so :attr:`Route.action` is a ``str``.
* Rule ids are named by whoever writes the rules file (besides the four ``default-XX``
  and the built-ins), so they are an open set: :data:`RuleId`, a ``str`` newtype that
  says what the string is, not an enumeration.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, NewType

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from dissensus.errors import ConfigError, DissensusError, InputError
from dissensus.io.yamlfile import load_yaml_file
from dissensus.quoting import missing_misspelt
from dissensus.states.conditions import (
    And,
    Cmp,
    Condition,
    Node,
    Not,
    Or,
    Truth,
    Var,
    _lookup,
    parse_condition,
)
from dissensus.states.exclusive import exclusive
from dissensus.states.reading import Reading, State
from dissensus.types import trusted

__all__ = [
    "BUILTIN_RULES",
    "DEFAULT_ACTIONS",
    "Action",
    "Route",
    "RouteFields",
    "Rule",
    "RuleId",
    "RuleSet",
    "RuleSpec",
    "RulesFile",
    "route",
    "route_of",
]


RuleId = NewType("RuleId", str)
"""The id of a routing rule: a rules file's ``id`` (``[A-Za-z0-9][A-Za-z0-9_.-]*``), a
default rule's ``default-CA`` / ``-DA`` / ``-CD`` / ``-DD``, or a built-in's
(:data:`BUILTIN_RULES`). Users name rules, so the ids are an open set (a ``str``,
written as is in JSON), not an enumeration."""


class Action(StrEnum):
    """The disagreement-states paper's four meta-actions."""

    AUTO = "auto"
    AUTO_EXPLAIN = "auto_explain"
    SEEK_CONTEXT = "seek_context"
    ESCALATE = "escalate"


DEFAULT_ACTIONS: dict[State, str] = {
    State.CONVERGENT_AGREEMENT: Action.AUTO.value,
    State.DIVERGENT_AGREEMENT: Action.AUTO_EXPLAIN.value,
    State.DIVERGENT_DISAGREEMENT: Action.SEEK_CONTEXT.value,
    State.CONVERGENT_DISAGREEMENT: Action.ESCALATE.value,
}
"""The default rule of each state."""

_ID = r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$"
_ACTION = r"^[a-z][a-z0-9_]*$"


class RuleSpec(BaseModel):
    """One domain rule as written in the rules file."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(pattern=_ID)
    """Unique rule id."""
    condition: str = Field(min_length=1)
    """When the rule applies (see :mod:`dissensus.states.conditions`)."""
    action: str = Field(pattern=_ACTION)
    """The meta-action the rule routes to."""
    priority: int = 1
    """Higher beats lower (default rules have 0). A file's must be an integer
    (:func:`check_priorities`); a rules document journalled with a run is read as it was."""
    defeats: list[str] = Field(default_factory=list)
    """Ids of rules this rule is explicitly superior to."""
    description: str | None = None
    """Free text, for humans."""


def check_priorities(rules: object, *, file: str | None = None, prefix: str = "") -> None:
    """Refuse a rule whose ``priority`` is not an integer (a quoted ``"3"``, ``true``,
    ``2.5``; ``4.0`` counts as 4) naming ``{prefix}rules.I.priority``: written in a file,
    a value keeps its type. A rules document journalled with a run is not checked again."""
    if not isinstance(rules, list):
        return
    for i, rule in enumerate(rules):
        if not isinstance(rule, dict) or "priority" not in rule:
            continue
        value = rule["priority"]
        integral = isinstance(value, int) or (isinstance(value, float) and value.is_integer())
        if isinstance(value, bool) or not integral:
            raise ConfigError(
                f"a priority is an integer, not {type(value).__name__} ({str(value)[:40]!r})",
                file=file,
                field=f"{prefix}rules.{i}.priority",
            )


class RulesFile(BaseModel):
    """The whole rules file."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    rules: list[RuleSpec] = Field(default_factory=list)
    superiority: list[tuple[str, str]] = Field(default_factory=list)
    """``[winner, loser]`` pairs."""
    defaults: dict[State, str] = Field(default_factory=dict)
    """Replacement actions for default rules, by state."""
    builtins: list[str] = Field(default_factory=list)
    """Built-in rules (:data:`BUILTIN_RULES`) to switch on, by id."""


BUILTIN_RULES: dict[str, RuleSpec] = {
    "cd-without-values": RuleSpec(
        id="cd-without-values",
        condition='state == "CD" and value_profiles == 0',
        action="seek_context",
        priority=0,
        defeats=["default-CD"],
        description=(
            "convergent disagreement without value profiles is not a value conflict: seek context first"
        ),
    ),
}
"""Rules that ship with the library; a rules file switches them on under ``builtins``."""


@dataclass(frozen=True)
class Rule:
    """A compiled rule."""

    id: str
    condition: Condition
    action: str
    priority: int
    position: int
    """File order (defaults after every domain rule)."""
    default: bool = False


class Route(BaseModel):
    """Where a case goes, and which rule sent it there."""

    model_config = ConfigDict(frozen=True)

    action: str
    """The meta-action."""
    rule: RuleId
    """Id of the deciding rule."""
    defeated: list[RuleId]
    """Applicable rules that were defeated, in rule order."""
    concurring: list[RuleId] = Field(default_factory=list)
    """Other undefeated applicable rules (always with the same action)."""


def _default_rules(actions: Mapping[State, str], start: int) -> list[Rule]:
    order = [
        State.CONVERGENT_AGREEMENT,
        State.DIVERGENT_AGREEMENT,
        State.CONVERGENT_DISAGREEMENT,
        State.DIVERGENT_DISAGREEMENT,
    ]
    return [
        Rule(
            id=f"default-{s.value}",
            condition=parse_condition(f'state == "{s.value}"'),
            action=actions.get(s, DEFAULT_ACTIONS[s]),
            priority=0,
            position=start + k,
            default=True,
        )
        for k, s in enumerate(order)
    ]


def _find_cycle(ids: Sequence[str], beats: set[tuple[str, str]]) -> list[str] | None:
    succ: dict[str, list[str]] = {i: [] for i in ids}
    for a, b in sorted(beats):
        succ[a].append(b)
    colour = dict.fromkeys(ids, 0)
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        colour[node] = 1
        stack.append(node)
        for nxt in succ[node]:
            if colour[nxt] == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if colour[nxt] == 0 and (found := visit(nxt)):
                return found
        stack.pop()
        colour[node] = 2
        return None

    for i in ids:
        if colour[i] == 0 and (found := visit(i)):
            return found
    return None


class RuleSet:
    """A validated set of rules, defaults included, ready to route."""

    def __init__(
        self, spec: RulesFile | None = None, *, file: str | None = None, labels: bool = True
    ) -> None:
        """``labels=False`` reads a rules document journalled with a run: a number
        compared with a label, refused in a file (:mod:`dissensus.states.conditions`),
        is read as it was (the test never holds)."""
        spec = spec or RulesFile()
        self.file = file
        specs: list[tuple[RuleSpec, str]] = [(r, f"rules.{k}") for k, r in enumerate(spec.rules)]
        for k, name in enumerate(spec.builtins):
            if name not in BUILTIN_RULES:
                known = ", ".join(sorted(BUILTIN_RULES))
                raise ConfigError(
                    f"unknown built-in rule {name!r} (known: {known})",
                    file=file,
                    field=f"builtins.{k}",
                )
            specs.append((BUILTIN_RULES[name], f"builtins.{k}"))
        rules: list[Rule] = []
        for k, (r, at) in enumerate(specs):
            where = f"{at}.condition"
            rules.append(
                Rule(
                    r.id,
                    parse_condition(r.condition, where=where, file=file, labels=labels),
                    r.action,
                    r.priority,
                    k,
                )
            )
        rules.extend(_default_rules(spec.defaults, len(rules)))
        self._check_ids(rules)
        self.rules: list[Rule] = rules
        by_id = {r.id: r for r in rules}
        superior = self._superiority(spec, specs, by_id)
        self.beats = self._beats(rules, superior)
        cycle = _find_cycle([r.id for r in rules], self.beats)
        if cycle:
            raise ConfigError(
                f"rules defeat each other in a cycle: {' > '.join(cycle)}",
                file=file,
                field="superiority",
            )
        self._check_conflicts(rules, superior)
        self.ordered: list[Rule] = self._linear_order(rules)
        self._tests = [(r, r.condition.evaluator) for r in self.ordered]
        found: list[tuple[str, ...]] = []
        for rule in rules:
            _paths(rule.condition.tree, found)
        paths = sorted(set(found))
        self.names: frozenset[str] = frozenset(p[0] for p in paths)
        """The names the conditions read (``meta`` for any metadata key)."""
        self._key = _memo_key(paths)
        self._memo: dict[tuple[Any, ...], RouteFields] = {}

    # -- construction -------------------------------------------------------------------

    @classmethod
    def default(cls) -> RuleSet:
        """Only the four default rules."""
        return cls()

    @classmethod
    def from_dict(cls, data: object, *, file: str | None = None, labels: bool = True) -> RuleSet:
        """Validate a parsed rules document (``labels=False``: one journalled with a run,
        see :class:`RuleSet`)."""
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise ConfigError("a rules file must be a mapping with a 'rules' list", file=file)
        try:
            spec = RulesFile.model_validate(data)
        except ValidationError as exc:
            errors = exc.errors()
            first = errors[0]
            loc = ".".join(str(p) for p in first["loc"]) or "<root>"
            message = first["msg"] + missing_misspelt(errors)
            raise ConfigError(message, file=file, field=loc) from None
        return cls(spec, file=file, labels=labels)

    @classmethod
    def load(cls, path: str | Path) -> RuleSet:
        """Load and validate a YAML rules file."""
        name = str(path)
        data: Any = load_yaml_file(path, what="rules file")
        if isinstance(data, dict):
            check_priorities(data.get("rules"), file=name)
        return cls.from_dict(data, file=name)

    def _check_ids(self, rules: Sequence[Rule]) -> None:
        seen: set[str] = set()
        for r in rules:
            if r.id in seen:
                hint = (
                    " (default rule ids are reserved; change a default's action under 'defaults')"
                )
                raise ConfigError(
                    f"duplicate rule id {r.id!r}{hint if r.default else ''}",
                    file=self.file,
                    field="rules",
                )
            seen.add(r.id)

    def _superiority(
        self, spec: RulesFile, specs: Sequence[tuple[RuleSpec, str]], by_id: Mapping[str, Rule]
    ) -> set[tuple[str, str]]:
        pairs = [(r.id, loser, f"{at}.defeats") for r, at in specs for loser in r.defeats]
        pairs += [(a, b, f"superiority.{k}") for k, (a, b) in enumerate(spec.superiority)]
        superior: set[tuple[str, str]] = set()
        for a, b, where in pairs:
            for x in (a, b):
                if x not in by_id:
                    raise ConfigError(f"unknown rule id {x!r}", file=self.file, field=where)
            if a == b:
                raise ConfigError(f"rule {a!r} cannot defeat itself", file=self.file, field=where)
            if (b, a) in superior:
                raise ConfigError(
                    f"rules {a!r} and {b!r} are each declared superior to the other",
                    file=self.file,
                    field=where,
                )
            superior.add((a, b))
        return superior

    @staticmethod
    def _beats(rules: Sequence[Rule], superior: set[tuple[str, str]]) -> set[tuple[str, str]]:
        beats = set(superior)
        for x in rules:
            for y in rules:
                declared = (x.id, y.id) in superior or (y.id, x.id) in superior
                if not declared and x.priority > y.priority:
                    beats.add((x.id, y.id))
        return beats

    def _check_conflicts(self, rules: Sequence[Rule], superior: set[tuple[str, str]]) -> None:
        for i, x in enumerate(rules):
            for y in rules[i + 1 :]:
                if x.priority != y.priority or x.action == y.action:
                    continue
                if (x.id, y.id) in superior or (y.id, x.id) in superior:
                    continue
                if exclusive(x.condition, y.condition):
                    continue
                raise ConfigError(
                    f"rules {x.id!r} ({x.action}) and {y.id!r} ({y.action}) have equal priority "
                    f"{x.priority}, different actions, no superiority between them, and their "
                    "conditions can both hold; give one a higher priority or declare which defeats the other",
                    file=self.file,
                    field="rules",
                )

    def _linear_order(self, rules: Sequence[Rule]) -> list[Rule]:
        """Kahn's algorithm on the beats relation, ties by (priority desc, position)."""
        by_id = {r.id: r for r in rules}
        indegree = dict.fromkeys(by_id, 0)
        succ: dict[str, list[str]] = {i: [] for i in by_id}
        for a, b in self.beats:
            succ[a].append(b)
            indegree[b] += 1
        heap = [(-r.priority, r.position, r.id) for r in rules if indegree[r.id] == 0]
        heapq.heapify(heap)
        out: list[Rule] = []
        while heap:
            _, _, rid = heapq.heappop(heap)
            out.append(by_id[rid])
            for nxt in succ[rid]:
                indegree[nxt] -= 1
                if indegree[nxt] == 0:
                    r = by_id[nxt]
                    heapq.heappush(heap, (-r.priority, r.position, r.id))
        return out

    # -- routing ------------------------------------------------------------------------

    def route(
        self,
        reading: Reading,
        meta: Mapping[str, Any] | None = None,
        *,
        value_profiles: int | None = None,
    ) -> Route:
        """Route one reading; see :func:`route`. ``value_profiles`` (agents stating a value
        profile) is the condition name of that name; ``None`` when unknown."""
        return route_of(self.route_fields(reading, meta, value_profiles=value_profiles))

    def route_fields(
        self,
        reading: Reading,
        meta: Mapping[str, Any] | None = None,
        *,
        value_profiles: int | None = None,
    ) -> RouteFields:
        """:meth:`route` as a tuple ``(action, rule, defeated, concurring)``, without
        building a :class:`Route` (the tuple may be shared: it is immutable)."""
        key = None if self._key is None else self._key(reading, meta, value_profiles)
        if key is not None:
            hit = self._memo.get(key)
            if hit is not None:
                return hit
        routed = self._route(reading, meta, value_profiles)
        fields = (routed.action, routed.rule, tuple(routed.defeated), tuple(routed.concurring))
        if key is not None:
            if len(self._memo) >= _MEMO_SIZE:
                self._memo.clear()
            self._memo[key] = fields
        return fields

    def _route(
        self, reading: Reading, meta: Mapping[str, Any] | None, value_profiles: int | None
    ) -> Route:
        """Route by evaluating every condition (what the memo of :meth:`route` records)."""
        env = {
            "state": reading.state._value_,  # as .value, without the enum descriptor
            "agreement": reading.agreement,
            "reasoning_similarity": reading.mean_similarity,
            "mean_similarity": reading.mean_similarity,
            "min_similarity": reading.min_similarity,
            "decision": reading.decision,
            "tie": reading.tie,
            "abstentions": reading.abstentions,
            "agents": len(reading.agents),
            "value_profiles": value_profiles,
            "meta": meta or {},
        }
        applicable = [r for r, test in self._tests if test(env)]
        if not applicable:
            raise DissensusError(
                f"no routing rule applies to case {reading.id!r} (state {reading.state.value})"
            )
        winner = applicable[0]
        if len(applicable) == 1:
            return trusted(
                Route,
                {"action": winner.action, "rule": winner.id, "defeated": [], "concurring": []},
            )
        beats = self.beats
        defeated: list[Rule] = []
        concurring: list[str] = []
        for r in applicable[1:]:
            if any((s.id, r.id) in beats for s in applicable):
                defeated.append(r)
            elif r.action != winner.action:
                raise DissensusError(
                    f"rules {winner.id!r} and {r.id!r} conflict on case {reading.id!r}"
                )
            else:
                concurring.append(r.id)
        defeated.sort(key=lambda r: r.position)
        return trusted(
            Route,
            {
                "action": winner.action,
                "rule": winner.id,
                "defeated": [r.id for r in defeated],
                "concurring": concurring,
            },
        )


RouteFields = tuple[str, str, tuple[str, ...], tuple[str, ...]]
"""A route as ``(action, rule, defeated, concurring)`` (see :meth:`RuleSet.route_fields`)."""


def route_of(fields: RouteFields) -> Route:
    """The :class:`Route` of ``(action, rule, defeated, concurring)``, with fresh lists:
    a route's lists are its own, never shared with another."""
    action, rule, defeated, concurring = fields
    values = {
        "action": action,
        "rule": rule,
        "defeated": list(defeated),
        "concurring": list(concurring),
    }
    return trusted(Route, values)


_MEMO_SIZE = 4096
"""Most routes a rule set remembers; the memo is emptied when full."""

_CONTINUOUS = frozenset({"reasoning_similarity", "mean_similarity", "min_similarity"})
"""Names whose values rarely repeat: rule sets reading them are not memoised."""

_SCALARS = (str, int, float, bool, type(None))


def _paths(node: Node, out: list[tuple[str, ...]]) -> None:
    """The variable paths a condition reads, appended to ``out``."""
    if isinstance(node, Cmp):
        for term in (node.left, node.right):
            if isinstance(term, Var):
                out.append(term.path)
    elif isinstance(node, Truth):
        out.append(node.var.path)
    elif isinstance(node, Not):
        _paths(node.item, out)
    elif isinstance(node, And | Or):
        for item in node.items:
            _paths(item, out)


_NAME_OF: dict[str, Callable[[Reading, int | None], Hashable]] = {
    "state": lambda r, v: r.state._value_,
    "agreement": lambda r, v: r.agreement,
    "decision": lambda r, v: r.decision,
    "tie": lambda r, v: tuple(r.tie),
    "abstentions": lambda r, v: r.abstentions,
    "agents": lambda r, v: len(r.agents),
    "value_profiles": lambda r, v: v,
}
"""How the memo key reads each name (``tie`` as a tuple, for hashing)."""


def _memo_key(paths: Sequence[tuple[str, ...]]) -> Any:
    """The memo key of a rule set: the values its conditions read, or None (no memo).

    Routing is a pure function of the names and metadata paths the conditions read
    (the environment of :meth:`RuleSet._route`); the key holds exactly those values,
    each with its class (``1``, ``1.0`` and ``True`` compare equal as keys but not in
    every condition). A metadata value that is not a JSON scalar (a list, a mapping,
    another object) gives no key, and that case is routed without the memo.
    """
    if any(p[0] in _CONTINUOUS for p in paths):
        return None
    names = [_NAME_OF[p[0]] for p in paths if len(p) == 1]
    keys = [p[1] for p in paths if len(p) == 2]  # meta.<key>: the common case
    deeper = [_lookup(p) for p in paths if len(p) > 2]

    def key(reading: Reading, meta: Mapping[str, Any] | None, profiles: int | None) -> Any:
        values: list[Any] = []
        for get in names:  # a loop, not a comprehension: no extra frame per case
            values.append(get(reading, profiles))
        if keys:
            # As _lookup reads meta.<key>: a missing key (or no metadata) is None.
            m: Any = meta or {}
            if type(m) is not dict and not isinstance(m, Mapping):
                return None
            for name in keys:
                value = m.get(name)
                if not isinstance(value, _SCALARS):
                    return None
                values.append(value.__class__)
                values.append(value)
        if deeper:
            env = {"meta": meta or {}}
            for find in deeper:
                value = find(env)
                if not isinstance(value, _SCALARS):
                    return None
                values.append(value.__class__)
                values.append(value)
        return tuple(values)

    return key


def route(
    reading: Reading | Mapping[str, Any],
    panel_meta: Mapping[str, Any] | None,
    rules: RuleSet | None = None,
    *,
    value_profiles: int | None = None,
) -> Route:
    """The action for ``reading`` under ``rules`` (the defaults when ``None``).

    Deterministic: the same reading, metadata and rules always give the same route.
    ``reading`` may also be a mapping (a reading's JSON data, as records hold it),
    validated into a :class:`Reading`; a wrong type or invalid data is an
    :class:`~dissensus.errors.InputError`.
    """
    if not isinstance(reading, Reading):
        reading = _reading_of(reading)
    if panel_meta is not None and not isinstance(panel_meta, Mapping):
        raise InputError(f"panel_meta is a mapping or None, not {type(panel_meta).__name__}")
    return (rules or _DEFAULT).route(reading, panel_meta, value_profiles=value_profiles)


def _reading_of(value: object) -> Reading:
    """A reading from its data (:func:`route`)."""
    if not isinstance(value, Mapping):
        raise InputError(f"a reading is a Reading or a mapping, not {type(value).__name__}")
    try:
        return Reading.model_validate(value)
    except ValidationError as exc:
        raise InputError.invalid("reading", exc) from None


_DEFAULT = RuleSet()
