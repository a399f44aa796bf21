"""Shared pydantic models: the words every part of dissensus speaks.

This module imports nothing from the package; everything may import it.

Choices this module makes:

* A decision is any categorical label (so are a panel's or a case's ``id``, a vote's
  ``answer``, a case's ``gold`` and a panel's ``meta.gold``, read by :func:`gold_label`).
  JSON numbers and booleans are accepted and turned into their string form
  (:func:`normalise_label`) so that a panel written by another program reads the same
  way whatever its label type: ``1`` -> ``"1"``, ``true`` -> ``"true"``, an integral
  float ``1.0`` -> ``"1"`` (as the integer it equals), any other finite float its
  shortest round-trip form ``1.5`` -> ``"1.5"``, ``1e-07`` -> ``"1e-07"`` (Python's
  ``repr``). A non-finite number is refused.
* An error names a field by its path (:func:`field_path`), each key cut to
  :data:`FIELD_SEGMENT_CHARS` characters ending with ``…``, so that every door names a
  field the same way and none echoes a huge key whole.
* ``decision: null`` is an *abstention*: the agent spoke (its reasoning still counts
  for similarity) but cast no vote. LLMBar judges that gave no usable verdict are
  represented this way.
* A panel needs at least two agents and distinct agent ids; confidence, when given,
  lies in [0, 1].
* An agent id, a decision (a re-ask's too) and a family are one line of text without a
  control character (category Cc: U+0000 to U+001F, tab and newline included, and
  U+007F to U+009F): labels and names that show on a screen and are typed back by a
  reviewer, who may not resolve a case with a control character (a NUL shows as nothing
  on a terminal and becomes U+FFFD in a web page). Reasoning and ``meta`` may hold any
  text (reasoning keeps its line breaks).
* Reasoning may be empty: real judges sometimes return a verdict with no text. Such an
  agent has no reasoning vector; the reading leaves it out of the similarity and names
  it in ``missing_reasoning`` (see :mod:`dissensus.states.reading`).
* Every number anywhere in a panel or a vote case (values, confidence, metadata, extra
  fields) must be finite: NaN and infinities cannot be journalled as JSON nor compared.
  Every string must be encodable as UTF-8 (a lone surrogate such as ``"\\ud800"`` is
  refused). Both are checked by the models, so every reader and every Python caller
  gets the same rejects. A value holding several is refused naming the first in
  document order (``NaN``, ``Infinity`` and ``1e400`` in ``w``, ``x``, ``y``: ``w``).
* Booleans are strict: ``"yes"``, ``1`` or ``"true"`` are not booleans.
* Numbers are strict too: ``confidence`` and the weights of ``values`` are JSON numbers
  (an integer is taken as the float it equals); a string such as ``"0.5"`` or a
  boolean is a value of the wrong type, refused.
* :data:`JsonObject` and :data:`JsonSchema` name the places where a JSON object passes
  through untouched; every structure one module hands another is a model.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Protocol, TypeAlias, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    Strict,
    ValidationInfo,
    field_validator,
    model_validator,
)

__all__ = [
    "FIELD_SEGMENT_CHARS",
    "AcceptanceFigures",
    "AgentOutput",
    "Evidence",
    "JsonObject",
    "JsonSchema",
    "OutputLike",
    "Panel",
    "PanelLike",
    "Reask",
    "Usage",
    "Vote",
    "VoteCase",
    "field_path",
    "field_segment",
    "find_unrepresentable",
    "gold_label",
    "lone_surrogate",
    "lone_surrogate_at",
    "normalise_label",
    "trusted",
    "unrepresentable_at",
    "unrepresentable_field",
]


JsonObject: TypeAlias = dict[str, Any]
"""A JSON object passed through untouched, never read by string keys where it passes:
an event's payload, a panel's ``meta``, a provider's request or response body, or a
file's content on its way to the module whose model validates it."""

JsonSchema: TypeAlias = dict[str, Any]
"""A JSON Schema document, built here and sent to a model (or checked) as it is."""

_Number: TypeAlias = Annotated[float, Strict()]
"""A JSON number (an int is taken as the float it equals); never a string or a boolean."""


