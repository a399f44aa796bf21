"""A chat-completions request read, and a case's record written as the completion.

:func:`parse_request` validates a request body (a ``400`` naming the parameter);
:func:`answer_of` picks the answer text of a committed decision, :func:`escalation_text`
words an escalation, :func:`case_links` names a case's pages, and :func:`as_chunks`
gives a completion in the streaming shape. :mod:`dissensus.panels.door` uses them.

Choices this module makes: a refused request's ``400`` names the first error pydantic
gives, except that the string branch of a message's ``content`` refusing a list is
passed over for the list branch's error (a text part without its ``text`` is
``messages.0.content.0.text: Field required``, not "Input should be a valid string").
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from dissensus.panels.shapes import (
    ChatCompletion,
    ChatCompletionChunk,
    ChatError,
    ChunkChoice,
    ChunkDelta,
    CompletionRequest,
    MemberReport,
)
from dissensus.quoting import quote_short
from dissensus.types import Panel, find_unrepresentable

__all__ = ["answer_of", "as_chunks", "case_links", "escalation_text", "parse_request"]


def _telling_error(errors: list[Any]) -> Any:
    """The error a ``400`` names: the first, unless it is the ``str`` branch of a message's
    ``content`` refusing a list (``"Input should be a valid string"`` for a text part
    without its ``text``), when the list branch's error of the same content says what
    is wrong with it (``messages.0.content.0.text: Field required``)."""
    first = errors[0]
    loc = tuple(first["loc"])
    if loc[-1:] != ("str",) or isinstance(first.get("input"), str):
        return first
    for other in errors[1:]:
        there = tuple(other["loc"])
        if there[: len(loc) - 1] == loc[:-1] and len(there) > len(loc) - 1:
            branch = there[len(loc) - 1]
            if isinstance(branch, str) and branch.startswith("list["):
                return other
    return first


def parse_request(body: Any) -> CompletionRequest:
    """A request body validated, or a ``400`` :class:`ChatError` naming the parameter."""
    if isinstance(body, CompletionRequest):
        return body
    if not isinstance(body, Mapping):
        raise ChatError(400, "the request body must be a JSON object", param=None)
    try:
        request = CompletionRequest.model_validate(body)
    except ValidationError as exc:
        first = _telling_error(exc.errors(include_url=False))
        # Union members pydantic names in the location (``str``, ``list[ContentPart]``) are not fields.
        parts = [
            str(p) for p in first["loc"] if not (isinstance(p, str) and (p == "str" or "[" in p))
        ]
        param = ".".join(parts) or None
        message = str(first["msg"]).removeprefix("Value error, ")
        raise ChatError(400, f"{param}: {message}" if param else message, param=param) from None
    # The panel is built unvalidated from these texts (dissensus.panels.fanout): check here
    # what its validation would refuse (a lone surrogate), as a 400 naming the message.
    for i, sent in enumerate(request.messages):
        why = find_unrepresentable(sent.text())
        if why is not None:
            raise ChatError(400, f"messages.{i}.content: {why}", param=f"messages.{i}.content")
    return request


def answer_of(panel: Panel, decision: str | None) -> tuple[str | None, str | None]:
    """``(text, member)``: the full text of the first member that gave ``decision``."""
    if decision is None:
        return None, None
    answers = panel.meta.get("answers") if isinstance(panel.meta.get("answers"), dict) else {}
    for out in panel.outputs:
        if out.decision == decision:
            text = answers.get(out.agent) if answers else None
            return (text if isinstance(text, str) and text else out.reasoning), out.agent
    return decision, None


def case_links(run_id: str, case_id: str, review_id: str | None) -> dict[str, str]:
    """The paths of a case's pages: the case, its run's verification, its review item."""
    links = {"case": f"/v1/cases/{case_id}", "verify": f"/v1/runs/{run_id}/verify"}
    if review_id:
        links["review"] = f"/review/case/{review_id}"
    return links


def escalation_text(case_id: str, reason: str, reports: list[MemberReport]) -> str:
    """What an escalation's content says, worded from what the members gave: a split, one
    decision the policy did not let commit on its own, or no decision at all."""
    given = {r.decision for r in reports if r.decision is not None}
    if len(given) > 1:
        what = "the panel's disagreement went to human review"
    elif given:
        what = (
            f"the members that answered agreed on {quote_short(next(iter(given)))}, but the "
            "policy did not let that commit on its own, so the case went to human review"
        )
    else:
        what = "no member gave a usable answer, so the case went to human review"
    return (
        f"No answer was committed: {what} (case {case_id}). "
        f"Poll GET /v1/cases/{case_id} for the decision. Why: {reason}"
    )


def as_chunks(
    completion: ChatCompletion, *, include_usage: bool = False
) -> list[ChatCompletionChunk]:
    """The completion in OpenAI's streaming shape: role, content, then the end with
    ``dissensus`` and the usage; with ``include_usage`` (``stream_options``), the usage on
    a last chunk of its own with ``choices: []``, as OpenAI sends it."""
    base = {"id": completion.id, "created": completion.created, "model": completion.model}
    choice = completion.choices[0]
    chunks = [
        ChatCompletionChunk(
            **base, choices=[ChunkChoice(delta=ChunkDelta(role="assistant", content=""))]
        ),
        ChatCompletionChunk(
            **base, choices=[ChunkChoice(delta=ChunkDelta(content=choice.message.content or ""))]
        ),
        ChatCompletionChunk(
            **base,
            choices=[ChunkChoice(delta=ChunkDelta(), finish_reason=choice.finish_reason)],
            usage=None if include_usage else completion.usage,
            dissensus=completion.dissensus,
        ),
    ]
    if include_usage:
        chunks.append(ChatCompletionChunk(**base, choices=[], usage=completion.usage))
    return chunks
