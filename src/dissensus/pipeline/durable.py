"""Durable steps and journalled model calls: how a killed run resumes without repeating work.

Every step of a case is *memoised in the journal*: :meth:`CaseLog.step` returns the
stored payload when the step's key is already journalled and otherwise computes it,
appends it, and only then returns it. Every model call goes through
:class:`JournalledClient`, which journals the call's result under a deterministic
*call key* before the caller sees it; a resumed run finds the key and replays the
stored result instead of calling the model again.

Choices where the design is silent:

* Step keys are ``case/<line>/<step>``; call keys are
  ``call/<line>/<sha256 of the canonical request and schema name>/<k>``, ``k`` counting
  identical requests within the case (so two identical questions are two calls, and
  concurrent calls inside a case never depend on their completion order).
* A replayed call returns the stored text, the stored usage and the parsed object
  re-validated against the caller's schema; its usage counts again in the case's usage
  so that the final record does not depend on where the run was interrupted.
* The journalled request holds the messages, agent, role, stage and sampling settings:
  never client configuration, hence never an API key.
* The model client is created on first live call only, so a run whose follow-ups are
  all recorded (or replayed) needs no model at all.
* A call that fails (:class:`ModelCallError`, :class:`StructuredOutputError`) is not
  journalled, since a resumed run must try it again; it counts in the case's usage as
  one call with its attempts (its tokens are unknown here and count 0), so a failed
  deliberation does not report zero calls.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import BaseModel

from dissensus.llm.base import ChatRequest, ChatResponse, ModelCallError, StructuredOutputError
from dissensus.llm.client import ModelClient
from dissensus.store.canonical import canonical, sha256_text
from dissensus.store.journal import Journal
from dissensus.types import Usage

__all__ = ["CaseClient", "CaseLog", "JournalledClient"]

T = TypeVar("T")


class CaseLog:
    """The journal, seen from one case of one run."""

    def __init__(self, journal: Journal, run_id: str, line: int) -> None:
        self.journal = journal
        self.run_id = run_id
        self.line = line
        self.ref = str(line)

    def key(self, step: str) -> str:
        return f"case/{self.ref}/{step}"

    def stored(self, step: str) -> dict[str, Any] | None:
        event = self.journal.get(self.run_id, self.key(step))
        return None if event is None else event.payload

    def step(self, step: str, type: str, compute: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        """The journalled payload of ``step``, computing and appending it if missing."""
        found = self.stored(step)
        if found is not None:
            return found
        payload = compute()
        return self.journal.append(self.run_id, type, payload, key=self.key(step), case=self.ref).payload

    def append(self, step: str, type: str, payload: dict[str, Any]) -> dict[str, Any]:
        """Append ``payload`` under ``step`` (idempotent)."""
        return self.journal.append(self.run_id, type, payload, key=self.key(step), case=self.ref).payload


class JournalledClient:
    """Creates the run's model client lazily and hands out per-case journalled views."""

    def __init__(self, journal: Journal, run_id: str, factory: Callable[[], ModelClient]) -> None:
        self.journal = journal
        self.run_id = run_id
        self._factory = factory
        self._client: ModelClient | None = None

    @property
    def live(self) -> ModelClient:
        if self._client is None:
            self._client = self._factory()
        return self._client

    def for_case(self, log: CaseLog) -> CaseClient:
        return CaseClient(self, log)

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None


def _request_payload(request: ChatRequest) -> dict[str, Any]:
    return request.model_dump(mode="json")


class CaseClient:
    """The model client as one case sees it: every call journalled, replayed on resume.

    It has the part of :class:`~dissensus.llm.client.ModelClient`'s surface that
    protocols use (``chat`` and ``usage`` / ``usage_by_agent``).
    """

    def __init__(self, owner: JournalledClient, log: CaseLog) -> None:
        self._owner = owner
        self._log = log
        self._seen: Counter[str] = Counter()
        self.usage = Usage()
        self.usage_by_agent: dict[str, Usage] = {}
        self.calls: list[str] = []
        """Keys of the calls made (live or replayed), in call order."""

    def _key(self, request: ChatRequest, schema: type[BaseModel] | None) -> str:
        digest = sha256_text(canonical({"request": _request_payload(request), "schema": schema.__name__ if schema else None}))
        k = self._seen[digest]
        self._seen[digest] += 1
        return f"call/{self._log.ref}/{digest[:32]}/{k}"

    def _count(self, request: ChatRequest, usage: Usage) -> None:
        self.usage.add(usage)
        self.usage_by_agent.setdefault(request.agent or "-", Usage()).add(usage)

    async def chat(self, request: ChatRequest, *, schema: type[BaseModel] | None = None) -> ChatResponse:
        key = self._key(request, schema)
        self.calls.append(key)
        journal = self._owner.journal
        event = journal.get(self._owner.run_id, key)
        if event is not None:
            response = self._replay(event.payload, schema)
        else:
            try:
                response = await self._owner.live.chat(request, schema=schema)
            except (ModelCallError, StructuredOutputError) as exc:
                self._count(request, Usage(calls=1, attempts=max(1, len(exc.attempts))))
                raise
            journal.append(
                self._owner.run_id,
                "model.call",
                {
                    "request": _request_payload(request),
                    "schema": schema.__name__ if schema else None,
                    "text": response.text,
                    "parsed": _parsed_payload(response.parsed),
                    "model": response.model,
                    "attempts": response.attempts,
                    "usage": response.usage.model_dump(mode="json"),
                },
                key=key,
                case=self._log.ref,
            )
        self._count(request, response.usage)
        return response

    @staticmethod
    def _replay(payload: dict[str, Any], schema: type[BaseModel] | None) -> ChatResponse:
        parsed: Any = payload.get("parsed")
        if schema is not None and parsed is not None:
            parsed = schema.model_validate(parsed)
        return ChatResponse(
            text=str(payload["text"]),
            parsed=parsed,
            usage=Usage.model_validate(payload["usage"]),
            model=str(payload["model"]),
            attempts=int(payload["attempts"]),
        )


def _parsed_payload(parsed: Any) -> Any:
    if isinstance(parsed, BaseModel):
        return parsed.model_dump(mode="json")
    return parsed