def normalise_label(value: object) -> object:
    """Normalise a categorical label to ``str`` (``None`` stays ``None``; a value that is
    not a label, such as a list, is returned as it is for the caller to refuse)."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float) and math.isfinite(value):
        return str(int(value)) if value.is_integer() else repr(value)
    return value


_label = normalise_label


def gold_label(meta: Mapping[str, Any]) -> str | None:
    """A panel's gold decision, ``meta.gold``, read as a decision is (the label rule
    above: ``2.0`` -> ``"2"``, ``true`` -> ``"true"``); ``None`` when it is absent or null.

    Every reader of ``meta.gold`` goes through here, so that a gold matches the decision
    it names whatever JSON type the two were written with. A :class:`ValueError` saying
    why when the value is not a label: a list, an object, an empty string or one of
    whitespace only (blank: it names no decision), a string holding a control character
    (no decision may hold one), a non-finite number.
    """
    value = _label(meta.get("gold"))
    if isinstance(value, str) and value.strip() and (found := _CONTROL.search(value)):
        raise ValueError(
            f"the gold decision holds the control character U+{ord(found.group()):04X}, "
            "which no decision may hold"
        )
    if value is None or (isinstance(value, str) and value.strip()):
        return value
    if value == "":
        raise ValueError("the gold decision is an empty string")
    if isinstance(value, str):
        raise ValueError(f"the gold decision is blank ({value!r}: whitespace only)")
    if isinstance(value, float):
        raise ValueError(f"the gold decision must be a finite number (got {value!r})")
    kind = (
        "an object"
        if isinstance(value, dict)
        else "a list"
        if isinstance(value, list)
        else f"a {type(value).__name__}"
    )
    raise ValueError(f"the gold decision is {kind}, not a label (a string, number or boolean)")


_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")
"""The control characters (Unicode category Cc)."""


def option_id_problem(meta: Mapping[str, Any]) -> tuple[str, str] | None:
    """``(field, message)`` when an option id of ``meta.options`` holds a control
    character (an id is a decision a reviewer or a re-ask may pick, and no decision may
    hold one), else ``None``. The ids as the pipeline reads them: a list item's ``id``
    (or the item itself), a mapping's keys."""
    raw = meta.get("options")
    ids: list[tuple[str, object]]
    if isinstance(raw, list):
        ids = [
            (f"meta.options.{i}.id", item.get("id")) if isinstance(item, Mapping) else
            (f"meta.options.{i}", item)
            for i, item in enumerate(raw)
        ]  # fmt: skip
    elif isinstance(raw, Mapping):
        ids = [(f"meta.options.{key}", key) for key in raw]
    else:
        return None
    for field, value in ids:
        if isinstance(value, str) and (found := _CONTROL.search(value)) is not None:
            return field, (
                f"the option id holds the control character U+{ord(found.group()):04X}; "
                "an option id is one line without control characters, as a decision is"
            )
    return None


def _one_line(value: str | None, info: ValidationInfo) -> str | None:
    """Field validator of a label or a name (an agent id, a decision, a family): no
    control character, tab and newline included."""
    if value is not None and (found := _CONTROL.search(value)) is not None:
        raise ValueError(
            f"{info.field_name} holds the control character U+{ord(found.group()):04X}; "
            "an agent id, a decision or a family is one line without control characters"
        )
    return value


def _confidence(value: float | None) -> float | None:
    if value is None:
        return None
    if math.isnan(value) or not 0.0 <= value <= 1.0:
        raise ValueError("confidence must lie in [0, 1]")
    return value


def lone_surrogate_at(text: str) -> int | None:
    """The index of the first lone surrogate in ``text`` (a code point U+D800 to U+DFFF:
    a ``"\\ud83d"`` JSON escape, or a byte ``surrogateescape`` could not decode), which no
    UTF-8 can encode, or None. The one test of every reader that refuses such text; it
    runs in C (``isascii`` first), so it costs nothing on text without one."""
    if text.isascii():
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return exc.start
    return None


