"""What journalling a case's model events adds to what a resumed run charges its budget
(:func:`_case_charge`, by :func:`~dissensus.pipeline.durable.replay_spend`'s rules): a
worker reports it per case, so that an abandoned block's settlement charges each attempt
once."""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable
from typing import Any

from dissensus.store import event_types as ev

_SPEND_EVENTS = frozenset({ev.MODEL_CALL, ev.MODEL_FAILED, ev.MODEL_SENT})
"""The event types a resumed run charges its budget with (besides reservations)."""


def _case_charge(events: Iterable[Any], seeded: Collection[str]) -> tuple[int, int]:
    """``(attempts, tokens)``: what journalling a case's ``events`` adds to what a resumed
    run charges (:func:`~dissensus.pipeline.durable.replay_spend`, whose rules this
    follows), the events whose keys are in ``seeded`` being journalled already. A
    journalled call charges its attempts and tokens, a failed one too, the attempts
    journalled as sent that neither accounts for count one each, per call key (a case's
    call keys are its own: ``call/LINE/...``), and a call that never ended the tokens of
    the answers it was given (:func:`~dissensus.pipeline.durable.unended_answers`)."""
    from dissensus.pipeline.durable import unended_answers
    from dissensus.types import Usage

    events = [e for e in events if e.type in _SPEND_EVENTS]
    attempts = tokens = 0
    old_sent: Counter[str] = Counter()
    new_sent: Counter[str] = Counter()
    old_done: Counter[str] = Counter()
    new_done: Counter[str] = Counter()
    for event in events:
        kind = event.type
        payload = event.payload
        old = event.key in seeded
        if kind == ev.MODEL_SENT:
            (old_sent if old else new_sent)[str(payload.get("call"))] += 1
            continue
        call = event.key if kind == ev.MODEL_CALL else str(payload.get("call"))
        usage = Usage.model_validate(payload["usage"])
        (old_done if old else new_done)[call] += usage.attempts
        if not old:
            attempts += usage.attempts
            if usage.attempts > 0:
                tokens += usage.total_tokens
    for call in {*old_sent, *new_sent}:
        before = max(0, old_sent[call] - old_done[call])
        after = max(0, old_sent[call] + new_sent[call] - old_done[call] - new_done[call])
        attempts += after - before
    # The tokens of answers to calls that never ended (journalled with their re-asks).
    tokens += (
        unended_answers(events).total_tokens
        - unended_answers([e for e in events if e.key in seeded]).total_tokens
    )
    return max(0, attempts), max(0, tokens)
