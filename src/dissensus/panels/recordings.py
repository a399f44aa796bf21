"""Recordings of panel members: one ``replay:`` line per member answer, to run a panel offline.

A member asked through :mod:`dissensus.panels.fanout` sends a request whose key
(:func:`dissensus.llm.replay.request_key`) depends on the messages, the member's name,
the stage ``panel.answer`` and the structured-output schema; :func:`recording_line`
writes the line a ``replay:FILE`` member needs to answer that request with ``text``.
It is how recorded outputs of other systems (e.g. ZeroEval's solver outputs) become
members answering through the chat endpoint.

A choice this module makes: token counts of a recorded answer are
``estimate_tokens`` of the prompt and of the text, as the scripted model counts them.
"""

from __future__ import annotations

from dissensus.canonical import canonical
from dissensus.llm.base import BackendResponse, Message, estimate_tokens
from dissensus.llm.replay import canonical_request, request_key
from dissensus.panels.fanout import member_request
from dissensus.pipeline.policy import PanelSettings

__all__ = ["recording_line"]


def recording_line(
    member: str,
    messages: list[Message],
    text: str,
    settings: PanelSettings,
    *,
    model: str | None = None,
    temperature: float | None = None,
    seed: int | None = None,
) -> str:
    """One JSONL line of a recording: ``member`` answers ``messages`` with ``text``."""
    request = member_request(member, messages, settings, temperature=temperature, seed=seed)
    response = BackendResponse(
        text=text,
        model=model or member,
        prompt_tokens=estimate_tokens(request.prompt_text()),
        completion_tokens=estimate_tokens(text),
        finish_reason="stop",
    )
    line = {
        "key": request_key(request),
        "request": canonical_request(request),
        "response": response.model_dump(mode="json"),
    }
    return canonical(line) + "\n"