def lone_surrogate(text: str) -> str | None:
    """Why ``text`` is not Unicode text (``not valid Unicode text: a lone surrogate
    (U+D83D) at character 13``, counted from 1), or None: the one wording of every
    refusal of such text, which each caller prefixes with the field it names."""
    at = lone_surrogate_at(text)
    if at is None:
        return None
    return f"not valid Unicode text: a lone surrogate (U+{ord(text[at]):04X}) at character {at + 1}"


FIELD_SEGMENT_CHARS = 64
"""The most characters of one key (or other text taken from the input) an error's field
path or message shows; a longer one is cut and ends with ``…``."""


_SURROGATE = re.compile("[\ud800-\udfff]")


def field_segment(part: object) -> str:
    """One segment of a field path (a key, an index) as an error shows it: at most
    :data:`FIELD_SEGMENT_CHARS` characters, a longer one cut with ``…``, and a lone
    surrogate written as its escape (``\\ud800``). A field is named to point at the
    value, not to echo the input: a million-character key made a megabyte error, and a
    key holding a lone surrogate an error no door could write (UTF-8 has no form for
    it: the service answered a key written twice so with a 500)."""
    text = str(part)
    if len(text) > FIELD_SEGMENT_CHARS:
        text = text[: FIELD_SEGMENT_CHARS - 1] + "\u2026"
    if text.isascii():
        return text
    return _SURROGATE.sub(lambda found: f"\\u{ord(found.group()):04x}", text)


def field_path(parts: Sequence[object]) -> str:
    """A dotted field path (``meta.weight``, ``outputs.0.decision``) of ``parts``, each
    cut by :func:`field_segment`; empty for no parts. Every door names a field with it,
    the command line's reader and the service alike."""
    return ".".join(field_segment(p) for p in parts)


def _bad_scalar(value: object) -> str | None:
    """Why ``value`` cannot be carried (non-finite float, string that is not UTF-8, a
    value JSON has no form for, such as bytes), or None."""
    if isinstance(value, float):
        if not math.isfinite(value):
            return f"must be a finite number (got {value!r})"
    elif isinstance(value, str):
        return lone_surrogate(value)
    elif not (value is None or isinstance(value, int)):  # bool is an int
        return f"is not a JSON value (a {type(value).__name__})"
    return None


_STRICT = json.JSONEncoder(allow_nan=False, ensure_ascii=False, check_circular=False)


def find_unrepresentable(value: object, where: str = "") -> str | None:
    """``"path: why"`` of the first non-finite number or non-UTF-8 string inside ``value``
    (first in document order: the order of a parsed line's keys and items).

    Walks dicts and lists iteratively (deep nesting cannot overflow the stack); returns
    None when everything inside is representable as JSON text in UTF-8.

    Values that JSON encodes strictly (no ``NaN``/``Infinity``, UTF-8 encodable) are
    answered by the C encoder without the walk: the same verdict, since the encoder
    refuses every non-finite number and the UTF-8 codec every lone surrogate; anything
    the encoder refuses (including types it does not know) is walked for the path.
    """
    if _encodes_strictly(value):
        return None
    return _walk(value, where)


def unrepresentable_field(value: object) -> tuple[str, str] | None:
    """What :func:`find_unrepresentable` reports as ``(field, why)``: the field path
    (``<root>`` for the value itself, or for a key of the outer object) and the reason
    (``key not valid Unicode text: ...`` for a bad key, named by the object holding it).
    Split from the ``"path: why"`` text, a bad key of the outer object, which has no
    path, named the field ``key not valid Unicode text``."""
    found = unrepresentable_at(value)
    if found is None:
        return None
    parts, why = found
    return field_path(parts) or "<root>", why


def unrepresentable_at(value: object) -> tuple[tuple[object, ...], str] | None:
    """What :func:`find_unrepresentable` reports, its path as the keys and indexes
    themselves (``("a.b",)`` is one key holding a dot, never two), uncut; the reason
    starts ``key ...`` for a bad key."""
    if _encodes_strictly(value):
        return None
    return _walk_parts(value)


