"""Runs: a JSONL file of panels decided case by case, journalled, resumable.

:func:`start_run` registers a run and journals everything needed to redo it without the
original command line: the input file's path and sha256 (or, for standard input, the
text itself), the policy, the calibration file's content and the model spec.
:func:`execute_run` streams the input with bounded concurrency and yields one
:class:`~dissensus.pipeline.records.CaseRecord` per accepted panel *in input order*;
it is also how a run resumes (:func:`resume_run`): cases whose record is journalled are
replayed, the case in flight continues from its last journalled step.

Choices where the design is silent:

* At most ``policy.concurrency`` cases are in flight; records are emitted in input order
  (a finished case waits for the earlier ones, so memory stays bounded by the window).
* A resumed run refuses an input file whose sha256 changed since the run started.
* Rejected lines are journalled (``input.rejected``) and reported, never decided.
* ``run.finished`` is journalled once, with the counts, when every line was handled.
* One process at a time works on a run: :func:`execute_run` takes the run's lease in
  the journal (:meth:`~dissensus.store.journal.Journal.acquire_run_lock`) and a second process
  gets :class:`RunBusy` ("run is being resumed by pid N", exit 2) instead of doubling
  the spend; the lease of a killed process is taken over.
* A deadline (``deadline_s`` of the policy, or the caller's) is wall-clock time for this
  invocation: when it passes, no new case starts, cases in flight are cancelled (their
  journalled steps stay), a ``run.stopped`` event records ``{reason: deadline, cases}``
  and :class:`DeadlineReached` (exit 1) is raised after the records finished in input
  order were yielded. The run is *partial*: no ``run.finished``, resumable with
  ``runs resume``.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import io
import os
import sys
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from dissensus.errors import ConfigError, DissensusError, InputError
from dissensus.guard import Calibration as GuardCalibration
from dissensus.io.jsonl import Reject, parse_line
from dissensus.io.yamlfile import read_text_file
from dissensus.pipeline.engine import decide_case
from dissensus.pipeline.learned import load_learned_data
from dissensus.pipeline.policy import Policy, check_similarity
from dissensus.pipeline.records import CaseRecord
from dissensus.pipeline.reliability import CalibrationFile, load_calibration
from dissensus.pipeline.runtime import Runtime, resolve_model_spec
from dissensus.states import SimilarityBackend
from dissensus.store.journal import Journal, RunInfo
from dissensus.types import Panel

__all__ = [
    "DeadlineReached",
    "RunBusy",
    "RunSummary",
    "execute_run",
    "new_run_id",
    "policy_calibration",
    "policy_guard_calibration",
    "resume_run",
    "start_run",
    "summarise",
]

RUN_KIND = "decide"


class RunBusy(ConfigError):
    """Another live process is working on the run (exit 2)."""


class DeadlineReached(DissensusError):
    """The run's wall-clock deadline passed; the run stopped partial and is resumable (exit 1)."""


class RunSummary(BaseModel):
    """Counts of one run."""

    cases: int
    auto: int
    escalated: int
    rejected: int
    actions: dict[str, int]
    states: dict[str, int]


