"""A native-only validator of panel lines: the first tier of the JSON fast path.

:func:`dissensus.io.jsonl.parse_line` validates a :class:`~dissensus.types.Panel` line
with :func:`validate_panel_json` first. Its schema is written directly in pydantic-core
terms and builds the very classes of :mod:`dissensus.types` (``Panel``,
``AgentOutput``, ``Evidence``, ``Reask``), with the same fields, defaults and extras,
but every check that the models make in Python is expressed as a native constraint, so
a five-agent panel is validated without a single Python call:

* labels (``id``, ``decision``): a JSON string is taken as it is; any other JSON value
  goes through the models' own ``_label`` normalisation (the only Python call, and only
  for non-string labels);
* confidence: a finite JSON number in [0, 1]; value profiles: finite JSON numbers
  (strict, as the models: an integer becomes a float, a string or a boolean is refused);
* ``meta`` and extra fields: any JSON value whose numbers are all finite (a recursive
  union of strict types, so integers stay integers, floats stay floats, as with
  ``json.loads``);
* text: JSON text cannot carry undecodable bytes or lone surrogates once ``parse_line``
  has refused lines with either (and the JSON parser refuses lone surrogate escapes), so
  strings need no UTF-8 check here;
* an agent id, a decision and a family without control characters: a ``pattern``;
* at least two agents: ``min_length``; distinct agent ids: checked by the caller
  (:func:`validate_panel_json` returns ``None`` when they repeat).

This tier only decides *acceptance*: whenever it fails, the line goes to the next tier
(``Panel.model_validate_json``) and then to the reference path, which words every
reject. It must accept exactly the lines the models accept, with the same values; the
property test ``tests/test_io_parse_fast.py`` checks this against the reference path,
and ``tests/test_io_wire.py`` checks that its fields are the models' fields.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError
from pydantic_core import SchemaValidator
from pydantic_core import core_schema as cs

from dissensus.types import AgentOutput, Evidence, Panel, Reask, _label

__all__ = ["WIRE_FIELDS", "validate_panel_json"]

_VALUE_REF = "dissensus-finite-json"

# A JSON value with finite numbers only. Strict members: a value matches exactly one
# type (integers come before floats so that ``1`` stays an int, as ``json.loads`` has it).
_FINITE_VALUE = cs.union_schema(
    [
        cs.str_schema(strict=True),
        cs.int_schema(strict=True),
        cs.float_schema(strict=True, allow_inf_nan=False),
        cs.bool_schema(strict=True),
        cs.none_schema(),
        cs.dict_schema(cs.str_schema(strict=True), cs.definition_reference_schema(_VALUE_REF)),
        cs.list_schema(cs.definition_reference_schema(_VALUE_REF)),
    ],
    mode="left_to_right",
    ref=_VALUE_REF,
)
_VALUE = cs.definition_reference_schema(_VALUE_REF)


_ONE_LINE = r"\A[^\x00-\x1f\x7f-\x9f]*\z"
"""An agent id, a decision or a family: no control character (the models' ``_one_line``)."""


def _label_schema(
    *, min_length: int | None, nullable: bool, pattern: str | None = None
) -> cs.CoreSchema:
    """A label: a JSON string as it is, anything else through ``_label`` (as the models)."""
    text = cs.str_schema(min_length=min_length, pattern=pattern)
    other: cs.CoreSchema = cs.no_info_before_validator_function(
        _label, cs.nullable_schema(text) if nullable else text
    )
    plain: cs.CoreSchema = cs.str_schema(strict=True, min_length=min_length, pattern=pattern)
    if nullable:
        plain = cs.nullable_schema(plain)
    return cs.union_schema([plain, other], mode="left_to_right")


def _field(schema: cs.CoreSchema, **default: Any) -> cs.ModelField:
    if default:
        schema = cs.with_default_schema(schema, **default)
    return cs.model_field(schema)


def _optional(schema: cs.CoreSchema) -> cs.ModelField:
    return _field(cs.nullable_schema(schema), default=None)


def _model(cls: type[Any], fields: dict[str, cs.ModelField], *, extra: str) -> cs.ModelSchema:
    extras = _VALUE if extra == "allow" else None
    return cs.model_schema(
        cls,
        cs.model_fields_schema(
            fields,
            model_name=cls.__name__,
            extra_behavior=extra,  # type: ignore[arg-type]
            extras_schema=extras,
        ),
        extra_behavior=extra,  # type: ignore[arg-type]
        config=cs.CoreConfig(title=cls.__name__, extra_fields_behavior=extra),  # type: ignore[typeddict-item]
    )


_EVIDENCE = _model(
    Evidence,
    {
        "source": _field(cs.str_schema(min_length=1)),
        "present": _field(cs.bool_schema(strict=True), default=True),
    },
    extra="forbid",
)
_REASK = _model(
    Reask,
    {
        "decision": _field(
            _label_schema(min_length=1, nullable=True, pattern=_ONE_LINE), default=None
        ),
        "reasoning": _optional(cs.str_schema()),
        "perturbation": _optional(cs.str_schema()),
    },
    extra="forbid",
)
_AGENT = _model(
    AgentOutput,
    {
        "agent": _field(cs.str_schema(min_length=1, pattern=_ONE_LINE)),
        "decision": _field(_label_schema(min_length=1, nullable=True, pattern=_ONE_LINE)),
        "reasoning": _field(cs.str_schema()),
        "values": _optional(
            cs.dict_schema(cs.str_schema(), cs.float_schema(strict=True, allow_inf_nan=False))
        ),
        "confidence": _optional(cs.float_schema(strict=True, ge=0.0, le=1.0, allow_inf_nan=False)),
        "evidence": _optional(cs.list_schema(_EVIDENCE)),
        "family": _optional(cs.str_schema(pattern=_ONE_LINE)),
        "reask": _optional(_REASK),
    },
    extra="allow",
)
_PANEL = _model(
    Panel,
    {
        "id": _field(_label_schema(min_length=None, nullable=False)),
        "meta": _field(cs.dict_schema(cs.str_schema(), _VALUE), default_factory=dict),
        "outputs": _field(cs.list_schema(_AGENT, min_length=2)),
    },
    extra="allow",
)

WIRE_FIELDS: dict[type[Any], frozenset[str]] = {
    cls: frozenset(schema["schema"]["fields"])
    for cls, schema in (
        (Panel, _PANEL),
        (AgentOutput, _AGENT),
        (Evidence, _EVIDENCE),
        (Reask, _REASK),
    )
}
"""The fields this tier validates, per model (a test checks they are the models' fields)."""

_VALIDATOR = SchemaValidator(cs.definitions_schema(_PANEL, [_FINITE_VALUE]))


def validate_panel_json(raw: str) -> Panel | None:
    """The panel on the JSON line ``raw``, or None when this tier does not accept it.

    ``raw`` must hold no undecodable bytes and no lone surrogate escape (``parse_line``
    checks both first). None says nothing about the line: the next tier decides.
    """
    try:
        panel: Panel = _VALIDATOR.validate_json(raw)
    except (ValidationError, ValueError, RecursionError):
        return None
    outputs = panel.outputs
    if len({o.agent for o in outputs}) != len(outputs):
        return None
    return panel