def _encodes_strictly(value: object) -> bool:
    """Whether ``value``, a dict or a list, is JSON text in UTF-8 as the C encoder writes
    it strictly (the fast answer; anything it refuses is walked for the path)."""
    if not isinstance(value, dict | list):
        return False
    try:
        _STRICT.encode(value).encode("utf-8")
    except (ValueError, TypeError, UnicodeEncodeError, RecursionError):
        return False
    return True


def _walk(value: object, where: str) -> str | None:
    """:func:`_walk_parts`'s finding as ``"path: why"``, the path dotted after ``where``."""
    found = _walk_parts(value)
    if found is None:
        return None
    parts, why = found
    shown = field_path(parts)
    path = (f"{where}.{shown}" if where else shown) if parts else where
    return f"{path}: {why}" if path else why


def _walk_parts(value: object) -> tuple[tuple[object, ...], str] | None:
    """The first bad key or scalar in document order: a key before its value, a value
    before the keys and values after it (the stack holds them reversed, so the one
    popped next is the next written)."""
    stack: list[tuple[tuple[object, ...], object, bool]] = [((), value, False)]
    while stack:
        path, item, is_key = stack.pop()
        if is_key:
            if why := _bad_scalar(item):
                return path, f"key {why}"
        elif isinstance(item, dict):
            entries: list[tuple[tuple[object, ...], object, bool]] = []
            for key, sub in item.items():
                if isinstance(key, str):
                    entries.append((path, key, True))
                entries.append(((*path, key), sub, False))
            stack.extend(reversed(entries))
        elif isinstance(item, list | tuple):
            stack.extend(((*path, i), item[i], False) for i in range(len(item) - 1, -1, -1))
        elif why := _bad_scalar(item):
            return path, why
    return None


def _representable(value: Any) -> Any:
    """Field validator: refuse non-finite numbers and non-UTF-8 text anywhere inside."""
    if value is None:
        return value
    # A string (the common case) is checked without the walk: the same verdict.
    why = _bad_scalar(value) if value.__class__ is str else find_unrepresentable(value)
    if why is not None:
        raise ValueError(why)
    return value


def _extras_representable(model: BaseModel) -> None:
    extra = model.model_extra
    if extra and (why := find_unrepresentable(extra)) is not None:
        raise ValueError(why)


def _check_unique(agents: list[str]) -> None:
    seen: set[str] = set()
    for agent in agents:
        if agent in seen:
            raise ValueError(f"duplicate agent id {agent!r}")
        seen.add(agent)


class Evidence(BaseModel):
    """One piece of evidence an agent consulted (provenance for the guard)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    source: str = Field(min_length=1)
    """Provenance token: an index id, a corpus id, a tool name, or ``parametric``."""
    present: bool = Field(default=True, strict=True)
    """Whether the source actually held supporting evidence for this case."""

    _utf8 = field_validator("source")(_representable)


class Reask(BaseModel):
    """The agent's answer to the same question asked again under a perturbation."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    decision: str | None = Field(default=None, min_length=1)
    """The answer, in the case's own option ids; ``None`` is an abstention."""
    reasoning: str | None = None
    """The re-asked reasoning trace, when there is one."""
    perturbation: str | None = None
    """What changed, e.g. ``swap_order`` (options in the other order) or ``add_context``."""

    _norm_decision = field_validator("decision", mode="before")(_label)
    _one_line = field_validator("decision")(_one_line)