def new_run_id() -> str:
    """A fresh run id (12 hex digits)."""
    return uuid.uuid4().hex[:12]


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def start_run(
    journal: Journal,
    input_path: str,
    policy: Policy,
    *,
    policy_file: str | None = None,
    policy_dir: Path | None = None,
    run_id: str | None = None,
    model: str | None = None,
    similarity: str | None = None,
    acceptance: str | None = None,
) -> RunInfo:
    """Register a new run and journal its inputs (``run.started``)."""
    run_id = run_id or new_run_id()
    if journal.run(run_id, missing_ok=True) is not None:
        raise ConfigError(
            f"run {run_id!r} already exists in {journal.path}; resume it with 'dissensus runs resume'"
        )
    if similarity:
        check_similarity(similarity, field="similarity")
        policy = policy.model_copy(
            update={"reading": policy.reading.model_copy(update={"similarity": similarity})}
        )
    calibration = policy_calibration(policy, policy_dir, policy_file)
    # --acceptance (relative to the working directory) overrides acceptance.model (relative to the policy).
    learned = (
        load_learned_data(acceptance, None, policy_file=None, field="--acceptance")
        if acceptance
        else load_learned_data(
            policy.acceptance.model, policy_dir, policy_file=policy_file, field="acceptance.model"
        )
    )
    calibrated_with = (learned or {}).get("settings", {}).get("similarity")
    if calibrated_with and calibrated_with != policy.reading.similarity:
        raise ConfigError(
            f"the acceptance file was calibrated with similarity {calibrated_with!r}, "
            f"the policy reads with {policy.reading.similarity!r}",
            file=policy_file,
            field="reading.similarity",
        )
    guard_calibration = policy_guard_calibration(policy, policy_dir, policy_file)
    source: dict[str, Any]
    if input_path == "-":
        source = stdin_source(
            sys.stdin.buffer.read() if hasattr(sys.stdin, "buffer") else sys.stdin.read().encode()
        )
    else:
        path = Path(input_path).resolve()
        if not path.is_file():
            raise InputError(f"file not found: {input_path}")
        source = {"path": str(path), "sha256": _sha256_file(path)}
    spec = model or resolve_model_spec(policy, dict(os.environ))
    meta = {"input": source.get("path"), "policy_file": policy_file}
    # The run and its run.started event are one transaction: a crash leaves neither.
    # exclusive: of two starts with one --run-id, the second fails cleanly (RunExists).
    started = (
        "run.started",
        {
            "input": source,
            "policy": policy.model_dump(mode="json"),
            "policy_file": policy_file,
            "calibration": calibration.model_dump(mode="json") if calibration else None,
            "guard_calibration": guard_calibration.model_dump(mode="json")
            if guard_calibration
            else None,
            "acceptance": learned,
            "model": spec,
        },
        "run/started",
    )
    return journal.create_run(run_id, kind=RUN_KIND, meta=meta, first=started, exclusive=True)


def stdin_source(data: bytes) -> dict[str, Any]:
    """The journalled form of standard input: its text, or base64 when it is not UTF-8.

    Lines that are not UTF-8 are rejected one by one when the run reads them, like the
    same bytes in a file; the journal (canonical JSON, UTF-8) can only hold them encoded.
    """
    try:
        return {"path": "-", "text": data.decode("utf-8")}
    except UnicodeDecodeError:
        return {"path": "-", "base64": base64.b64encode(data).decode("ascii")}


def policy_calibration(
    policy: Policy, policy_dir: Path | None, policy_file: str | None
) -> CalibrationFile | None:
    """The reliability calibration file the policy names (``acceptance.calibration``,
    relative to ``policy_dir``), or ``None`` when it names none.

    :class:`~dissensus.errors.ConfigError` naming ``policy_file`` when the file is missing.
    """
    name = policy.acceptance.calibration
    if not name:
        return None
    path = Path(name)
    if not path.is_absolute() and policy_dir is not None:
        path = policy_dir / path
    if not path.is_file():
        raise ConfigError(
            f"calibration file not found: {path}", file=policy_file, field="acceptance.calibration"
        )
    return load_calibration(path, policy.acceptance.markers)


def policy_guard_calibration(
    policy: Policy, policy_dir: Path | None, policy_file: str | None
) -> GuardCalibration | None:
    """The guard calibration the policy names (``guard.calibration``, relative to
    ``policy_dir``), or ``None`` when it names none.

    :class:`~dissensus.errors.ConfigError` naming ``policy_file`` when it cannot be read.
    """
    name = policy.guard.calibration
    if not name:
        return None
    path = Path(name)
    if not path.is_absolute() and policy_dir is not None:
        path = policy_dir / path
    try:
        return GuardCalibration.model_validate_json(read_text_file(path, what="guard calibration"))
    except OSError as exc:
        raise ConfigError(
            f"cannot read guard calibration {path}: {exc.strerror}",
            file=policy_file,
            field="guard.calibration",
        ) from exc
    except ValidationError as exc:
        first = exc.errors()[0]
        raise ConfigError(
            f"{path}: invalid guard calibration: {first['msg']}",
            file=policy_file,
            field="guard.calibration",
        ) from exc


