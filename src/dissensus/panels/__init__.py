"""Panels built from member models: one OpenAI-compatible request fanned out, decided, answered.

>>> from dissensus.panels import PanelChat
>>> chat = PanelChat.from_file("policy.yaml", journal=open_journal("runs.sqlite"))  # doctest: +SKIP
>>> done = chat.complete({"model": "panel", "messages": [{"role": "user", "content": "2+2?"}]})  # doctest: +SKIP
>>> done.dissensus.status, done.choices[0].message.content  # doctest: +SKIP

The policy's ``panel:`` section names the members; :mod:`.fanout` asks them,
:mod:`.answers` turns each answer into a decision, :mod:`.door` decides the panel with
the pipeline and writes the completion (:mod:`.completion`, :mod:`.shapes`; its errors:
:mod:`.errors`, :mod:`.idempotency`). ``dissensus serve`` exposes it
as ``POST /v1/chat/completions`` (:mod:`dissensus.serve.chat`). See ``docs/chat.md``.
"""

from dissensus.panels.answers import MemberAnswer, normalise_label, read_answer, verdict_schema
from dissensus.panels.completion import answer_of, as_chunks, parse_request
from dissensus.panels.door import PanelChat
from dissensus.panels.fanout import STAGE, FanOut, Members, PanelUnavailable, member_request
from dissensus.panels.recordings import recording_line
from dissensus.panels.shapes import (
    COMMITTED,
    ESCALATED,
    CaseStatus,
    ChatCompletion,
    ChatCompletionChunk,
    ChatError,
    CompletionRequest,
    MemberReport,
    PanelResult,
)

__all__ = [
    "COMMITTED",
    "ESCALATED",
    "STAGE",
    "CaseStatus",
    "ChatCompletion",
    "ChatCompletionChunk",
    "ChatError",
    "CompletionRequest",
    "FanOut",
    "MemberAnswer",
    "MemberReport",
    "Members",
    "PanelChat",
    "PanelResult",
    "PanelUnavailable",
    "answer_of",
    "as_chunks",
    "member_request",
    "normalise_label",
    "parse_request",
    "read_answer",
    "recording_line",
    "verdict_schema",
]
