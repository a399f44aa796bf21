"""Decide runs submitted over HTTP: journalled like ``dissensus decide``, followed live.

A request's panels become one run of the journal, exactly as ``dissensus decide`` makes
one run of a file: ``run.started`` holds the input (as text, the way the CLI journals
standard input), the policy, the calibrations and the model spec, and the cases are
decided by :func:`dissensus.pipeline.execute_run`, the CLI's own call. A run started
here can therefore be listed, verified, exported and resumed with the CLI.

Choices where the design is silent:

* Each panel of a request is one JSONL line (``json.dumps`` of the item), so item ``i``
  is input line ``i + 1`` and a rejected item is reported with the same field path the
  CLI reports for that line (:func:`dissensus.io.jsonl.parse_line`).
* ``run.started`` also records ``submitted_by``: the name of the token that submitted.
* The similarity backend is built once per server and shared by every run.
* On shutdown (SIGTERM / Ctrl-C) runs in progress get most of the graceful-shutdown
  time to finish, then are cancelled: they end ``incomplete`` (resumable with
  ``dissensus runs resume``), and every open event stream receives that final event and
  ends, so no client is left on a connection the server drops.
* Progress is kept in memory (:class:`RunState`) for the runs this process executes;
  at most :data:`KEEP_FINISHED` finished runs stay in memory, older ones (and runs of
  other processes) are read back from the journal.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import OrderedDict
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from dissensus.guard import Calibration as GuardCalibration
from dissensus.io.jsonl import Reject
from dissensus.pipeline import (
    CaseRecord,
    Policy,
    execute_run,
    new_run_id,
    policy_calibration,
    policy_guard_calibration,
)
from dissensus.pipeline.reliability import CalibrationFile
from dissensus.pipeline.review import final_records
from dissensus.pipeline.runtime import resolve_model_spec
from dissensus.states import SimilarityBackend, get_backend
from dissensus.store.journal import Journal

__all__ = ["KEEP_FINISHED", "RunState", "Runner", "item_line", "reject_of"]

KEEP_FINISHED = 256
"""Finished runs whose progress stays in memory."""

Status = Literal["running", "finished", "failed", "incomplete"]


def item_line(item: Any) -> str:
    """One request item as one JSONL line."""
    return json.dumps(item, ensure_ascii=True, separators=(",", ":"))


def reject_of(reject: Reject) -> dict[str, Any]:
    """A rejected item as the API reports it: index in the request, field, message."""
    return {"index": reject.line - 1, "field": reject.field, "error": reject.message}


@dataclass
class RunState:
    """What the server knows about one of its runs while (and shortly after) it runs."""

    run_id: str
    total: int
    status: Status = "running"
    done: int = 0
    records: list[CaseRecord] = field(default_factory=list)
    rejects: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None

    @property
    def active(self) -> bool:
        """Still deciding in this process (a task cancelled before it ran is not)."""
        return self.status == "running" and self.task is not None and not self.task.done()

    def push(self, kind: str, data: dict[str, Any]) -> None:
        self.events.append((kind, data))
        self.changed.set()
        self.changed = asyncio.Event()

    def summary(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "status": self.status,
            "total": self.total,
            "done": self.done,
            "rejected": len(self.rejects),
            "error": self.error,
        }


class Runner:
    """Starts, executes and follows decide runs for the service."""

    def __init__(
        self,
        journal: Journal,
        policy: Policy,
        *,
        policy_file: str | None = None,
        policy_dir: Path | None = None,
        environ: dict[str, str] | None = None,
    ) -> None:
        self.journal = journal
        self.policy = policy
        self.policy_file = policy_file
        calibration: CalibrationFile | None = policy_calibration(policy, policy_dir, policy_file)
        guard_calibration: GuardCalibration | None = policy_guard_calibration(
            policy, policy_dir, policy_file
        )
        self._started = {
            "policy": policy.model_dump(mode="json"),
            "policy_file": policy_file,
            "calibration": calibration.model_dump(mode="json") if calibration else None,
            "guard_calibration": guard_calibration.model_dump(mode="json")
            if guard_calibration
            else None,
            "model": resolve_model_spec(policy, environ or {}),
        }
        self._backend: SimilarityBackend | None = None
        self._states: OrderedDict[str, RunState] = OrderedDict()

    def backend(self) -> SimilarityBackend:
        if self._backend is None:
            self._backend = get_backend(self.policy.reading.similarity)
        return self._backend

    def start(self, lines: list[str], *, submitted_by: str) -> RunState:
        """Journal a new run of ``lines`` (one panel each) and start deciding it."""
        run_id = new_run_id()
        self.journal.create_run(
            run_id,
            kind="decide",
            meta={"input": "-", "policy_file": self.policy_file, "via": "serve"},
        )
        text = "".join(line + "\n" for line in lines)
        payload = {
            "input": {"path": "-", "text": text},
            **self._started,
            "submitted_by": submitted_by,
        }
        self.journal.append(run_id, "run.started", payload, key="run/started")
        state = RunState(run_id=run_id, total=len(lines))
        self._states[run_id] = state
        state.task = asyncio.create_task(self._execute(state))
        self._evict()
        return state

    async def _execute(self, state: RunState) -> None:
        def on_reject(reject: Reject) -> None:
            data = reject_of(reject)
            state.rejects.append(data)
            state.push("reject", data)

        try:
            async for record in execute_run(
                self.journal, state.run_id, on_reject=on_reject, backend=self.backend
            ):
                state.records.append(record)
                state.done += 1
                state.push("record", record.model_dump(mode="json"))
            state.status = "finished"
        except asyncio.CancelledError:
            state.status = "incomplete"
            state.error = (
                "cancelled (the server stopped); resume with: dissensus runs resume " + state.run_id
            )
            state.push("incomplete", state.summary())
            raise
        except Exception as exc:  # reported to the client, never swallowed silently
            state.status = "failed"
            state.error = f"{type(exc).__name__}: {exc}"
        state.push(state.status, state.summary())

    def _evict(self) -> None:
        finished = [k for k, s in self._states.items() if s.status != "running"]
        for key in finished[: max(0, len(finished) - KEEP_FINISHED)]:
            del self._states[key]

    def state(self, run_id: str) -> RunState | None:
        return self._states.get(run_id)

    async def wait(self, state: RunState) -> None:
        """Until the run ends (also when it is stopped by a shutdown: ``incomplete``)."""
        if state.task is None:
            return
        try:
            await asyncio.shield(state.task)
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if not state.task.cancelled() or (current is not None and current.cancelling()):
                raise  # the waiter itself is cancelled

    def describe(self, run_id: str) -> dict[str, Any]:
        """A run's status and its final records (journal's view, human resolutions included)."""
        info = self.journal.run(run_id)
        assert info is not None
        state = self._states.get(run_id)
        if state is not None and state.active:
            return {
                **state.summary(),
                "records": [r.model_dump(mode="json") for r in state.records],
                "rejects": state.rejects,
            }
        finished = self.journal.get(run_id, "run/finished")
        rejects = [
            {
                "index": int(e.payload["line"]) - 1,
                "field": e.payload["field"],
                "error": e.payload["message"],
            }
            for e in self.journal.events(run_id, type="input.rejected")
        ]
        records = final_records(self.journal, run_id)
        status: Status = "finished" if finished is not None else "incomplete"
        if finished is None and state is not None and state.status == "failed":
            status = "failed"
        return {
            "run_id": run_id,
            "status": status,
            "total": len(records) + len(rejects) if state is None else state.total,
            "done": len(records),
            "rejected": len(rejects),
            "error": state.error if state is not None else None,
            "records": [r.model_dump(mode="json") for r in records],
            "rejects": rejects,
        }

    async def follow(self, run_id: str) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        """Progress events of a run: every record and reject, then its final status."""
        state = self._states.get(run_id)
        if state is None or not (state.active or state.events):
            doc = self.describe(run_id)
            for reject in doc["rejects"]:
                yield "reject", reject
            for record in doc["records"]:
                yield "record", record
            yield doc["status"], {k: v for k, v in doc.items() if k not in ("records", "rejects")}
            return
        sent = 0
        while True:
            waiter = state.changed
            while sent < len(state.events):
                yield state.events[sent]
                sent += 1
            if state.status != "running" and sent >= len(state.events):
                return
            await waiter.wait()

    async def drain(self, seconds: float) -> None:
        """Shutting down: let running runs finish for up to ``seconds``, then stop the rest
        (each ends ``incomplete``, resumable, and its event streams end with that event)."""
        running = [s.task for s in self._states.values() if s.task is not None and s.active]
        if running and seconds > 0:
            await asyncio.wait(running, timeout=seconds)
        await self.close()

    async def close(self) -> None:
        for state in list(self._states.values()):
            if state.task is not None and not state.task.done():
                state.task.cancel()
        for state in list(self._states.values()):
            if state.task is not None:
                # Shutting down: an interrupted run stays resumable from the journal.
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await state.task