def _started(journal: Journal, run_id: str) -> dict[str, Any]:
    event = journal.get(run_id, "run/started")
    if event is None:
        raise DissensusError(f"run {run_id} has no run.started event: not a decide run")
    return event.payload


def _lines(source: dict[str, Any]) -> tuple[str, list[str] | None]:
    if source.get("path") == "-":
        if "base64" in source:
            text = base64.b64decode(str(source["base64"])).decode("utf-8", "surrogateescape")
        else:
            text = str(source.get("text", ""))
        # Split as a file is read (universal newlines only), never on U+2028 and the like.
        return "-", list(io.StringIO(text, newline=None))
    path = Path(str(source["path"]))
    if not path.is_file():
        raise InputError(f"the run's input file is gone: {path}")
    if _sha256_file(path) != source.get("sha256"):
        raise InputError(f"the run's input file changed since the run started: {path}")
    return str(path), None


def _runtime(
    journal: Journal,
    run_id: str,
    started: dict[str, Any],
    backend: Callable[[], SimilarityBackend] | None,
) -> Runtime:
    policy = Policy.model_validate(started["policy"])
    cal = started.get("calibration")
    guard_cal = started.get("guard_calibration")
    return Runtime(
        policy=policy,
        journal=journal,
        run_id=run_id,
        calibration=CalibrationFile.model_validate(cal) if cal else None,
        guard_calibration=GuardCalibration.model_validate(guard_cal) if guard_cal else None,
        acceptance=started.get("acceptance"),
        model=started.get("model"),
        backend_factory=backend,
    )


async def execute_run(
    journal: Journal,
    run_id: str,
    *,
    on_reject: Callable[[Reject], None] | None = None,
    backend: Callable[[], SimilarityBackend] | None = None,
    deadline_s: float | None = None,
) -> AsyncIterator[CaseRecord]:
    """Decide (or finish deciding) every case of the run, yielding records in input order.

    ``deadline_s`` (default: the policy's ``deadline_s``) bounds this invocation's
    wall-clock time; see the module docstring.
    """
    started = _started(journal, run_id)
    pid = os.getpid()
    holder = journal.acquire_run_lock(run_id, pid)
    if holder is not None:
        raise RunBusy(f"run {run_id} is being resumed by pid {holder.pid} (host {holder.host})")
    rt = _runtime(journal, run_id, started, backend)
    limit = deadline_s if deadline_s is not None else rt.policy.deadline_s
    loop = asyncio.get_running_loop()
    end = None if limit is None else loop.time() + limit
    name, lines = _lines(started["input"])
    window: list[asyncio.Task[CaseRecord]] = []
    counts: Counter[str] = Counter()

    async def next_record() -> CaseRecord:
        task = window[0]
        if end is not None:
            await asyncio.wait({task}, timeout=max(0.0, end - loop.time()))
            if not task.done():
                raise _Late()
        window.pop(0)
        return await task

    try:
        try:
            for item, line in _prefetched(rt, _iter(name, lines)):
                if end is not None and loop.time() >= end:
                    raise _Late()
                if isinstance(item, Reject):
                    journal.append(
                        run_id,
                        "input.rejected",
                        item.model_dump(mode="json"),
                        key=f"reject/{line}",
                        case=str(line),
                    )
                    counts["rejected"] += 1
                    if on_reject is not None:
                        on_reject(item)
                    continue
                window.append(asyncio.create_task(decide_case(rt, item, line)))
                if len(window) >= rt.policy.concurrency:
                    record = await next_record()
                    _count(counts, record)
                    yield record
            while window:
                record = await next_record()
                _count(counts, record)
                yield record
        except _Late:
            for task in window:
                task.cancel()
            await asyncio.gather(*window, return_exceptions=True)
            window.clear()
            _stopped(journal, run_id, limit or 0.0, counts["cases"])
            raise DeadlineReached(
                f"run {run_id}: deadline of {limit:g} s reached after {counts['cases']} case(s); "
                f"the run is partial, finish it with 'dissensus runs resume {run_id}'"
            ) from None
        finally:
            for task in window:
                task.cancel()
            await rt.client.aclose()
        journal.append(run_id, "run.finished", dict(counts), key="run/finished")
    finally:
        journal.release_run_lock(run_id, pid)


