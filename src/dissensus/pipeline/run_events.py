"""Typed payloads of the run-level journal events, like the case steps of
:mod:`dissensus.pipeline.steps`: every writer builds its payload through one of these
models, and a reader may validate a payload with the same model.

Choices this module makes: the payloads keep the keys earlier versions wrote
(only the fields a writer gave), so a journal written
before these models is read by them unchanged, and the hash chain's canonical text of a
new event is what the earlier dictionaries gave.

``run.started`` is two models: :class:`StartedSpec`, the run specification as journalled
(what :meth:`~dissensus.pipeline.spec.RunSpec.from_started` reads, and what the Ray
engine hands its workers), and :class:`RunStarted`, which adds the run's input. The
policy, calibration files and learned acceptance inside it stay JSON as written: a 0.2
policy lacks fields added since, so validating it into :class:`~dissensus.pipeline.policy.Policy`
here would change the payload a reader sees; :class:`~dissensus.pipeline.spec.RunSpec`
validates each one when it is built from the event.
"""

from __future__ import annotations

from typing import Literal, Required

from pydantic import BaseModel, ConfigDict
from typing_extensions import TypedDict

from dissensus.types import JsonObject, Usage

__all__ = [
    "HELD_KEY",
    "AcceptanceHeld",
    "ModelFailed",
    "ModelReserved",
    "ModelSent",
    "ModelSettled",
    "ModelSpend",
    "ReviewResolved",
    "RunFinished",
    "RunInput",
    "RunStarted",
    "RunStopped",
    "SpecFile",
    "StartedSpec",
]


class _Payload(BaseModel):
    model_config = ConfigDict(frozen=True, extra="allow")

    def payload(self) -> JsonObject:
        """The event's payload: the fields that were given (nested models whole), as JSON."""
        given = self.model_fields_set | set(self.model_extra or {})
        return {k: v for k, v in self.model_dump(mode="json").items() if k in given}


class SpecFile(BaseModel):
    """A file a run specification loaded."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    role: str
    """The policy field that named it (``policy``, ``acceptance.model``, ``acceptance.calibration``,
    ``guard.calibration``)."""
    path: str
    """Absolute path when it was loaded."""
    sha256: str
    """sha256 of its bytes when it was loaded."""


class RunInput(TypedDict, total=False):
    """``run.started``'s ``input``: a file (``path`` and ``sha256``) or journalled text
    (``path`` ``-`` and ``text``, or ``base64`` when standard input was not UTF-8)."""

    path: Required[str]
    sha256: str
    text: str
    base64: str


class StartedSpec(_Payload):
    """The run specification as ``run.started`` journals it. Every key may be absent in
    an earlier journal (``base_dir``, ``files`` and ``shift_hold`` are new in 0.3)."""

    # The policy's JSON as written (a 0.2 policy lacks later fields); RunSpec validates it.
    policy: JsonObject | None = None
    policy_file: str | None = None
    """The policy file as it was named (``None``: a policy given in Python, or the defaults)."""
    base_dir: str | None = None
    """The folder the policy's relative paths resolved against."""
    # The reliability calibration file's JSON, passed through to RunSpec, which validates it.
    calibration: JsonObject | None = None
    # The guard's reliability fit as JSON, passed through to RunSpec, which validates it.
    guard_calibration: JsonObject | None = None
    # The learned acceptance file's verified content, passed through to dissensus.acceptance.
    acceptance: JsonObject | None = None
    model: str | None = None
    """Model spec of live follow-ups."""
    files: tuple[SpecFile, ...] = ()
    """Every file the specification loaded, with its sha256."""
    shift_hold: str | None = None
    """Why learned acceptance may commit nothing in the run (a flagged shift check)."""


class RunStarted(StartedSpec):
    """``run.started``: a run's input and specification (the run's first event)."""

    input: RunInput
    """Where the run's panels come from."""
    submitted_by: str | None = None
    """The name of the token that submitted the run (runs submitted to the service)."""
    kind: str | None = None
    """The run's kind, as its header says (absent: a run an earlier version made, of
    kind ``decide``): the header is made from this event
    (:mod:`~dissensus.store.run_header`)."""
    via: str | None = None
    """The door that started the run (``serve``, ``mcp``, ``shift-watch``), as its
    header's ``meta`` says; absent when none did, or in a run an earlier version made."""


