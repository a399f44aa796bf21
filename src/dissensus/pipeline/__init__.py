"""The composed decision pipeline: read -> route -> guard (of automatic routes) -> protocol -> record.

The rule engine alone routes a reading (defaults, built-in rules such as
``cd-without-values``, the policy's domain rules); the guard then decides whether an
``auto`` / ``auto_explain`` route may commit on the panel's agreement or must seek
context first. Every step is journalled as a typed model (:mod:`dissensus.pipeline.steps`).

>>> from dissensus.pipeline import Policy, decide
>>> record = decide(panel, Policy())                       # doctest: +SKIP
>>> record.action, record.decision, record.auto, record.reason  # doctest: +SKIP

:func:`decide` decides one panel into a throw-away in-memory journal unless a
:class:`~dissensus.store.Journal` is given; batches, resumption and the review queue go
through :mod:`dissensus.pipeline.batch` and :mod:`dissensus.pipeline.review` (or the CLI:
``dissensus decide``, ``dissensus runs``, ``dissensus review``). See ``docs/pipeline.md``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
from collections.abc import Coroutine, Mapping
from pathlib import Path
from typing import Any, TypeVar

from pydantic import ValidationError

from dissensus.cases import as_panel
from dissensus.errors import ConfigError, InputError
from dissensus.guard import ReliabilityFit, panel_votes
from dissensus.io.jsonl import Reject
from dissensus.pipeline.batch import (
    DeadlineReached,
    RunBusy,
    execute_run,
    new_run_id,
    policy_calibration,
    policy_guard_calibration,
    resume_run,
    start_run,
)
from dissensus.pipeline.engine import decide_case
from dissensus.pipeline.policy import Policy, load_policy, policy_from_dict
from dissensus.pipeline.records import CaseRecord, Resolution, ReviewItem
from dissensus.pipeline.runtime import Runtime
from dissensus.pipeline.spec import (
    PolicyLike,
    RunSpec,
    SpecFile,
    check_guard_calibration_object,
)
from dissensus.pipeline.steps import (
    AcceptanceStep,
    ConcordStep,
    DeliberationStep,
    FollowupStep,
    GuardStep,
)
from dissensus.pipeline.trust_regions import (
    CalibrationFile,
    build_calibration,
    load_calibration,
    trust_regions,
)
from dissensus.signals import (
    MarkerLexicon,
    SecondAnswer,
    Voice,
    agent_signals,
    recorded_second_answers,
)
from dissensus.store.errors import RunExists
from dissensus.store.journal import Journal, open_journal
from dissensus.types import Panel

T = TypeVar("T")

__all__ = [
    "FRESH_ATTEMPTS",
    "AcceptanceStep",
    "CalibrationFile",
    "CaseRecord",
    "ConcordStep",
    "DeadlineReached",
    "DeliberationStep",
    "FollowupStep",
    "GuardStep",
    "MarkerLexicon",
    "Policy",
    "Resolution",
    "ReviewItem",
    "RunBusy",
    "RunSpec",
    "Runtime",
    "SecondAnswer",
    "SpecFile",
    "Voice",
    "adecide",
    "agent_signals",
    "build_calibration",
    "decide",
    "decide_case",
    "execute_run",
    "load_calibration",
    "load_policy",
    "new_run_id",
    "panel_votes",
    "policy_calibration",
    "policy_from_dict",
    "policy_guard_calibration",
    "recorded_second_answers",
    "resume_run",
    "start_run",
    "trust_regions",
]


M = TypeVar("M", CalibrationFile, ReliabilityFit)


def _model_or_data(model: type[M], value: object, field: str) -> M:
    """``value`` as ``model``: the model itself, or its data (a mapping, validated as the
    file's); anything else, or data of another shape, a :class:`ConfigError` naming
    ``field``."""
    if isinstance(value, model):
        return value
    if not isinstance(value, Mapping):
        raise ConfigError(
            f"expected a {model.__name__} or its data (a mapping), not {type(value).__name__}",
            field=field,
        )
    try:
        return model.model_validate(dict(value))
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        message = str(first["msg"]).removeprefix("Value error, ")
        raise ConfigError(f"not a {model.__name__}: {where}: {message}", field=field) from None


async def adecide(
    panel: Panel | Mapping[str, Any],
    policy: PolicyLike = None,
    *,
    calibration: CalibrationFile | Mapping[str, Any] | None = None,
    guard_calibration: ReliabilityFit | Mapping[str, Any] | None = None,
    journal: Journal | str | os.PathLike[str] | None = None,
    run_id: str | None = None,
    policy_dir: Path | None = None,
    fresh: bool = False,
) -> CaseRecord:
    """Decide one panel (async): a run of one case through the one run loop.

    ``panel`` is a :class:`Panel` or its data (a mapping, validated: an
    :class:`InputError` names the field). ``policy`` is a :class:`RunSpec`, a
    :class:`Policy` (its relative paths under ``policy_dir``), a policy's data (a
    mapping, as a file holds it), a policy file or ``None`` (the defaults); every file
    the policy names is loaded and checked as ``dissensus decide`` does. ``calibration``
    / ``guard_calibration`` replace the policy's files with objects already loaded (or
    their data, a mapping validated as the file is; anything else is a
    :class:`ConfigError` naming the argument, as is a ``policy_dir`` that is no path and
    an empty journal path). The
    case is journalled in ``journal`` (a :class:`Journal`, or a journal's path or URL,
    opened and closed by this call; default: a throw-away in-memory one) as run
    ``run_id`` (default: a fresh id). A journal this call opens is opened as every door
    opens one (:func:`~dissensus.store.journal.open_journal`): with
    ``$DISSENSUS_SIGNING_KEY`` set, the run ends with a ``run.sealed`` event, and a key
    set but unreadable is a :class:`ConfigError` naming the variable; a :class:`Journal`
    given keeps the signer it was made with; deciding the same panel under an existing run id
    replays that run (the LangGraph node relies on it), a different panel is refused;
    calls with one run id at once in one process (on one journal object, or several on
    one journal) are one decision: the first decides, the others wait and replay it
    (in several processes, the later ones fail with ``RunExists``).
    A new run is created by its first write: a case without a model call commits once,
    the run, its case and ``run.finished`` together (:mod:`dissensus.pipeline.batch`).
    The fresh id made when ``run_id`` is not given is not looked up first: it names no
    run (one taken all the same is refused at that write, and another fresh id is drawn,
    three in all before :class:`RunExists`). A caller that drew ``run_id`` itself with
    :func:`new_run_id` (a door that names the case before it is decided) says so with
    ``fresh``: the id is then not looked up either, and a run the journal holds under it
    is :class:`RunExists` (never a replay, nor "already decided another panel"), for
    the caller to draw another.
    """
    panel = _panel(panel)
    if policy_dir is not None and not isinstance(policy_dir, str | os.PathLike):
        raise ConfigError(
            f"a policy directory is a path or None, not {type(policy_dir).__name__}",
            field="policy_dir",
        )
    spec = RunSpec.from_policy(policy, base_dir=policy_dir)
    if calibration is not None or guard_calibration is not None:
        update: dict[str, object] = {}
        if calibration is not None:
            update["calibration"] = _model_or_data(CalibrationFile, calibration, "calibration")
        if guard_calibration is not None:
            check_guard_calibration_object(spec.acceptance)
            update["guard_calibration"] = _model_or_data(
                ReliabilityFit, guard_calibration, "guard_calibration"
            )
        spec = spec.model_copy(update=update)
    own = not isinstance(journal, Journal)
    if journal is not None and not isinstance(journal, Journal | str | os.PathLike):
        raise ConfigError(
            f"a journal is a Journal, a path or None, not {type(journal).__name__}",
            field="journal",
        )
    if isinstance(journal, str | os.PathLike) and not os.fspath(journal).strip():
        raise ConfigError(
            "the journal is an empty path: name a file or a postgresql:// URL, or give None "
            "for a throw-away one",
            field="journal",
        )
    store = (
        journal
        if isinstance(journal, Journal)
        else open_journal(os.fspath(journal) if journal is not None else ":memory:")
    )
    text = panel.model_dump_json() + "\n"
    try:
        if run_id:
            return await _decide_gated(store, panel, spec, run_id, text, fresh=fresh)
        for attempt in range(FRESH_ATTEMPTS):
            try:
                return await _decide_gated(store, panel, spec, new_run_id(), text, fresh=True)
            except RunExists:
                # A fresh id another run already had (48 random bits): that run is not
                # this call's, so another id is drawn rather than the chosen id's advice.
                if attempt == FRESH_ATTEMPTS - 1:
                    raise
        raise AssertionError("unreachable")  # pragma: no cover
    finally:
        if own:
            store.close()


FRESH_ATTEMPTS = 3
"""Fresh ids :func:`adecide` (and every door that draws one) tries before a collision
is said (:class:`RunExists`)."""


async def _decide_gated(
    store: Journal, panel: Panel, spec: RunSpec, rid: str, text: str, *, fresh: bool
) -> CaseRecord:
    """:func:`_decide_as`, after the calls with this run id running in this process: the
    first decides, the others then replay its run (as sequential calls do)."""
    gate = (store.path, rid)
    while (running := _RUNNING.get(gate)) is not None:
        await asyncio.shield(asyncio.wrap_future(running))
    mine: concurrent.futures.Future[None] = concurrent.futures.Future()
    _RUNNING[gate] = mine
    try:
        return await _decide_as(store, panel, spec, rid, text, fresh=fresh)
    finally:
        _RUNNING.pop(gate, None)
        mine.set_result(None)


_RUNNING: dict[tuple[str, str], concurrent.futures.Future[None]] = {}
"""``adecide`` calls running in this process, by journal path and run id."""


async def _decide_as(
    store: Journal, panel: Panel, spec: RunSpec, rid: str, text: str, *, fresh: bool = False
) -> CaseRecord:
    """Decide ``panel`` (journalled as ``text``) as run ``rid`` of ``store``: a new run, or
    the replay of the run that decided the same panel. A ``fresh`` id (made by this
    call, not the caller's) names no run: it is not looked up."""
    # No run.started: a new run, created by its first write (an id taken meanwhile
    # is refused there, one this journal object is starting already at once).
    started = None if fresh else store.get(rid, "run/started")
    if started is None:
        start_run(store, None, spec, text=text, run_id=rid, lock=True, defer=True)
    elif (started.payload.get("input") or {}).get("text") != text:
        raise ConfigError(
            f"run {rid!r} already decided another panel; use another run id", field="run_id"
        )
    records: list[CaseRecord] = []
    rejects: list[str] = []
    async for record in execute_run(store, rid, on_reject=lambda r: rejects.append(_said(r))):
        records.append(record)
    if not records:
        raise InputError(f"panel {panel.id!r} rejected: {'; '.join(rejects)}")
    return records[0]


def _said(reject: Reject) -> str:
    """A refused panel's reason as ``adecide`` words it: the field, as the CLI names it."""
    return f"field {reject.field!r}: {reject.message}" if reject.field else reject.message


def _panel(panel: object) -> Panel:
    """The panel a caller gave: a :class:`Panel`, or its data validated into one."""
    found = as_panel(panel)
    if not isinstance(found, Panel):
        raise InputError(f"a panel is a Panel or a mapping, not {type(panel).__name__}")
    return found


def _run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to its end from synchronous code: on this thread, or, where an event
    loop is already running on it (a notebook, an async framework calling sync code), on
    a thread of its own (``asyncio.run`` cannot nest)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()


def decide(
    panel: Panel | Mapping[str, Any],
    policy: PolicyLike = None,
    *,
    calibration: CalibrationFile | Mapping[str, Any] | None = None,
    guard_calibration: ReliabilityFit | Mapping[str, Any] | None = None,
    journal: Journal | str | os.PathLike[str] | None = None,
    run_id: str | None = None,
    policy_dir: Path | None = None,
) -> CaseRecord:
    """Decide one panel (sync twin of :func:`adecide`; callable where an event loop is
    running too, as in a notebook: it then decides on a thread of its own)."""
    return _run_sync(
        adecide(
            panel,
            policy,
            calibration=calibration,
            guard_calibration=guard_calibration,
            journal=journal,
            run_id=run_id,
            policy_dir=policy_dir,
        )
    )