class _Late(Exception):
    """The deadline passed (internal signal)."""


def _stopped(journal: Journal, run_id: str, limit: float, cases: int) -> None:
    n = 0
    while journal.get(run_id, f"run/stopped/{n}") is not None:
        n += 1
    payload = {"reason": "deadline", "deadline_s": limit, "cases": cases}
    journal.append(run_id, "run.stopped", payload, key=f"run/stopped/{n}")


def _count(counts: Counter[str], record: CaseRecord) -> None:
    counts["cases"] += 1
    counts["auto"] += int(record.auto)
    counts["escalated"] += int(record.action == "escalate")


PREFETCH = 64
"""Panels whose traces are embedded together before they are decided."""


def _prefetched(
    rt: Runtime, items: Iterator[tuple[Panel | Reject, int]]
) -> Iterator[tuple[Panel | Reject, int]]:
    chunk: list[tuple[Panel | Reject, int]] = []
    for item in items:
        chunk.append(item)
        if len(chunk) >= PREFETCH:
            rt.prefetch([(line, p) for p, line in chunk if isinstance(p, Panel)])
            yield from chunk
            chunk = []
    rt.prefetch([(line, p) for p, line in chunk if isinstance(p, Panel)])
    yield from chunk


def _iter(name: str, lines: list[str] | None) -> Iterator[tuple[Panel | Reject, int]]:
    """``(panel or reject, line number)`` for every non-blank input line, lazily."""
    if lines is not None:
        yield from _numbered(name, lines)
        return
    # surrogateescape: a line that is not UTF-8 is rejected on its own (see io.jsonl).
    with open(name, encoding="utf-8", errors="surrogateescape", newline=None) as handle:
        yield from _numbered(name, handle)


def _numbered(name: str, lines: Iterable[str]) -> Iterator[tuple[Panel | Reject, int]]:
    for number, text in enumerate(lines, start=1):
        if text.strip():
            yield parse_line(Panel, text, file=name, line=number), number


def check_resumable(journal: Journal, run_id: str) -> None:
    """Refuse to resume a run whose hash chain does not verify: resuming re-runs the
    journalled policy and inputs, which an edited journal could have replaced."""
    report = journal.verify(run_id)
    if not report.ok:
        first = report.problems[0] if report.problems else "the chain is broken"
        raise InputError(
            f"cannot resume run {run_id}: its journal does not verify ({first}); "
            f"see dissensus runs verify {run_id}"
        )


async def resume_run(
    journal: Journal,
    run_id: str,
    *,
    on_reject: Callable[[Reject], None] | None = None,
    backend: Callable[[], SimilarityBackend] | None = None,
    deadline_s: float | None = None,
) -> AsyncIterator[CaseRecord]:
    """Resume a run (same as :func:`execute_run`; completed cases are replayed).

    A run whose journal does not verify is refused (:func:`check_resumable`)."""
    check_resumable(journal, run_id)
    async for record in execute_run(
        journal, run_id, on_reject=on_reject, backend=backend, deadline_s=deadline_s
    ):
        yield record


def summarise(records: list[CaseRecord], rejected: int) -> RunSummary:
    """Counts of a list of records."""
    return RunSummary(
        cases=len(records),
        auto=sum(r.auto for r in records),
        escalated=sum(r.action == "escalate" for r in records),
        rejected=rejected,
        actions=dict(sorted(Counter(r.action for r in records).items())),
        states=dict(sorted(Counter(r.state for r in records).items())),
    )