class RunFinished(_Payload):
    """``run.finished``: what the run decided (keys absent when nothing was counted)."""

    cases: int = 0
    auto: int = 0
    escalated: int = 0
    rejected: int = 0
    followups: int = 0
    """Cases that attempted a model follow-up (a live re-ask, a DCI deliberation)."""
    followups_failed: int = 0
    """Of those, the follow-ups that failed (the case was decided without them)."""


class RunStopped(_Payload):
    """``run.stopped``: a run stopped before its end (resumable)."""

    reason: Literal["deadline"]
    deadline_s: float
    cases: int


HELD_KEY = "acceptance/held"
"""The key of a run's ``acceptance.held`` event (one per run)."""


class AcceptanceHeld(_Payload):
    """``acceptance.held``: the hold a run met on its acceptance file after it started (a
    shift check flagged the file, under ``on_shift: escalate``), on a resume or while it
    ran."""

    hold: str
    """The reason its held cases carry after ``acceptance held:``."""
    within_run: int | None = None
    """The run's judged cases at the check that held it while it ran
    (:mod:`dissensus.pipeline.shift_in_run`); absent when the hold came on a resume."""


class ModelSpend(_Payload):
    """``model.spend``: a model call about to be made, charged to the run's budget."""

    call: str
    agent: str | None
    model: str | None


class ModelSent(_Payload):
    """``model.sent``: attempt ``n`` of call ``call`` is being sent."""

    call: str
    n: int
    spent: Usage | None = None
    """What the call spent in this process before this attempt, when the server reported
    tokens for it (answers that failed schema validation, re-asked now); absent
    otherwise. A resumed run charges it when the call never ended (a kill, a deadline):
    its ``model.call`` or ``model.failed`` would have counted it."""


class ModelFailed(_Payload):
    """``model.failed``: a call that failed after its attempts, with what they cost."""

    call: str
    usage: Usage
    outcome: str


class ModelReserved(_Payload):
    """``model.reserved`` (key ``reserved/<block>/<attempt>``): what the Ray engine's driver
    lets one attempt of one block spend, journalled before the block is sent to a worker.
    Until a ``model.settled`` names it, a resumed run charges it in full (on either engine):
    the worker may have spent all of it before the driver was killed (a driver that stops
    on an interrupt, a deadline or an error settles it first: :class:`ModelSettled`,
    ``abandoned``)."""

    block: int
    """The block's index (:mod:`dissensus.engines.blocks`)."""
    attempt: int
    """0 for the block's first dispatch; one more for each dispatch after (a worker that
    died, a resumed run deciding the block again)."""
    first_line: int
    last_line: int
    """The block's input lines (inclusive)."""
    calls: int | None
    """Attempts the worker's client may send for the block (``None``: no call limit)."""
    tokens: int | None
    """Tokens the worker's client may use for the block (``None``: no token limit)."""


class ModelSettled(_Payload):
    """``model.settled`` (key ``settled/<block>/<attempt>``): the reservation ``reservation``
    is over; appended in the transaction that appends the block's last case, so the block's
    own events (``model.spend``, ``model.sent``, ``model.call``, ``model.failed``) are what
    a resumed run charges for it from then on, or, for a block the run abandoned
    (``abandoned``), when the run stopped, with the worker's spend in the payload."""

    reservation: str
    """The key of the ``model.reserved`` event settled."""
    attempts: int
    """Attempts the worker's client sent for the block (what it reported)."""
    tokens: int
    """Tokens the worker's client used for the block (what it reported)."""
    abandoned: bool = False
    """True: the run stopped (an interrupt, a deadline, an error) before the block's events
    were journalled, and the driver settled the reservation with what the worker had
    spent and could still spend when it was stopped (``attempts``, ``tokens``: its
    attempts sent or in flight and their tokens, the in-flight ones at their reserved
    worst case; 0 for a block the worker had not started). A resumed run charges these
    figures (the block's events, never journalled, cannot be); absent (False) in every
    other settlement, whose block's own events are what is charged."""


class ReviewResolved(_Payload):
    """``review.resolved``: a human's decision on an escalated case."""

    review_id: str
    decision: str
    note: str
    reviewer: str | None
    outside_options: bool
    content_sha256: str
