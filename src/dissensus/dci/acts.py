"""The DCI interaction grammar: 14 typed epistemic acts in 6 families, as data (``docs/dci.md``).

Every utterance in a deliberation is exactly one act with exactly one target: an option
(``o<n>``), a tension (``t<n>``) or an earlier act (``a<n>``). The task's question is the
root act ``a0``, so the very first ``frame`` has something to target.

Choices this module makes:

* Which target kinds each act accepts (the DCI paper names the acts and families only).
  ``propose`` targets the act it answers (usually the frame or ``a0``); ``spawn`` and
  ``extend`` target the option they build on; ``challenge``/``ask`` open a tension on
  their target; ``bridge`` targets a tension; ``recommend`` targets an option.
* ``propose`` and ``spawn`` must carry the text of the new option.
* Numbers are read strictly: a ``recommend``'s scores and an act's confidence are JSON
  numbers, so ``true`` or ``"0.1"`` fails validation (the answer is re-asked, as any
  answer that does not follow the schema) rather than reading as 1.0 or 0.1.
* Validation never repairs an act. :func:`check_act` returns the list of problems; the
  flow re-asks the participant with them and records a failure when the re-asks run out.
  A problem quotes what the model wrote (an act name, a target, a score's key) short
  (:func:`~dissensus.quoting.quote_short`, at most 8 ids listed), so a 1 MB target makes
  a problem of a few dozen characters, in the re-ask and in the packet's ``failures``.
* A text holding a lone surrogate (a model's JSON may write ``"\\ud800"``, which decodes
  to a code point no UTF-8 text can carry) makes the act invalid, re-asked like any
  other: accepted, it would make every later prompt unencodable (each later call of
  every participant failing) and the packet impossible to build.

>>> ACTS["challenge"].family
<ActFamily.CRITICAL: 'critical'>
>>> len(ACTS), len({spec.family for spec in ACTS.values()})
(14, 6)
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictFloat, model_validator

from dissensus.errors import ConfigError
from dissensus.quoting import quote_short
from dissensus.types import JsonSchema

__all__ = [
    "ACTS",
    "ActFamily",
    "ActSpec",
    "RawAct",
    "TargetKind",
    "act_schema",
    "act_spec",
    "canonical_target",
    "check_act",
    "parse_target",
]


class ActFamily(StrEnum):
    """The six act families and the cognitive function each carries."""

    ORIENTING = "orienting"
    GENERATIVE = "generative"
    CRITICAL = "critical"
    INTEGRATIVE = "integrative"
    EPISTEMIC = "epistemic"
    DECISIONAL = "decisional"


class TargetKind(StrEnum):
    """What an act may point at."""

    OPTION = "option"
    TENSION = "tension"
    ACT = "act"


class ActSpec(BaseModel):
    """One act of the grammar."""

    model_config = ConfigDict(frozen=True)

    name: str
    """Act name as spoken by participants."""
    family: ActFamily
    """The family the act belongs to."""
    description: str
    """One line, shown to participants in the stage instructions."""
    targets: frozenset[TargetKind]
    """Target kinds the act accepts."""
    needs_option_text: bool = False
    """The act creates an option and must carry its text."""


def _spec(
    name: str, family: ActFamily, description: str, *targets: TargetKind, option: bool = False
) -> ActSpec:
    return ActSpec(
        name=name,
        family=family,
        description=description,
        targets=frozenset(targets),
        needs_option_text=option,
    )


_O, _T, _A = TargetKind.OPTION, TargetKind.TENSION, TargetKind.ACT

ACTS: dict[str, ActSpec] = {
    spec.name: spec
    for spec in (
        _spec("frame", ActFamily.ORIENTING, "define how to view the problem", _A),
        _spec(
            "clarify", ActFamily.ORIENTING, "remove ambiguity or distinguish concepts", _O, _T, _A
        ),
        _spec(
            "reframe",
            ActFamily.ORIENTING,
            "change the angle from which the problem is seen",
            _T,
            _A,
        ),
        _spec(
            "propose",
            ActFamily.GENERATIVE,
            "put forward a candidate option (give its text)",
            _A,
            option=True,
        ),
        _spec("extend", ActFamily.GENERATIVE, "build on an option (amend or strengthen it)", _O),
        _spec(
            "spawn",
            ActFamily.GENERATIVE,
            "derive a new option from an existing one (give its text)",
            _O,
            option=True,
        ),
        _spec("ask", ActFamily.CRITICAL, "open a useful question", _O, _T, _A),
        _spec(
            "challenge", ActFamily.CRITICAL, "test a weakness, assumption or consequence", _O, _A
        ),
        _spec("bridge", ActFamily.INTEGRATIVE, "connect positions to settle a tension", _T),
        _spec(
            "synthesize",
            ActFamily.INTEGRATIVE,
            "integrate the deliberation into a judgement",
            _O,
            _A,
        ),
        _spec("recall", ActFamily.INTEGRATIVE, "bring back an earlier point that matters now", _A),
        _spec(
            "ground",
            ActFamily.EPISTEMIC,
            "attach evidence to an option, tension or act",
            _O,
            _T,
            _A,
        ),
        _spec(
            "update",
            ActFamily.EPISTEMIC,
            "revise a position in the light of what was said",
            _O,
            _T,
            _A,
        ),
        _spec(
            "recommend", ActFamily.DECISIONAL, "recommend an option and score every live option", _O
        ),
    )
}

_TARGET_RE = re.compile(r"^(?P<kind>[ota])(?P<num>\d+)$")
_KIND_OF_PREFIX = {"o": TargetKind.OPTION, "t": TargetKind.TENSION, "a": TargetKind.ACT}


def act_spec(name: str, *, field: str = "act") -> ActSpec:
    """The spec of act ``name``; a :class:`ConfigError` naming ``field`` if unknown."""
    spec = ACTS.get(name)
    if spec is None:
        raise ConfigError(
            f"unknown act {name!r}; known acts: {', '.join(sorted(ACTS))}", field=field
        )
    return spec


def parse_target(target: str) -> tuple[TargetKind, str] | None:
    """``"o3"`` -> ``(OPTION, "o3")``; ``None`` when the string is not a target id."""
    match = _TARGET_RE.match(target.strip())
    if match is None:
        return None
    return _KIND_OF_PREFIX[match.group("kind")], match.group(0)


class RawAct(BaseModel):
    """An act as a participant speaks it, before validation (the structured-output schema)."""

    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _flatten_move(cls, data: Any) -> Any:
        # The per-request schema (act_schema) nests the act and its own fields under
        # "move"; the act is the same either way.
        if isinstance(data, dict) and isinstance(data.get("move"), dict):
            flat = {k: v for k, v in data.items() if k != "move"}
            flat.update(data["move"])
            return flat
        return data

    act: str
    """One of the 14 act names."""
    target: str
    """``o<n>`` (option), ``t<n>`` (tension) or ``a<n>`` (earlier act)."""
    text: str
    """The substance of the act."""
    option: str | None = None
    """Text of the new option (``propose``, ``spawn``) or of the amendment (``extend``)."""
    blocking: bool = False
    """``challenge`` only: the objection blocks convergence on its target while open."""
    resolves: bool = False
    """``update``/``bridge`` on a tension: the speaker considers the tension settled."""
    scores: dict[str, StrictFloat] | None = None
    """``recommend`` only: a score in [0, 1] for every live option (a JSON number:
    ``true`` or ``"0.1"`` is not one)."""
    confidence: StrictFloat | None = Field(default=None, ge=0.0, le=1.0)
    """Self-reported confidence in [0, 1] (a JSON number)."""
    evidence: list[str] = Field(default_factory=list)
    """Evidence items cited (``ground``, ``recommend``, ``synthesize``)."""
    reopen_conditions: list[str] = Field(default_factory=list)
    """``synthesize`` only: observable conditions under which the decision is reopened."""
    next_actions: list[str] = Field(default_factory=list)
    """``synthesize`` only: concrete next steps."""


def canonical_target(raw: RawAct) -> RawAct:
    """``raw`` with its target written as the id :func:`parse_target` reads in it.

    Validation reads a target after stripping surrounding whitespace, so ``"o1 "`` is
    checked as ``o1``; every later use of the act (the log, the tension it opens, the
    option it extends, the tension it answers) must key on that same id, or an act that
    passed validation as ``o1`` would act on nothing. A target that is not an id is
    returned unchanged (validation refuses it).
    """
    parsed = parse_target(raw.target)
    if parsed is None or parsed[1] == raw.target:
        return raw
    return raw.model_copy(update={"target": parsed[1]})


def check_act(
    raw: RawAct,
    *,
    allowed: frozenset[str],
    known_targets: frozenset[str],
    live_options: frozenset[str] = frozenset(),
) -> list[str]:
    """Every problem with ``raw`` in this stage; an empty list means the act is valid.

    ``allowed`` are the act names the stage admits, ``known_targets`` every id that
    exists in the workspace, ``live_options`` the options a ``recommend`` must score.
    """
    spec = ACTS.get(raw.act)
    if spec is None:
        return [f"unknown act {quote_short(raw.act)}; use one of {', '.join(sorted(allowed))}"]
    problems: list[str] = []
    if raw.act not in allowed:
        problems.append(
            f"act {quote_short(raw.act)} is not allowed in this stage; use one of {', '.join(sorted(allowed))}"
        )
    parsed = parse_target(raw.target)
    if parsed is None:
        problems.append(f"target {quote_short(raw.target)} is not an id like o1, t1 or a1")
    else:
        kind, ident = parsed
        if kind not in spec.targets:
            kinds = ", ".join(sorted(k.value for k in spec.targets))
            problems.append(f"act {raw.act!r} cannot target a {kind.value}; it targets: {kinds}")
        elif ident not in known_targets:
            problems.append(f"target {quote_short(ident)} does not exist")
    if not raw.text.strip():
        problems.append("text must not be empty")
    unencodable = _unencodable(raw)
    if unencodable:
        problems.append(
            f"{unencodable} holds a lone surrogate (a \\ud800-\\udfff escape on its own), "
            "which no UTF-8 text can carry"
        )
    if spec.needs_option_text and not (raw.option or "").strip():
        problems.append(f"act {raw.act!r} must give the option text in 'option'")
    if raw.blocking and raw.act != "challenge":
        problems.append("only a challenge can be blocking")
    if raw.act == "recommend":
        problems.extend(_check_scores(raw, live_options))
    elif raw.scores:
        problems.append("only a recommend act carries scores")
    return problems


_SURROGATE = re.compile("[\ud800-\udfff]")
"""A lone surrogate: a JSON escape (``"\\ud800"``) names one, no UTF-8 text can hold one."""


def _unencodable(raw: RawAct) -> str | None:
    """The first field of ``raw`` whose text holds a lone surrogate, if any."""
    texts: list[tuple[str, str | None]] = [
        ("act", raw.act),
        ("target", raw.target),
        ("text", raw.text),
        ("option", raw.option),
    ]
    for name in ("evidence", "reopen_conditions", "next_actions"):
        texts.extend((f"{name}.{i}", item) for i, item in enumerate(getattr(raw, name)))
    texts.extend((f"scores key {i}", key) for i, key in enumerate(raw.scores or {}))
    return next((name for name, value in texts if value and _SURROGATE.search(value)), None)


_IDS_SHOWN = 8
"""Most option ids a problem lists (the model writes the keys of its scores)."""


def _ids(ids: list[str]) -> str:
    """``ids`` for a problem: each quoted short if it is not an id, at most
    :data:`_IDS_SHOWN` of them and how many more."""
    shown = [i if parse_target(i) == (TargetKind.OPTION, i) else quote_short(i) for i in ids]
    more = f" and {len(ids) - _IDS_SHOWN} more" if len(ids) > _IDS_SHOWN else ""
    return ", ".join(shown[:_IDS_SHOWN]) + more


def _check_scores(raw: RawAct, live_options: frozenset[str]) -> list[str]:
    problems: list[str] = []
    scores = raw.scores or {}
    missing = sorted(live_options - scores.keys())
    extra = sorted(scores.keys() - live_options)
    if missing:
        problems.append(f"scores missing for {', '.join(missing)}")
    if extra:
        problems.append(f"scores given for options that are not live: {_ids(extra)}")
    bad = sorted(k for k, v in scores.items() if not 0.0 <= v <= 1.0)
    if bad:
        problems.append(f"scores must lie in [0, 1]: {_ids(bad)}")
    parsed = parse_target(raw.target)
    if parsed is not None and parsed[0] is TargetKind.OPTION and parsed[1] not in live_options:
        problems.append(f"recommend must target a live option, not {quote_short(parsed[1])}")
    return problems


def _string(*, nonblank: bool = False) -> JsonSchema:
    return {"type": "string", "pattern": "\\S"} if nonblank else {"type": "string"}


_STRINGS: JsonSchema = {"type": "array", "items": {"type": "string"}}


def act_schema(
    allowed: Iterable[str],
    *,
    known_targets: Iterable[str],
    live_options: Iterable[str] = (),
    required_target: str | None = None,
) -> JsonSchema | None:
    """The JSON schema of one valid act in this request; ``None`` when no act can be valid.

    Built per request from what the flow knows, so that an answer that follows it is a
    valid act: ``move`` is one of the allowed acts, each with a ``target`` enum of the
    ids that act may point at now (a ``recommend`` targets a live option and scores
    exactly the live options, each in [0, 1]); option text is required (non-blank)
    where the act creates an option; only a ``challenge`` says ``blocking`` and only an
    ``update``/``bridge`` says ``resolves``. The schema is valid for OpenAI strict mode:
    every object closed, every property required, nullable fields as type unions, and
    the root an object (the choice of act is the ``anyOf`` under ``move``).
    """
    by_kind: dict[TargetKind, list[tuple[int, str]]] = {kind: [] for kind in TargetKind}
    for ident in set(known_targets):
        parsed = parse_target(ident)
        if parsed is not None:
            by_kind[parsed[0]].append((int(parsed[1][1:]), parsed[1]))
    ordered = {kind: [t for _, t in sorted(ids)] for kind, ids in by_kind.items()}
    live = [o for o in dict.fromkeys(live_options) if parse_target(o) is not None]
    branches: list[JsonSchema] = []
    for name in sorted(set(allowed)):
        spec = ACTS.get(name)
        if spec is None:
            continue
        if name == "recommend":
            targets = list(live)
        else:
            # options, then tensions, then acts, each in numeric order
            targets = [t for kind in TargetKind if kind in spec.targets for t in ordered[kind]]
        if required_target is not None:
            targets = [t for t in targets if t == required_target]
        if not targets or (name == "recommend" and not live):
            continue
        props: JsonSchema = {
            "act": {"type": "string", "enum": [name]},
            "target": {"type": "string", "enum": targets},
        }
        if spec.needs_option_text:
            props["option"] = _string(nonblank=True)
        elif name == "extend":
            props["option"] = {"type": ["string", "null"]}
        if name == "challenge":
            props["blocking"] = {"type": "boolean"}
        if name in ("update", "bridge"):
            props["resolves"] = {"type": "boolean"}
        if name == "recommend":
            props["scores"] = {
                "type": "object",
                "properties": {o: {"type": "number", "minimum": 0.0, "maximum": 1.0} for o in live},
                "required": list(live),
                "additionalProperties": False,
            }
        branches.append(
            {
                "type": "object",
                "properties": props,
                "required": list(props),
                "additionalProperties": False,
            }
        )
    if not branches:
        return None
    root: JsonSchema = {
        "move": {"anyOf": branches},
        "text": _string(nonblank=True),
        "confidence": {"type": ["number", "null"], "minimum": 0.0, "maximum": 1.0},
        "evidence": _STRINGS,
        "reopen_conditions": _STRINGS,
        "next_actions": _STRINGS,
    }
    return {
        "type": "object",
        "properties": root,
        "required": list(root),
        "additionalProperties": False,
    }
