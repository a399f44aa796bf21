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
import os
from pathlib import Path

from dissensus.guard import Calibration as GuardCalibration
from dissensus.pipeline.batch import (
    DeadlineReached,
    RunBusy,
    RunSummary,
    execute_run,
    new_run_id,
    policy_calibration,
    policy_guard_calibration,
    resume_run,
    start_run,
)
from dissensus.pipeline.engine import decide_case
from dissensus.pipeline.gates import panel_votes
from dissensus.pipeline.learned import load_learned_data
from dissensus.pipeline.policy import Policy, load_policy, policy_from_dict
from dissensus.pipeline.records import CaseRecord, Resolution, ReviewItem
from dissensus.pipeline.reliability import (
    CalibrationFile,
    build_calibration,
    load_calibration,
    trust_regions,
)
from dissensus.pipeline.runtime import Runtime, resolve_model_spec
from dissensus.pipeline.signals import (
    MarkerLexicon,
    SecondAnswer,
    Voice,
    agent_signals,
    recorded_second_answers,
)
from dissensus.pipeline.steps import (
    AcceptanceStep,
    ConcordStep,
    DeliberationStep,
    FollowupStep,
    GuardStep,
)
from dissensus.store.journal import Journal
from dissensus.types import Panel

__all__ = [
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
    "RunSummary",
    "Runtime",
    "SecondAnswer",
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


async def adecide(
    panel: Panel,
    policy: Policy | None = None,
    *,
    calibration: CalibrationFile | None = None,
    guard_calibration: GuardCalibration | None = None,
    journal: Journal | None = None,
    run_id: str | None = None,
    policy_dir: Path | None = None,
) -> CaseRecord:
    """Decide one panel (async). The reliability calibration defaults to the policy's file."""
    policy = policy or Policy()
    if calibration is None and policy.acceptance.calibration:
        path = Path(policy.acceptance.calibration)
        if not path.is_absolute() and policy_dir is not None:
            path = policy_dir / path
        calibration = load_calibration(path, policy.acceptance.markers)
    learned = load_learned_data(
        policy.acceptance.model, policy_dir, policy_file=None, field="acceptance.model"
    )
    own = journal is None
    store = journal or Journal(":memory:")
    rid = run_id or new_run_id()
    store.create_run(rid, kind="decide-one", meta={"panel": panel.id})
    rt = Runtime(
        policy=policy,
        journal=store,
        run_id=rid,
        calibration=calibration,
        guard_calibration=guard_calibration,
        acceptance=learned,
        model=resolve_model_spec(policy, dict(os.environ)),
    )
    try:
        return await decide_case(rt, panel, 1)
    finally:
        await rt.client.aclose()
        if own:
            store.close()


def decide(
    panel: Panel,
    policy: Policy | None = None,
    *,
    calibration: CalibrationFile | None = None,
    guard_calibration: GuardCalibration | None = None,
    journal: Journal | None = None,
    run_id: str | None = None,
    policy_dir: Path | None = None,
) -> CaseRecord:
    """Decide one panel (sync twin of :func:`adecide`)."""
    return asyncio.run(
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