class AgentOutput(BaseModel):
    """``O_i = <r_i, d_i, v_i, gamma_i>`` of ``docs/states.md``, plus evidence provenance."""

    model_config = ConfigDict(extra="allow", frozen=True)

    agent: str = Field(min_length=1)
    """Agent id, unique within a panel."""
    decision: str | None = Field(min_length=1)
    """The agent's categorical decision; ``None`` is an abstention (never ``""``)."""
    reasoning: str
    """The agent's reasoning trace (may be empty: the agent then has no reasoning vector)."""
    values: dict[str, _Number] | None = None
    """Value profile: named weights, e.g. ``{"safety": 0.8, "expression": 0.2}``."""
    confidence: _Number | None = None
    """Self-reported confidence in [0, 1]."""
    evidence: list[Evidence] | None = None
    """Evidence the agent consulted, with whether it was present."""
    family: str | None = None
    """Model family (e.g. ``openai``), used by the guard to spot shared causes."""
    reask: Reask | None = None
    """The agent's recorded answer to a perturbed re-ask (the pipeline's follow-up)."""

    _norm_decision = field_validator("decision", mode="before")(_label)
    _utf8 = field_validator("agent", "decision", "reasoning", "family")(_representable)
    _one_line = field_validator("agent", "decision", "family")(_one_line)
    _finite_values = field_validator("values")(_representable)

    @model_validator(mode="after")
    def _check_extras(self) -> AgentOutput:
        _extras_representable(self)
        return self

    @field_validator("confidence")
    @classmethod
    def _check_confidence(cls, value: float | None) -> float | None:
        return _confidence(value)


class Panel(BaseModel):
    """One case: a panel of agents has spoken on it."""

    model_config = ConfigDict(extra="allow", frozen=True)

    id: str
    """Case id (numbers are accepted and kept as strings)."""
    meta: JsonObject = Field(default_factory=dict)
    """Case metadata, visible to routing rules as ``meta.<key>``."""
    outputs: list[AgentOutput]
    """What each agent said; at least two agents with distinct ids."""

    _norm_id = field_validator("id", mode="before")(_label)
    _utf8 = field_validator("id", "meta")(_representable)

    @model_validator(mode="after")
    def _check_extras(self) -> Panel:
        _extras_representable(self)
        return self

    @field_validator("outputs")
    @classmethod
    def _check_outputs(cls, value: list[AgentOutput]) -> list[AgentOutput]:
        # A field validator, so that rejects name the field ``outputs``.
        if len(value) < 2:
            raise ValueError(f"a panel needs at least two agents (got {len(value)})")
        _check_unique([out.agent for out in value])
        return value


class OutputLike(Protocol):
    """What reading a panel needs of one agent's output: :class:`AgentOutput`, or a
    read-only view of one (:class:`dissensus.io.views.OutputView`)."""

    @property
    def agent(self) -> str: ...
    @property
    def decision(self) -> str | None: ...
    @property
    def reasoning(self) -> str: ...
    @property
    def values(self) -> Mapping[str, float] | None: ...


class PanelLike(Protocol):
    """What reading and routing need of a panel: :class:`Panel`, or a read-only view of
    one (:class:`dissensus.io.views.PanelView`)."""

    @property
    def id(self) -> str: ...
    @property
    def meta(self) -> Mapping[str, Any]: ...
    @property
    def outputs(self) -> Sequence[OutputLike]: ...


class Vote(BaseModel):
    """One vote with provenance (``docs/guard.md``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    agent: str = Field(min_length=1)
    answer: str = Field(min_length=1)
    evidence_source: str = Field(min_length=1)
    """Provenance token: index id, corpus id, or ``parametric``."""
    evidence_present: bool = Field(strict=True)
    confidence: _Number | None = None
    family: str | None = None
    """Model family; voters of one family share a latent cause."""

    _norm_answer = field_validator("answer", mode="before")(_label)
    _utf8 = field_validator("agent", "answer", "evidence_source", "family")(_representable)
    _one_line = field_validator("agent", "answer", "family")(_one_line)

    @field_validator("confidence")
    @classmethod
    def _check_confidence(cls, value: float | None) -> float | None:
        return _confidence(value)


class VoteCase(BaseModel):
    """One case of the guard's input: votes, and the gold answer when labelled."""

    model_config = ConfigDict(extra="allow", frozen=True)

    id: str
    votes: list[Vote]
    gold: str | None = None
    meta: JsonObject = Field(default_factory=dict)

    _norm_id = field_validator("id", mode="before")(_label)
    _norm_gold = field_validator("gold", mode="before")(_label)
    _utf8 = field_validator("id", "gold", "meta")(_representable)
    _one_line = field_validator("gold")(_one_line)

    @model_validator(mode="after")
    def _check_extras(self) -> VoteCase:
        _extras_representable(self)
        return self

    @field_validator("votes")
    @classmethod
    def _check_votes(cls, value: list[Vote]) -> list[Vote]:
        # A field validator, so that rejects name the field ``votes``.
        if len(value) < 2:
            raise ValueError(f"a case needs at least two voters (got {len(value)})")
        _check_unique([v.agent for v in value])
        return value


