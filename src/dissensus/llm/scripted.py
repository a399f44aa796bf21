"""Scripted model: deterministic answers from YAML rules (``scripted:FILE``).

A first-class offline model (like httpx's ``MockTransport``): protocols, tests and the
loopback server answer from the same rule file. Format::

    rules:
      - match: {agent: "security", role: "Challenger", stage: "dci.challenge",
                contains: "substring", regex: "...", schema: "Verdict"}
        response: "plain text"        # or
        json: {any: object}           # serialized as the response text, or
        responses: ["t1", {"k": 1}]   # cycled per agent in call order
    default: "fallback text"          # optional
    server: {...}                     # loopback-server settings, ignored here

Choices this module makes:

* Every ``match`` key is optional and all given keys must match; the first matching
  rule wins. ``contains`` is a substring test and ``regex`` a ``re.search`` over all
  message contents joined by newlines. ``schema`` (an addition) matches the name of the
  requested structured-output schema.
* ``responses`` items may be strings or JSON values (serialized like ``json``). The
  cycle position is kept per (rule, agent); a request without an agent uses the agent
  ``""``.
* An invalid rule file is a :class:`~dissensus.errors.ConfigError` naming the file,
  the field and the line it is written on (``field 'rules.0.match.regex': invalid
  regex: ... (line 3)``), as a policy file's errors are.
* ``default`` may be a string or a JSON value. No match and no default is a
  non-retryable failure of kind ``no_rule`` (surfacing as :class:`ModelCallError`).
* Token usage is ``estimate_tokens`` of the prompt and of the answer; an answer longer
  than the request's ``max_tokens`` is cut to it (finish reason ``length``), as a server
  stops at its cap, so a token budget's reservation is a real cap here too.
"""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from dissensus.errors import ConfigError
from dissensus.io.yamlfile import load_yaml_file, with_field_line
from dissensus.llm.base import (
    BackendError,
    BackendResponse,
    ChatRequest,
    JsonMode,
    capped,
    estimate_tokens,
)
from dissensus.types import JsonObject

__all__ = ["Match", "Rule", "ScriptedBackend", "ScriptedRules", "load_script"]


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


class Match(BaseModel):
    """Conditions of one rule; every given key must hold."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    agent: str | None = None
    role: str | None = None
    stage: str | None = None
    contains: str | None = None
    regex: str | None = None
    schema_: str | None = Field(default=None, alias="schema")

    @field_validator("regex")
    @classmethod
    def _compiles(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"invalid regex: {exc}") from exc
        return value

    def matches(self, request: ChatRequest, prompt: str) -> bool:
        """Whether ``request`` (with joined ``prompt``) satisfies every condition."""
        checks = (
            self.agent is None or self.agent == request.agent,
            self.role is None or self.role == request.role,
            self.stage is None or self.stage == request.stage,
            self.schema_ is None or self.schema_ == request.schema_name,
            self.contains is None or self.contains in prompt,
            self.regex is None or re.search(self.regex, prompt) is not None,
        )
        return all(checks)


class Rule(BaseModel):
    """One rule: a match and exactly one of ``response``, ``json``, ``responses``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    match: Match = Field(default_factory=Match)
    response: str | None = None
    json_: Any = Field(default=None, alias="json")
    responses: list[Any] | None = None

    @model_validator(mode="after")
    def _one_answer(self) -> Rule:
        given = [self.response is not None, self.json_ is not None, self.responses is not None]
        if sum(given) != 1:
            raise ValueError("a rule needs exactly one of 'response', 'json', 'responses'")
        if self.responses is not None and not self.responses:
            raise ValueError("'responses' must not be empty")
        return self


class ScriptedRules(BaseModel):
    """A rule file: ordered rules, an optional default, optional server settings."""

    model_config = ConfigDict(extra="forbid")

    rules: list[Rule] = Field(default_factory=list)
    default: Any = None
    server: JsonObject | None = None
    """Settings of the loopback server (latency, faults); see ``fakeserver``."""


def load_script(path: str | Path) -> ScriptedRules:
    """Read and validate a rule file; errors name the file and the field."""
    name = str(path)
    # The project's one YAML loader: safe, no duplicate keys, alias bombs refused.
    data = load_yaml_file(path, what="script")
    try:
        return parse_script(data, file=name)
    except ConfigError as exc:
        # Named by the line its field is written on, as a policy file's errors are.
        raise with_field_line(exc, name, None, what="script") from None


def validation_problem(exc: ValidationError) -> tuple[str | None, str]:
    """The first error of ``exc`` as (dotted field or None, message without pydantic's prefix)."""
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err["loc"])
    message = str(err["msg"])
    if message.startswith("Value error, "):
        message = message[len("Value error, ") :]
    return where or None, message


def parse_script(data: Any, *, file: str = "<script>") -> ScriptedRules:
    """Validate an already-loaded rule mapping."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(
            "a script must be a mapping with 'rules' and optional 'default'", file=file
        )
    try:
        return ScriptedRules.model_validate(data)
    except ValidationError as exc:
        where, message = validation_problem(exc)
        raise ConfigError(message, file=file, field=where) from exc


class Responder:
    """Answers requests from rules; keeps the per-(rule, agent) cycle positions."""

    def __init__(self, script: ScriptedRules, *, name: str = "script") -> None:
        self.script = script
        self.name = name
        self._positions: dict[tuple[int, str], int] = {}
        self._lock = threading.Lock()

    def answer(self, request: ChatRequest) -> str:
        """The answer text for ``request``; raises :class:`BackendError` (``no_rule``)."""
        prompt = request.prompt_text()
        for index, rule in enumerate(self.script.rules):
            if not rule.match.matches(request, prompt):
                continue
            if rule.response is not None:
                return rule.response
            if rule.responses is None:
                return _as_text(rule.json_)
            key = (index, request.agent or "")
            with self._lock:
                position = self._positions.get(key, 0)
                self._positions[key] = position + 1
            return _as_text(rule.responses[position % len(rule.responses)])
        if self.script.default is not None:
            return _as_text(self.script.default)
        raise BackendError(
            f"{self.name}: no rule matches (agent={request.agent!r}, role={request.role!r}, "
            f"stage={request.stage!r}) and there is no default",
            kind="no_rule",
            retryable=False,
        )


class ScriptedBackend:
    """Offline backend answering from a rule file."""

    provider = "dissensus.scripted"

    def __init__(self, script: ScriptedRules, *, name: str = "script") -> None:
        self._responder = Responder(script, name=name)
        self.model_id = f"scripted:{name}"

    @classmethod
    def from_file(cls, path: str | Path) -> ScriptedBackend:
        """Backend for the rule file at ``path``."""
        return cls(load_script(path), name=Path(path).name)

    @classmethod
    def from_dict(cls, data: JsonObject, *, name: str = "inline") -> ScriptedBackend:
        """Backend for rules given as a mapping (same shape as the YAML)."""
        return cls(parse_script(data, file=name), name=name)

    def __repr__(self) -> str:
        return f"ScriptedBackend(model_id={self.model_id!r})"

    async def send(self, request: ChatRequest, *, json_mode: JsonMode) -> BackendResponse:
        text, finish = capped(self._responder.answer(request), request.max_tokens)
        return BackendResponse(
            text=text,
            model=self.model_id,
            prompt_tokens=estimate_tokens(request.prompt_text()),
            completion_tokens=estimate_tokens(text),
            finish_reason=finish,
        )

    async def aclose(self) -> None:
        return None
