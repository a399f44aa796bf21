"""JSON schemas for structured output: OpenAI strict-mode checks and a schema filler.

Protocols build a response schema per request (DCI's acts, CONCORD's scores and
plans) so that a server that answers exactly the schema it is given (OpenAI strict
structured outputs, vLLM guided decoding, llama.cpp grammars) cannot produce an
unusable answer. :func:`strict_problems` checks a schema against OpenAI strict mode's
rules; the OpenAI backend sends ``strict: true`` only for schemas that pass.
:func:`fill_schema` answers a schema the way the dumbest schema-following server
would (first enum value, first ``anyOf`` branch, the minimum, a fixed string): the
loopback server uses it to prove that schema-true answers are enough.

Choices where nothing else decides:

* Strict mode's rules as checked here: the root is an object (not ``anyOf``); every
  object lists all its properties in ``required`` and sets ``additionalProperties:
  false``; nullable values are type unions (``["string", "null"]``); only the keywords
  in ``STRICT_KEYWORDS`` appear.
* The filler takes the first type of a union, the first ``anyOf`` branch, ``minimum``
  (else ``exclusiveMinimum`` + 1, else 0) for numbers, ``FILL_TEXT`` for strings,
  ``false`` for booleans and ``minItems`` copies of the item for arrays.
"""

from __future__ import annotations

from typing import Any

from dissensus.types import JsonSchema

__all__ = ["FILL_TEXT", "STRICT_KEYWORDS", "fill_schema", "is_strict", "strict_problems"]

FILL_TEXT = "x"
"""The string :func:`fill_schema` writes."""

STRICT_KEYWORDS = frozenset(
    {
        "type",
        "properties",
        "required",
        "additionalProperties",
        "items",
        "enum",
        "const",
        "anyOf",
        "$defs",
        "$ref",
        "description",
        "title",
        "pattern",
        "format",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
        "minItems",
        "maxItems",
    }
)
"""Keywords OpenAI strict mode accepts (as checked by :func:`strict_problems`)."""


def strict_problems(schema: JsonSchema) -> list[str]:
    """Every way ``schema`` breaks OpenAI strict mode's rules; empty when it is valid."""
    problems: list[str] = []
    if schema.get("type") != "object" or "anyOf" in schema:
        problems.append("(root): must be an object, not anyOf")
    _walk(schema, "(root)", problems)
    return problems


def is_strict(schema: JsonSchema) -> bool:
    """Whether ``schema`` meets OpenAI strict mode's rules."""
    return not strict_problems(schema)


def _walk(node: Any, where: str, problems: list[str]) -> None:
    if not isinstance(node, dict):
        problems.append(f"{where}: a schema must be an object")
        return
    for key in node:
        if key not in STRICT_KEYWORDS:
            problems.append(f"{where}: keyword {key!r} is not supported")
    types = node.get("type")
    is_object = types == "object" or (isinstance(types, list) and "object" in types)
    if is_object:
        props = node.get("properties")
        if not isinstance(props, dict):
            problems.append(f"{where}: an object needs properties")
            props = {}
        if node.get("additionalProperties") is not False:
            problems.append(f"{where}: additionalProperties must be false")
        if sorted(node.get("required") or []) != sorted(props):
            problems.append(f"{where}: every property must be required")
        for name, sub in props.items():
            _walk(sub, f"{where}.{name}", problems)
    if "items" in node:
        _walk(node["items"], f"{where}[]", problems)
    for i, branch in enumerate(node.get("anyOf") or []):
        _walk(branch, f"{where}|{i}", problems)
    for name, sub in (node.get("$defs") or {}).items():
        _walk(sub, f"$defs.{name}", problems)


def fill_schema(schema: JsonSchema, *, defs: JsonSchema | None = None) -> Any:
    """The value a schema-following server that always takes the first choice answers."""
    defs = defs if defs is not None else schema.get("$defs", {})
    if "$ref" in schema:
        name = str(schema["$ref"]).rsplit("/", 1)[-1]
        return fill_schema(defs[name], defs=defs)
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    if schema.get("anyOf"):
        return fill_schema(schema["anyOf"][0], defs=defs)
    kind = schema.get("type", "object")
    if isinstance(kind, list):
        kind = kind[0] if kind else "null"
    if kind == "object":
        props = schema.get("properties") or {}
        return {name: fill_schema(sub, defs=defs) for name, sub in props.items()}
    if kind == "array":
        item = schema.get("items") or {}
        return [fill_schema(item, defs=defs) for _ in range(int(schema.get("minItems", 0)))]
    if kind in ("number", "integer"):
        if "minimum" in schema:
            value = schema["minimum"]
        elif "exclusiveMinimum" in schema:
            value = schema["exclusiveMinimum"] + 1
        else:
            value = 0
        return int(value) if kind == "integer" else float(value)
    if kind == "string":
        return FILL_TEXT
    if kind == "boolean":
        return False
    return None