class Usage(BaseModel):
    """Model usage, summed over calls. Every attempt counts, retries included."""

    model_config = ConfigDict(extra="forbid")

    calls: int = 0
    """Logical calls (one per request the caller made)."""
    attempts: int = 0
    """HTTP / backend attempts, retries and re-asks included."""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float = 0.0
    """Estimated cost in the currency of the configured price table (0 when unknown)."""

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: Usage) -> Usage:
        """The usage of both (a new object)."""
        return Usage(
            calls=self.calls + other.calls,
            attempts=self.attempts + other.attempts,
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
            cost=self.cost + other.cost,
        )

    def __sub__(self, other: Usage) -> Usage:
        """The usage since ``other`` was taken, when ``other`` is an earlier snapshot."""
        return Usage(
            calls=self.calls - other.calls,
            attempts=self.attempts - other.attempts,
            prompt_tokens=self.prompt_tokens - other.prompt_tokens,
            completion_tokens=self.completion_tokens - other.completion_tokens,
            cost=self.cost - other.cost,
        )

    def add(self, other: Usage) -> None:
        """Add ``other`` into this usage in place."""
        if self.__class__ is not Usage:
            self.calls += other.calls
            self.attempts += other.attempts
            self.prompt_tokens += other.prompt_tokens
            self.completion_tokens += other.completion_tokens
            self.cost += other.cost
            return
        # What assigning each field does on this model (no validation on assignment):
        # the new value in the instance's dict, the field counted as set.
        mine, theirs = self.__dict__, other.__dict__
        for name in _USAGE_FIELDS:
            mine[name] = mine[name] + theirs[name]
        self.__pydantic_fields_set__.update(_USAGE_FIELDS)


_USAGE_FIELDS = ("calls", "attempts", "prompt_tokens", "completion_tokens", "cost")


class AcceptanceFigures(BaseModel):
    """What a record decided by learned acceptance quotes of the acceptance that judged it
    (the verdict of :func:`dissensus.acceptance.apply_acceptance` extends it)."""

    model_config = ConfigDict(frozen=True)

    family: str = "learned"
    """The score family of the acceptance file (:mod:`dissensus.acceptance.families`)."""
    score: float
    """The best answer's score in that family (``learned``: its probability of being right)."""
    threshold: float | None
    """Accept when ``score >= threshold``; ``None``: the file accepts nothing."""
    target_precision: float
    delta: float
    calibration_n: int
    file_sha256: str


M = TypeVar("M", bound=BaseModel)

_FIELDS: dict[type[BaseModel], frozenset[str]] = {}


# ``values`` are a model's field values by name (already valid), not JSON.
def trusted(cls: type[M], values: dict[str, Any]) -> M:
    """An instance of ``cls`` holding ``values`` (every field, already valid), built
    without validation (hot paths: a reading, a route, a panel's votes).

    It sets the instance state directly, as ``model_construct`` does, but without its
    per-field default handling. Use it only with a value for every field, each already of
    the field's type; anything read from outside goes through validation.
    """
    fields = _FIELDS.get(cls)
    if fields is None:
        fields = _FIELDS[cls] = frozenset(cls.model_fields)
    obj = _new(cls)
    _setattr(obj, "__dict__", values)
    _set_fields_set(obj, set(fields))
    _set_extra(obj, None)
    _set_private(obj, None)
    return obj


_new = object.__new__  # BaseModel defines no __new__
_setattr = object.__setattr__
# BaseModel's slots, set through their descriptors (no attribute lookup per call).
_set_fields_set = BaseModel.__dict__["__pydantic_fields_set__"].__set__
_set_extra = BaseModel.__dict__["__pydantic_extra__"].__set__
_set_private = BaseModel.__dict__["__pydantic_private__"].__set__
