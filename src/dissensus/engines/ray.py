"""Batch decisions on Ray: blocks of input lines on workers, the journal in the driver.

``dissensus decide PANELS --engine ray [--ray-address ADDR] [--workers N]`` and
``dissensus route PANELS --engine ray`` (the ``ray`` extra). For ``decide`` the Ray
engine is an *executor* of the one run loop (:class:`RayExecutor`, handed to
:func:`dissensus.pipeline.execute_run`): the loop takes the run's lease, enforces its
deadline, journals and counts; the executor plans blocks of whole input lines
(:mod:`dissensus.engines.blocks`) and hands them to a pool of stateful workers (Ray
actors; ``route`` runs a Ray Data ``map_batches`` over such a pool). Each worker
builds the run's specification (:class:`~dissensus.pipeline.spec.RunSpec`, as
journalled in ``run.started``) once, reads its blocks from the file itself, and
returns the block's records, rejects and journal events, which the loop appends to the
one journal of the run *in input order* while the records are emitted in input order:
the journal is the same shape as a local run's (plus the blocks' budget reservations,
below), so ``runs show/export/verify/resume`` work unchanged, and a run started on one
engine can be resumed on the other.

Choices where the design is silent:

* **One batch per block.** The loop appends the cases of a block in one transaction
  (:func:`dissensus.pipeline.batch.execute_run`'s group commit), so the driver's share
  of a case is decoding what the worker sent, rows of a batched insert and its record's
  validation; each worker
  reports the CPU time it spent on a block, so the driver's CPU per panel can be
  measured apart from the workers'.
* **A decoded block is handed over whole.** :meth:`RayExecutor.outcomes` keeps an
  async generator's protocol (``anext``, ``aclose``) but hands each outcome of a block
  already decoded to the loop as a done future (:class:`_Handover`), so the loop takes
  it without a task or a turn of the event loop of its own; only the first outcome of a
  block still to come is awaited, and the loop commits what it holds meanwhile, as
  before. (A generator yielding outcome by outcome had the loop schedule a task per
  case: some 5-7% of the run-loop thread's CPU.)
* **Workers never write the journal.** A worker decides a block against a throw-away
  in-memory journal seeded with whatever the real journal already holds for the
  block's lines (so a resumed, half-done case replays its journalled steps and model
  calls instead of redoing them) and ships every event of the block back. The driver
  appends each case's events contiguously, case after case in line order; a local run
  interleaves the events of the cases it has in flight, so event *order* differs
  between engines while keys, payloads and records are identical.
* **The acceptance monitor is read by the driver.** A worker's journal holds neither
  the blind audits answered under the run's acceptance file nor the suspensions other
  runs journalled, so the driver reads the monitor's verdicts from the run's journal
  once, as this invocation starts (:func:`_monitor_of`; a local run reads them once
  too, at its first automatic commit), and hands them to every worker with the run's
  specification (as a shift check's hold travels in it); each block's runtime decides
  with them (:attr:`~dissensus.pipeline.runtime.Runtime.monitor`). The
  ``acceptance.suspended`` event a block journals (a run-wide event, no case) is
  handed back with the first case settled after it, and the driver appends it with
  that case's events (every block that meets the suspension sends it; the journal
  keeps the first, the same payload); a resumed run's workers get the suspensions the
  run journalled already and journal no other for those strata, as a local resume.
  So the records, the ``case.monitor`` steps and the suspension are a local run's, and
  audits answered while the run goes on count from its resume (or the next run) on,
  as locally.
* **Resume.** A block whose every non-blank line already has a journalled record or
  reject is not sent to a worker again: its records and rejects are replayed from the
  journal by the driver. Other blocks are decided (again), with their journalled
  events as seed, so completed cases inside them are replayed, not redone.
* **Budget: a reservation per block.** A worker spends before the driver journals
  anything of its block, so before the driver sends a block it journals, in a commit of
  its own, what the block may spend (``model.reserved``, key ``reserved/BLOCK/ATTEMPT``,
  :class:`~dissensus.pipeline.run_events.ModelReserved`), and the worker's clients
  enforce that allowance for that block (a fresh :class:`~dissensus.llm.budget.Budget`
  per block). When the block is back, the reservation is settled (``model.settled``,
  key ``settled/BLOCK/ATTEMPT``) by an event appended with the block's last case (one
  transaction), and what the block did not spend is free again for the blocks sent
  after. A resumed run, on either engine, charges each reservation that is not settled
  in full (:func:`dissensus.pipeline.durable.replay_spend`), so no sequence of kills,
  deadlines and resumes sends more requests than the budget allows. **A run that stops
  in the driver** (an interrupt, a deadline, a worker that died for good, an error)
  **settles what it abandons** (:meth:`_Flight.abandon`): it stops the workers of the
  blocks in flight (:meth:`_Decider.stop`, answered on a thread of its own, the
  ``control`` concurrency group, while the block is being decided: from then on the
  worker's clients refuse every attempt, of that block and of any block after it; a
  worker keeps the run's deadline itself too, sent with each block on the wall clock
  (:func:`_wall_deadline`): past it, it starts no attempt, not sending nor charging one,
  and hands the block back unfinished, :attr:`_BlockResult.late`, which stops the run
  as at its deadline) and
  journals each block's settlement marked ``abandoned`` with what the worker had sent
  or had in flight (those at their reserved worst case; 0 for a block not started),
  which a resumed run charges instead of the whole reservation; after an interrupt it
  does the same for blocks back but whose last case the run loop had not journalled,
  with what their worker reported less what the block's cases already journalled charge
  by their own events (the loop may journal a block in several commits; each case's
  charge is reported by the worker, :class:`_Charge`), so a resume charges each attempt
  once (:meth:`_Flight._unjournalled`). Otherwise an interrupted run's reservations, which
  together hold nearly the whole budget left, were charged in full and its resume had
  no budget left (its records changed). What is still charged in full: a driver killed
  (SIGKILL) or a second signal during the stop, a worker that does not answer within
  :data:`_STOP_S` (dead, restarting), a block not started by a worker Ray restarted (the
  one that died may have started it), and the dead attempts of a block. **Sizing**: a
  block's allowance of calls (and of tokens) is the budget left (the limit minus what is
  spent: journalled before this invocation, charged as a resume charges it, plus what
  the blocks back since reported) divided by the blocks that may be in flight together
  (workers x 2 block slots, or the blocks in flight and still to send when fewer),
  rounded up, and at most what the open reservations leave free (:func:`_share`).
  Consequences: a kill charges at most the open reservations beyond what was really
  spent, which can be most of the budget left at the time (a graceful stop only what
  was spent and in flight, above); when the budget
  binds, a Ray run's records may differ from a local run's (which calls are refused
  depends on how the blocks shared the budget, as with the per-worker shares before);
  with an ample budget they are the same. A policy without call and token limits
  (``max_calls`` and ``max_tokens`` null) reserves nothing, and its journal is a local
  run's shape.
* **Failures.** Worker processes are Ray actors restarted on death
  (``max_restarts=-1``); Ray does not retry their blocks (``max_task_retries=0``): the
  driver sends a dead worker's block again, to the restarted worker once it answers
  (:func:`_restarted`, at most :data:`_RESTART_S` later: a block sent while Ray is still
  restarting the worker fails without running), under a new reservation (the next
  attempt), the dead attempt's reservation staying open and charged in full (its spend
  is unknown); when the open reservations would leave the block less than its share of
  what is left, the blocks in flight are taken back first, ahead of their turn, and what
  they did not spend is free again for it (:meth:`_Flight._make_room`: otherwise, with an
  ample budget, the block was sent again with an allowance of 0 and its records changed). A block is a pure function of the input and the journal's seed, so a
  retry gives the same events. A death is the worker's process dying (Ray's
  ``RayActorError``: killed, crashed, or a worker that cannot start) or Ray's memory
  monitor killing it (``OutOfMemoryError``); it counts against the block the driver
  was waiting for, also when the worker died on a block queued before it.
  **A block has** :data:`MAX_ATTEMPTS` **attempts (3) in one invocation**: when its
  worker dies on the last, the run stops with :class:`WorkerDied` (one line naming the
  block's input lines and how many times its worker died, exit 1, as a deadline) instead
  of sending it again, since a block that kills its worker every time (a panel that
  crashes it or exhausts its memory) would otherwise be sent for ever, each attempt
  charging a reservation. Everything journalled stays: the blocks back before it are
  journalled, those in flight are abandoned, as a deadline abandons them (their
  reservations settled with what their workers spent; the dead attempts' stay open and
  are charged in full when the run is resumed), and ``runs resume`` (on either engine, with the attempts counted afresh)
  finishes the run once the cause is gone (the worker's memory, its start; a panel that
  kills every worker needs a new run without it, as a resumed run's input file must be
  the one it started with). The run's actors are ended when its blocks
  are back (or the run stops), so their CPUs are free for the next run.
* **Actors, not Ray Data, for decide.** The driver sends each block to a worker itself
  (:class:`_Flight`: at most two blocks in flight per worker, results taken in block
  order, reservations journalled on the run loop's thread): Ray Data's streaming executor and its iterator's threads, with the
  collector's passes they set off, cost a quarter to a third of the driver's CPU, for
  a job that needs none of what they offer (the blocks are planned, ordered and sized
  already).
* **The collector in the driver.** Ray's modules and state are frozen out of the
  collector's generations once Ray is started (``gc.freeze``), and while a run's blocks
  come back the collector's thresholds are raised to about three blocks' containers
  (:data:`_RUN_GC_THRESHOLD`, restored after): the decoded blocks are hundreds of
  thousands of fresh, acyclic containers that live until the loop journals them, and
  the default thresholds had the collector walk them again and again.
* **Cluster.** Without ``--ray-address`` a local Ray instance is started with
  ``--workers`` CPUs (default: all), no dashboard; with an address the driver joins that
  cluster, whose workers must see the input file at the same path and have
  ``dissensus`` installed. Each worker takes one CPU: ``--workers`` above the cluster's
  CPUs (all of its nodes', busy or not) is refused once joined, a setting to fix (exit
  2 naming ``workers`` and the cluster's CPUs, before ``decide`` creates its run),
  rather than capped: a worker beyond them would never be scheduled (the run waited for
  it for ever), and a cap would run narrower than asked without a word. Standard input
  is sent to the workers inside the blocks.
  A ``HOST:PORT`` address where nothing accepts a connection within :data:`_PROBE_S`
  is refused before ``ray.init`` (which retries it for minutes): exit 2 naming
  ``ray_address`` (:func:`_probe`; ``auto`` and ``ray://`` are left to Ray).
  ``ray.init`` makes SIGTERM end the driver at once (``sys.exit(15)`` wherever it lands:
  exit 15 and Ray's crash report on stderr); a handler the program had (the command
  line's, which makes SIGTERM an interrupt: exit 130 naming the resume command) is put
  back after it (:func:`ensure_ray`); where SIGTERM had its default action, Ray's stays.
* ``lines_per_block`` defaults to 512: big enough that Ray's per-task cost (a few
  milliseconds) is small against the block's work, small enough that two workers stay
  busy on a few thousand panels.
* **What a worker hands back is one object per block**: a pickled
  :class:`_BlockResult` (Ray pickles whatever it moves; the route run's tallies travel
  the same way), each reject as JSON values, each event as ``(key, type, case, canonical
  text of the payload)`` and each record as the payload of its ``case.record`` event
  (JSON values of its own only when it differs from that payload), and what each case's
  new model events charge a resumed run (:class:`_Charge`, for an abandoned block's
  settlement); the driver validates records and rejects again. The payload travels
  once, as the text the journal stores and hashes, so Ray moves and the driver
  unpickles one bytes object per block, and the driver parses each payload once
  (msgspec: integers stay exact; ``json`` for what msgspec cannot take, such as a lone
  surrogate) for the journal's in-memory events.
  Measured on the synthetic 5-agent panels: about 13 kB per panel, against 27 kB when
  each payload travelled both as JSON and as text inside one JSON document per block;
  8.0 kB since escalated cases' steps are thin and the record travels as its event's
  payload (8.3 kB with the record sent a second time). The collector is paused while a
  block is decoded (see :func:`_decoded`). What the driver sends a worker (a block's place and its seed
  events) is JSON text whose shapes are the ``TypedDict`` classes below; a Ray row or
  batch itself (:data:`_Row`) is Ray's format.
* ``$DISSENSUS_FAULT_RAY_KILL`` (``BLOCK:MARKER_PATH`` or ``BLOCK:MARKER_PATH:TIMES``)
  makes the workers that receive block ``BLOCK`` kill their own process, the first
  ``TIMES`` times (default 1; the marker file gets a line per kill): a switch for tests
  only (a killed worker is retried; a block whose worker dies every time stops the run),
  inert unless the variable is set.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import io
import json
import logging
import os
import signal
import threading
import time
from collections import Counter, deque
from collections.abc import (
    AsyncGenerator,
    AsyncIterator,
    Callable,
    Collection,
    Coroutine,
    Iterable,
    Iterator,
)
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, NamedTuple, TypeAlias, cast

import msgspec
from typing_extensions import TypedDict

from dissensus.engines.blocks import Block, block_lines, plan_blocks, plan_text_blocks
from dissensus.errors import ConfigError, DissensusError, InputError
from dissensus.io.jsonl import Reject, RejectSink, bounded_lines, open_text, parse_line
from dissensus.llm.budget import Budget
from dissensus.store import event_types as ev
from dissensus.store.targets import journal_option
from dissensus.types import JsonObject, Panel

if TYPE_CHECKING:
    from dissensus.pipeline.executors import Outcome, RunContext
    from dissensus.pipeline.records import CaseRecord
    from dissensus.store.journal import NewEvent

__all__ = [
    "FAULT_ENV",
    "LINES_PER_BLOCK",
    "MAX_ATTEMPTS",
    "RayExecutor",
    "RayOptions",
    "WorkerDied",
    "decide_ray",
    "ensure_ray",
    "route_ray",
]

LINES_PER_BLOCK = 512
"""Default input lines per block."""

MAX_ATTEMPTS = 3
"""Attempts at a block in one invocation (the first and two after a worker's death):
when the block's worker dies on the last one, the run stops (:class:`WorkerDied`)."""

FAULT_ENV = "DISSENSUS_FAULT_RAY_KILL"
"""``BLOCK:MARKER_PATH[:TIMES]``: kill the worker that gets block ``BLOCK``, the first
``TIMES`` times (default 1), a line in the marker file per kill (tests only)."""


class WorkerDied(DissensusError):
    """A block's Ray worker died on each of the block's :data:`MAX_ATTEMPTS` attempts:
    the run stopped, partial and resumable (exit 1)."""


_DECODE = msgspec.json.Decoder().decode

_Row: TypeAlias = dict[str, Any]
"""A Ray Data row or batch (Ray's format: column name -> value, or -> array)."""


class _BlockFields(TypedDict):
    """A :class:`~dissensus.engines.blocks.Block` as JSON (``dataclasses.asdict``)."""

    index: int
    first_line: int
    n_lines: int
    path: str
    offset: int
    length: int
    lines: list[str] | None


class _SeedEvent(TypedDict):
    """A journalled case event the driver hands a worker (resuming a case)."""

    key: str
    type: str
    case: str | None
    payload: JsonObject


class _Monitor(TypedDict):
    """The acceptance monitor as the driver read it from the run's journal, for the
    workers (:func:`_monitor_of`)."""

    verdicts: dict[str, JsonObject]
    """Stratum -> its verdict (a :class:`~dissensus.acceptance.monitor.MonitorStep` as
    JSON), for the strata with answered audits."""
    journalled: list[_SeedEvent]
    """The run's ``acceptance.suspended`` events an earlier invocation journalled: a
    resume journals no other for their strata."""


class _Allowance(TypedDict):
    """What a worker's client may spend on one block (``None``: no limit of that kind)."""

    calls: int | None
    tokens: int | None


class _WorkItem(TypedDict):
    """One block for a decide worker: where its lines are, the events to resume from and
    what its model calls may spend."""

    block: _BlockFields
    name: str
    seed: list[_SeedEvent]
    allowance: _Allowance
    reservation: str | None
    """The key of the block's reservation (``None``: the policy reserves nothing)."""
    deadline: float | None
    """The run's deadline on the wall clock (``time.time()``; ``None``: no deadline): the
    worker starts no model attempt once it has passed (:class:`_BlockResult.late`)."""


_EventText: TypeAlias = tuple[str, str, str | None, str]
"""A case event a worker hands back: ``(key, type, case, canonical text of the payload)``."""


class _CaseResult(NamedTuple):
    """One line's outcome as a worker hands it back: a record with its events, or a reject."""

    line: int
    record: JsonObject | None
    """The record as JSON values (``CaseRecord.model_dump(mode="json")``), or None: a
    reject, or the record is the payload of the case's ``case/LINE/record`` event."""
    reject: JsonObject | None
    """The reject as JSON values, or None."""
    events: list[_EventText]
    """The case's events not yet journalled, in the order they happened."""


class _Stopped(TypedDict):
    """A stopped worker's answer (:meth:`_Decider.stop`)."""

    restarted: bool
    """Whether Ray restarted this worker since it was made: a block it has not started
    may then have been started by the worker that died (its spend unknown)."""
    spent: dict[str, tuple[int, int]]
    """``(attempts, tokens)`` of each block it started, by reservation key: sent or in
    flight when it stopped (in-flight attempts at their reserved worst case), final
    since no attempt is sent after a stop."""


class _BlockBudget(Budget):
    """A block's allowance on a worker, which the driver can stop (:meth:`stop`)."""

    def stop(self) -> tuple[int, int]:
        """Refuse every attempt from now on; ``(attempts, tokens)``: those sent and those
        in flight, the latter at what they reserved (their worst case)."""
        with self._lock:
            calls_r, tokens_r, _ = self._reserved
            attempts = self._spent.attempts + int(calls_r)
            tokens = self._spent.total_tokens + int(tokens_r)
            # At the limit: every further reservation is refused (calls and tokens).
            self.max_calls = attempts
            self.max_tokens = tokens
        return attempts, tokens


class _Charge(NamedTuple):
    """What a resumed run's budget is charged (:func:`~dissensus.pipeline.durable.replay_spend`)
    for the model events of one case that a block added to the journal."""

    line: int
    attempts: int
    tokens: int


class _BlockResult(NamedTuple):
    """What a decide worker hands back for one block (pickled: one object per block)."""

    block: int
    """The block's index."""
    cases: list[_CaseResult]
    rss_mb: float
    cpu_s: float
    spent_calls: int = 0
    """Attempts the worker's client sent for the block (its allowance's budget)."""
    spent_tokens: int = 0
    """Tokens the worker's client used for the block."""
    charges: tuple[_Charge, ...] = ()
    """What a resumed run charges for each case's new events, once journalled (the cases
    that charge anything, in line order: :func:`_case_charge`)."""
    late: bool = False
    """The run's deadline stopped the block (a model attempt would have started after
    it): its cases are not taken, and the driver stops the run as its deadline says."""


class _RouteSpec(TypedDict):
    """The settings of a route run, for its workers."""

    similarity: str
    no_cache: bool
    theta_s: float | None
    theta_a: float | None
    rules: str | None
    with_matrix: bool
    keep_rows: int


_MISSING = "the Ray engine needs the 'ray' extra (pip install 'dissensus[ray]')"


@dataclass(frozen=True)
class RayOptions:
    """Where and how wide to run."""

    address: str | None = None
    """Ray cluster to join (``ray://`` or ``auto``); None: start a local instance."""
    workers: int | None = None
    """Worker actors (default: the cluster's CPUs)."""
    lines_per_block: int = LINES_PER_BLOCK
    """Input lines per block."""


def _ray() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise ConfigError(_MISSING, field="engine") from exc
    return ray


def ensure_ray(options: RayOptions) -> int:
    """Connect to (or start) Ray, the program's SIGTERM handler kept; the number of
    workers to use."""
    ray = _ray()
    if not ray.is_initialized():
        # Keyword arguments of ray.init, passed through as they are.
        kwargs: dict[str, Any] = {
            "include_dashboard": False,
            "log_to_driver": False,
            # Ray's own INFO and WARNING lines (its start, a cluster joined) are not the
            # command's output: its errors are still shown, and a worker's error comes
            # back to the driver with the block it failed (Ray's exception).
            "logging_level": logging.ERROR,
        }
        if options.address:
            kwargs["address"] = options.address
        else:
            if options.workers:
                kwargs["num_cpus"] = options.workers
        if options.address:
            _probe(options.address)
        own = _own_sigterm()
        try:
            ray.init(**kwargs)
        except (ConnectionError, ValueError) as exc:
            # No cluster at that address, or an address this installation cannot use
            # (``ray://`` without Ray's client): a setting to fix, named as such.
            if not options.address:
                raise
            raise ConfigError(
                f"cannot join the Ray cluster at {options.address!r}: {exc}",
                field="ray_address",
            ) from None
        finally:
            if own is not None:  # ray.init installs a SIGTERM handler of its own
                signal.signal(signal.SIGTERM, own)
        # Ray's modules and state are hundreds of thousands of long-lived objects: moved
        # out of the collector's generations, so its full passes (which the journal's
        # appends trigger) walk only what the run itself keeps.
        gc.freeze()
    cpus = int(ray.cluster_resources().get("CPU", 0))
    if options.workers:
        if options.workers > cpus:
            # Each worker takes a CPU: one beyond the cluster's would never be scheduled,
            # and the run would wait for it for ever.
            where = f"the Ray cluster at {options.address!r}" if options.address else "Ray"
            raise ConfigError(
                f"--workers {options.workers} is more than the {cpus} CPU(s) of {where} "
                f"(each worker takes one): use --workers {max(1, cpus)} or fewer",
                field="workers",
            )
        return options.workers
    return max(1, cpus)


_PROBE_S = 5.0
"""Seconds the driver waits for a ``HOST:PORT`` cluster address to accept a connection
before it calls the cluster unreachable (:func:`_probe`)."""


def _probe(address: str) -> None:
    """Refuse a ``HOST:PORT`` cluster ``address`` where nothing accepts a connection
    (:class:`~dissensus.errors.ConfigError` naming ``ray_address``): ``ray.init`` would
    retry it for minutes before it gives up. ``auto``, ``local`` and ``ray://`` (or any
    other scheme) are left to Ray."""
    import socket

    if "://" in address or address in ("auto", "local"):
        return
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        return
    host = host.removeprefix("[").removesuffix("]") or "127.0.0.1"
    try:
        with socket.create_connection((host, int(port)), timeout=_PROBE_S):
            return
    except OSError as exc:
        reason = exc.strerror or str(exc) or type(exc).__name__
    raise ConfigError(
        f"cannot join the Ray cluster at {address!r} (--ray-address): nothing accepts a "
        f"connection at {host}:{port} ({reason})",
        field="ray_address",
    )


def _own_sigterm() -> Any:
    """The program's own SIGTERM handler (the command line's: SIGTERM is an interrupt),
    or ``SIG_IGN``; ``None`` where SIGTERM has its default action, or off the main thread
    (where no handler can be set)."""
    if threading.current_thread() is not threading.main_thread():
        return None
    handler = signal.getsignal(signal.SIGTERM)
    return None if handler in (signal.SIG_DFL, None) else handler


_Fault: TypeAlias = tuple[int, str, int]
"""``$DISSENSUS_FAULT_RAY_KILL`` read: ``(block, marker path, times)``."""


def _fault() -> _Fault | None:
    """The test switch :data:`FAULT_ENV`, or None (not set: no fault)."""
    raw = os.environ.get(FAULT_ENV)
    if not raw:
        return None
    block, _, rest = raw.partition(":")
    marker, sep, times = rest.rpartition(":")
    if not sep or not times.isdigit():
        marker, times = rest, "1"
    return int(block), marker, int(times)


def _maybe_die(fault: _Fault | None, index: int) -> None:
    """Kill this process when ``fault`` says so for block ``index`` (tests only)."""
    if fault is None or fault[0] != index:
        return
    marker = Path(fault[1])
    killed = len(marker.read_text(encoding="utf-8").splitlines()) if marker.exists() else 0
    if killed >= fault[2]:
        return
    with marker.open("a", encoding="utf-8") as handle:
        handle.write("killed\n")
    os.kill(os.getpid(), signal.SIGKILL)


def _pool(workers: int) -> Any:
    ray = _ray()
    return ray.data.ActorPoolStrategy(size=workers)


def _dataset(items: list[_Row]) -> Any:
    ray = _ray()
    ctx = ray.data.DataContext.get_current()
    ctx.execution_options.preserve_order = True
    ctx.enable_progress_bars = False
    # Ray Data's logger is its own (a line per dataset started and finished on stderr).
    logging.getLogger("ray.data").setLevel(logging.ERROR)
    return ray.data.from_items(items, override_num_blocks=max(1, len(items)))


def _rows(dataset: Any) -> Iterator[_Row]:
    yield from dataset.iter_rows()


# -- decide -----------------------------------------------------------------------------


class _Decider:
    """One Ray worker of a decide run: loads the run's specification once, decides blocks."""

    def __init__(
        self,
        run_id: str,
        spec: JsonObject,
        fault: _Fault | None,
        monitor: _Monitor | None = None,
    ) -> None:
        from dissensus.acceptance.monitor import MonitorStep
        from dissensus.llm.budget import Budget
        from dissensus.pipeline.spec import RunSpec

        self.run_id = run_id
        self.spec = RunSpec.from_started(spec)
        self.policy = self.spec.policy
        monitor = monitor or _Monitor(verdicts={}, journalled=[])
        self.monitor = {
            name: MonitorStep.model_validate(step) for name, step in monitor["verdicts"].items()
        }
        """The acceptance monitor's verdicts as the driver read them from the run's journal
        (:func:`_monitor_of`; none: no audits), for every block's runtime."""
        self.journalled = monitor["journalled"]
        """The run's journalled suspensions, seeded into every block's journal."""
        done = {event["key"] for event in self.journalled}
        self.suspensions = [
            key
            for key in (f"acceptance/suspended/{n}" for n, s in self.monitor.items() if s.suspended)
            if key not in done
        ]
        """The keys of the ``acceptance.suspended`` events a block may journal (the
        suspended strata's the run has not journalled): handed back with the first case
        settled after each."""
        self.budget = Budget(max_calls=0, max_tokens=0)  # each block brings its allowance
        self.fault = fault
        self._guard = threading.Lock()  # the block's budget against a stop (:meth:`stop`)
        self.stopped = False
        self.budgets: dict[str, _BlockBudget] = {}
        """The budgets of the last blocks this worker started, by reservation key."""
        self._backend: Any = None
        self._clients: dict[str | None, Any] = {}
        self._loop = asyncio.new_event_loop()

    def backend(self) -> Any:
        if self._backend is None:
            from dissensus.states import get_backend

            self._backend = get_backend(
                self.policy.reading.similarity, allow_code=self.policy.allow_code or None
            )
        return self._backend

    def client(self, spec: str | None = None) -> Any:
        """The worker's client of model spec ``spec`` (``None``: the run's model), drawing
        from the current block's allowance (:meth:`_allow`)."""
        if spec not in self._clients:
            from dissensus.llm.resolve import resolve_model

            self._clients[spec] = resolve_model(spec or self.spec.model, budget=self.budget)
        return self._clients[spec]

    def _allow(self, allowance: _Allowance, reservation: str | None) -> None:
        """A fresh budget holding the block's allowance, for every client of the worker
        (nothing at all once the worker is stopped: :meth:`stop`)."""
        with self._guard:
            if self.stopped:
                budget = _BlockBudget(max_calls=0, max_tokens=0)
            else:
                budget = _BlockBudget(max_calls=allowance["calls"], max_tokens=allowance["tokens"])
            if reservation is not None:
                self.budgets[reservation] = budget
                while len(self.budgets) > _KEPT_BUDGETS:
                    del self.budgets[next(iter(self.budgets))]
            self.budget = budget
            for client in self._clients.values():
                client.budget = budget

    def stop(self) -> _Stopped:
        """Stop spending for good: no attempt is sent from now on, by the block being
        decided or any block after it; what each block started here had sent or has in
        flight (the driver abandons them: :meth:`_Flight.abandon`). Called from a thread
        of its own (the actor's ``control`` group) while a block may be deciding."""
        with self._guard:
            self.stopped = True
            spent = {key: budget.stop() for key, budget in self.budgets.items()}
        return _Stopped(restarted=_restarted_here(), spent=spent)

    def decide(self, raw: str) -> bytes:
        """One block (a :class:`_WorkItem` as JSON text): its pickled :class:`_BlockResult`."""
        import pickle

        result = self._loop.run_until_complete(self._block(json.loads(raw)))
        return pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL)

    async def _block(self, item: _WorkItem) -> _BlockResult:
        from dissensus.pipeline.durable import PastDeadline
        from dissensus.pipeline.engine import decide_case_events
        from dissensus.pipeline.executors import prefetched
        from dissensus.pipeline.runtime import Runtime
        from dissensus.store.canonical import canonical
        from dissensus.store.journal import Journal

        cpu = time.process_time()
        block = _block_of(item["block"])
        _maybe_die(self.fault, block.index)
        self._allow(item["allowance"], item.get("reservation"))
        memory = Journal(":memory:")
        memory.create_run(self.run_id, kind="decide", meta={})
        for event in (*self.journalled, *item["seed"]):
            memory.append(
                self.run_id, event["type"], event["payload"], key=event["key"], case=event["case"]
            )
        rt = Runtime(
            self.spec,
            memory,
            self.run_id,
            backend_factory=self.backend,
            client_factory=self.client,  # the worker's clients, on the block's allowance
            stop_at=_loop_deadline(item.get("deadline")),
            monitor=self.monitor,  # the driver's: this journal holds no audit
        )
        parsed = (
            (parse_line(Panel, text, file=item["name"], line=number), number)
            for number, text in block_lines(block)
            if text.strip()
        )
        cases: list[_CaseResult] = []
        charges: list[_Charge] = []
        # What each case charges matters to a block with a reservation only (abandon).
        charging = item.get("reservation") is not None
        seeded = {e["key"] for e in item["seed"] if e["type"] in _SPEND_EVENTS}
        unsent = list(self.suspensions)
        window: list[tuple[int, asyncio.Task[Any]]] = []

        async def settle(number: int, task: asyncio.Task[Any]) -> None:
            record, pending = await task
            # A suspension a case journalled (run-wide, as a local run journals it before
            # the case's own events), then what the case wrote before its model calls,
            # and the calls (journalled in the throw-away journal), then the rest of its
            # events, never journalled here.
            # Each payload travels as its canonical text only, made here on the worker:
            # the driver stores and hashes it as it is and parses it once.
            written = (
                *_journalled(memory, self.run_id, unsent),
                *memory.events(self.run_id, case=str(number)),
                *pending,
            )
            events: list[_EventText] = [
                (e.key, e.type, e.case, canonical(e.payload)) for e in written
            ]
            # The record travels as its event's payload when it is that payload (as it
            # is, unless a replayed record's dump differs), not a second time.
            dump = record.model_dump(mode="json")
            key = f"case/{number}/record"
            same = any(e.key == key and e.payload == dump for e in written)
            cases.append(_CaseResult(number, None if same else dump, None, events))
            if charging:
                attempts, tokens = _case_charge(written, seeded)
                if attempts or tokens:
                    charges.append(_Charge(number, attempts, tokens))

        late = False
        try:
            for panel, number in prefetched(rt, parsed):
                if isinstance(panel, Reject):
                    cases.append(_CaseResult(number, None, panel.model_dump(mode="json"), []))
                    continue
                window.append((number, asyncio.create_task(decide_case_events(rt, panel, number))))
                if len(window) >= self.policy.concurrency:
                    await settle(*window.pop(0))
            while window:
                await settle(*window.pop(0))
        except PastDeadline:  # an attempt would have started after the run's deadline
            late = True
            cases, charges = [], []
        finally:
            for _, task in window:
                task.cancel()
            memory.close()
        cases.sort(key=lambda c: c.line)  # rejects were listed before cases in flight
        spent = self.budget.spent
        return _BlockResult(
            block.index,
            cases,
            _rss_mb(),
            time.process_time() - cpu,
            spent.attempts,
            spent.total_tokens,
            tuple(sorted(charges)),
            late,
        )


def _journalled(journal: Any, run_id: str, keys: list[str]) -> list[Any]:
    """The events of ``keys`` that ``journal`` holds now, taken out of ``keys`` (each is
    handed back once per block)."""
    found = [e for e in (journal.get(run_id, key) for key in keys) if e is not None]
    for event in found:
        keys.remove(event.key)
    return found


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


def _rss_mb() -> float:
    """Peak resident memory of this process, in MB."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _fields(block: Block) -> _BlockFields:
    """``block`` as JSON."""
    return _BlockFields(
        index=block.index,
        first_line=block.first_line,
        n_lines=block.n_lines,
        path=block.path,
        offset=block.offset,
        length=block.length,
        lines=list(block.lines) if block.lines is not None else None,
    )


def _block_of(raw: _BlockFields) -> Block:
    lines = raw.get("lines")
    return Block(
        index=raw["index"],
        first_line=raw["first_line"],
        n_lines=raw["n_lines"],
        path=raw["path"],
        offset=raw["offset"],
        length=raw["length"],
        lines=tuple(lines) if lines is not None else None,
    )


def _plan(ctx: RunContext, lines_per_block: int) -> list[Block]:
    if ctx.lines is not None:
        return plan_text_blocks(ctx.lines, lines_per_block)
    return plan_blocks(ctx.name, lines_per_block)


class RayExecutor:
    """The Ray engine as an executor of the one run loop (:func:`dissensus.pipeline.execute_run`).

    ``stats``, when given, receives ``blocks`` (planned), ``blocks_sent`` (decided by
    workers; the rest were complete in the journal), ``worker_rss_mb`` (the largest
    peak RSS a worker reported), ``worker_cpu_s`` (the CPU time, user and system,
    the workers' processes spent deciding the blocks, summed) and
    ``driver_decode_cpu_s`` (the CPU time the driver spent decoding what the workers
    handed back: records, events and their payloads).
    """

    # ``stats`` is the caller's dict, filled with the keys above (the CLI prints them).
    def __init__(
        self,
        options: RayOptions | None = None,
        stats: dict[str, Any] | None = None,  # figures for the caller
    ) -> None:
        self.options = options or RayOptions()
        self.stats = stats if stats is not None else {}

    def outcomes(self, ctx: RunContext) -> AsyncGenerator[Outcome, None]:
        # An async generator's protocol, kept by a hand-over of whole blocks (_Handover).
        return cast("AsyncGenerator[Outcome, None]", _Handover(self._blocks(ctx)))

    async def _blocks(self, ctx: RunContext) -> AsyncGenerator[list[Outcome], None]:
        """The run's outcomes a block at a time, in input order."""
        opts = self.options
        blocks = _plan(ctx, opts.lines_per_block)
        seeds = _seeds(ctx.journal, ctx.run_id)
        todo: list[tuple[Block, list[_SeedEvent]]] = []
        complete: dict[int, bool] = {}
        for block in blocks:
            done = _complete(block, seeds)
            complete[block.index] = done
            if not done:
                seed: list[_SeedEvent] = [
                    e
                    for line in range(block.first_line, block.last_line + 1)
                    for e in seeds.get(str(line), [])
                ]
                todo.append((block, seed))
        info = self.stats
        info.update(
            blocks=len(blocks),
            blocks_sent=len(todo),
            worker_rss_mb=0.0,
            worker_cpu_s=0.0,
            driver_decode_cpu_s=0.0,
        )
        flight: _Flight | None = None
        actors: list[Any] = []
        if todo:
            _warm(ctx.spec.policy.reading.similarity)
            workers = ensure_ray(opts)
            actors = _deciders(
                min(workers, len(todo)),
                (ctx.run_id, ctx.spec.started_fields(), _fault(), _monitor_of(ctx)),
            )
            ledger = _Ledger(ctx, slots=len(actors) * _DEPTH)
            flight = _Flight(ctx, todo, actors, ledger)
        collected = self._collect(ctx, blocks, complete, flight)
        thresholds = gc.get_threshold()
        gc.set_threshold(*_RUN_GC_THRESHOLD)
        finished = cancelled = False
        try:
            async for batch in collected:
                yield batch
            finished = True
        except (asyncio.CancelledError, GeneratorExit):
            cancelled = True  # the run loop stopped taking outcomes (and journals no more)
            raise
        finally:
            try:
                gc.set_threshold(*thresholds)
                await collected.aclose()
                if flight is not None and not finished:
                    # After a deadline the run loop journals what it was handed.
                    end = ctx.stop_at
                    late = end is not None and asyncio.get_running_loop().time() >= end
                    # Settled to the end even when cancelled again meanwhile (an
                    # interrupt's ``asyncio.run`` cancels its tasks once more: _settling).
                    await _settling(flight.abandon(handed=cancelled and not late))
            finally:
                _release(actors)

    async def _collect(
        self,
        ctx: RunContext,
        blocks: list[Block],
        complete: dict[int, bool],
        flight: _Flight | None,
    ) -> AsyncGenerator[list[Outcome], None]:
        """The outcomes of ``blocks`` in order, a block at a time: replayed, or as the
        workers hand them back."""
        info = self.stats
        if flight is not None:
            flight.start()
        for block in blocks:
            if complete[block.index]:
                yield list(_replayed(ctx.journal, ctx.run_id, block))
                continue
            assert flight is not None  # a block not complete was sent
            result, outcomes, decode_s = await flight.next()
            if result.block != block.index:  # _Flight keeps the order; never mix
                raise InputError(
                    f"Ray returned block {result.block} where block {block.index} was due"
                )
            info["worker_rss_mb"] = max(info["worker_rss_mb"], result.rss_mb)
            info["worker_cpu_s"] += result.cpu_s
            info["driver_decode_cpu_s"] += decode_s
            yield outcomes


async def _settling(settle: Coroutine[Any, Any, None]) -> None:
    """Await ``settle`` (a run's abandon: :meth:`_Flight.abandon`) to its end whatever
    cancels the awaiting task meanwhile, then raise the cancellation it got, if any. An
    interrupted run is cancelled more than once: its task and the task it awaits, when
    the loop stops (``asyncio.run`` cancels every task left); a second cancellation
    landing while the workers are being stopped left every reservation in flight open,
    charged in full on resume (nearly the whole budget left). A second *signal* still
    stops the command at once (the command line raises it where it lands)."""
    task = asyncio.ensure_future(settle)
    cancelled = False
    while True:
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            if task.done():  # the settling itself was cancelled, not the awaiting task
                raise
            cancelled = True
            continue
        break
    if cancelled:
        raise asyncio.CancelledError


class _Handover:
    """The outcomes of a stream of blocks, one at a time, as an async generator hands
    them over (``anext``, ``async for``, ``aclose``), where every outcome of a block
    already decoded comes as a *done* future: the run loop takes it without a task of
    its own or a turn of the event loop. Only the first outcome of a block that is
    still to come is a task (waiting for the block), so the loop commits what it holds
    meanwhile, as it would with a generator."""

    def __init__(self, blocks: AsyncGenerator[list[Outcome], None]) -> None:
        self._blocks = blocks
        self._ready: deque[Outcome] = deque()

    def __aiter__(self) -> _Handover:
        return self

    def __anext__(self) -> asyncio.Future[Outcome]:
        loop = asyncio.get_running_loop()
        if self._ready:
            done: asyncio.Future[Outcome] = loop.create_future()
            done.set_result(self._ready.popleft())
            return done
        return loop.create_task(self._first())

    async def _first(self) -> Outcome:
        """The first outcome of the next block that has any (StopAsyncIteration: none)."""
        while not self._ready:
            self._ready.extend(await anext(self._blocks))
        return self._ready.popleft()

    async def aclose(self) -> None:
        self._ready.clear()
        await self._blocks.aclose()


_RUN_GC_THRESHOLD = (250_000, 20, 100)
"""The collector's thresholds while a run's blocks come back (the process's own are
restored after): a decoded block is some hundred thousand fresh containers (about 83,000
for 512 synthetic 5-agent panels), alive until the loop has journalled them, which the
default thresholds (700, 10, 10) would have the collector walk again and again (about a
third of the driver's CPU). The first threshold is about three such blocks: one block
being journalled while the next is decoded stays under it, so the collector runs when
the heap grows, not once a block (50,000 had it walk about a block each time: 9 us of
the driver's CPU per panel, against 3 us)."""

_DEPTH = 2
"""Blocks in flight per worker: one being decided, one waiting, so a worker never idles
while the driver takes its last result."""


class _DecideWorker:
    """A :class:`_Decider` as a Ray actor. Its methods are synchronous (Ray would make an
    actor with a coroutine method an asyncio actor, whose loop is already running when
    the decider runs its own)."""

    def __init__(self, *args: Any) -> None:
        self.decider = _Decider(*args)

    def decide(self, raw: str) -> bytes:
        return self.decider.decide(raw)

    def stop(self) -> _Stopped:
        return self.decider.stop()


def _monitor_of(ctx: RunContext) -> _Monitor:
    """The acceptance monitor's verdicts by stratum, read from the run's journal as this
    invocation starts (:func:`~dissensus.pipeline.runtime.monitor_verdicts`; none for a
    run without an acceptance file), and the suspensions the run journalled already, as
    JSON for the workers: a worker's journal holds only its block's events, neither the
    audits nor the suspensions of the run's journal."""
    from dissensus.pipeline.runtime import monitor_verdicts

    if ctx.spec.acceptance is None:
        return _Monitor(verdicts={}, journalled=[])
    verdicts = monitor_verdicts(ctx.journal, ctx.spec.acceptance)
    journalled = [
        _SeedEvent(key=e.key, type=e.type, case=e.case, payload=e.payload)
        for e in ctx.journal.events(ctx.run_id, type=ev.ACCEPTANCE_SUSPENDED)
    ]
    return _Monitor(
        verdicts={name: step.model_dump(mode="json") for name, step in verdicts.items()},
        journalled=journalled,
    )


def _deciders(n: int, args: tuple[Any, ...]) -> list[Any]:
    """``n`` decide workers (Ray actors, one CPU each), restarted on death. Ray does not
    retry their blocks itself (``max_task_retries=0``): the driver sends a dead worker's
    blocks again, each under a reservation of its own, up to :data:`MAX_ATTEMPTS`
    attempts a block (:class:`_Flight`)."""
    ray = _ray()
    remote = ray.remote(
        num_cpus=1,
        max_restarts=-1,
        max_task_retries=0,
        # ``stop`` answers while a block is being decided (one at a time, as before).
        concurrency_groups={_CONTROL: 1},
    )(_DecideWorker)
    return [remote.remote(*args) for _ in range(n)]


def _send(actor: Any, text: str) -> Any:
    """Send one block (a :class:`_WorkItem` as JSON text) to ``actor``: Ray's reference
    to its result."""
    return actor.decide.remote(text)


def _share(left: int, slots: int, free: int) -> int:
    """A block's allowance of one limit: what is left of it (limit minus spent) divided
    by ``slots``, rounded up, and no more than ``free`` (left minus open reservations)."""
    return max(0, min(free, -(-max(0, left) // max(1, slots))))


class _Ledger:
    """The driver's account of the run's budget: what was spent (journalled before this
    invocation, charged as a resumed run charges it, and what the blocks back since
    report) and what the blocks in flight hold; it journals each block's reservation
    (``model.reserved``) before the block is sent and makes its settlement
    (``model.settled``). A policy without a call or token limit reserves nothing."""

    def __init__(self, ctx: RunContext, slots: int) -> None:
        from dissensus.llm.budget import Budget
        from dissensus.pipeline.durable import replay_spend

        limits = ctx.spec.policy.budget
        self.journal = ctx.journal
        self.run_id = ctx.run_id
        self.max_calls: int | None = limits.max_calls
        self.max_tokens: int | None = limits.max_tokens
        self.slots = slots
        self.limited = self.max_calls is not None or self.max_tokens is not None
        self.calls = 0
        self.tokens = 0
        self.open: dict[str, _Allowance] = {}
        self.attempts: Counter[int] = Counter()
        """The next attempt of each block (reservations journalled by earlier invocations)."""
        if not self.limited:
            return
        spent = replay_spend(ctx.journal, ctx.run_id, Budget())
        self.calls, self.tokens = spent.attempts, spent.total_tokens
        for event in ctx.journal.events(ctx.run_id, type=ev.MODEL_RESERVED):
            block = int(event.payload["block"])
            after = int(event.payload["attempt"]) + 1
            self.attempts[block] = max(self.attempts[block], after)

    def reserve(self, block: Block, waiting: int) -> tuple[str | None, _Allowance]:
        """Journal (one commit) the allowance of ``block``'s next attempt, ``waiting``
        blocks (this one included) still to be sent; its key and the allowance."""
        if not self.limited:
            return None, _Allowance(calls=None, tokens=None)
        from dissensus.pipeline.run_events import ModelReserved

        slots = min(self.slots, len(self.open) + waiting)
        calls = tokens = None
        if self.max_calls is not None:
            left = self.max_calls - self.calls
            held = sum(a["calls"] or 0 for a in self.open.values())
            calls = _share(left, slots, left - held)
        if self.max_tokens is not None:
            left = self.max_tokens - self.tokens
            held = sum(a["tokens"] or 0 for a in self.open.values())
            tokens = _share(left, slots, left - held)
        attempt = self.attempts[block.index]
        self.attempts[block.index] = attempt + 1
        key = f"reserved/{block.index}/{attempt}"
        payload = ModelReserved(
            block=block.index,
            attempt=attempt,
            first_line=block.first_line,
            last_line=block.last_line,
            calls=calls,
            tokens=tokens,
        ).payload()
        self.journal.append(self.run_id, ev.MODEL_RESERVED, payload, key=key)
        allowance = _Allowance(calls=calls, tokens=tokens)
        self.open[key] = allowance
        return key, allowance

    def settle(self, key: str | None, result: _BlockResult) -> NewEvent | None:
        """The block is back: what it spent is charged, the rest of its allowance is free
        again; the ``model.settled`` event to append with the block's events."""
        if key is None:
            return None
        from dissensus.pipeline.run_events import ModelSettled
        from dissensus.store.journal import NewEvent

        self.release(key, result)
        payload = ModelSettled(
            reservation=key, attempts=result.spent_calls, tokens=result.spent_tokens
        ).payload()
        return NewEvent(ev.MODEL_SETTLED, payload, _settled_key(key))

    def release(self, key: str, result: _BlockResult) -> None:
        """The block of reservation ``key`` is back (its worker spends nothing more): what
        it spent is charged, the rest of its allowance is free again (once: its
        settlement, :meth:`settle`, may follow)."""
        if self.open.pop(key, None) is not None:
            self.calls += result.spent_calls
            self.tokens += result.spent_tokens

    def starved(self, waiting: int) -> bool:
        """Whether the open reservations hold so much that the next block (``waiting``
        still to be sent, this one included) would get less than its share of what is
        left (:func:`_share`): after a worker's death, whose reservation is charged in
        full, until the blocks in flight are back."""
        if not self.limited:
            return False
        slots = min(self.slots, len(self.open) + waiting)
        held_calls = sum(a["calls"] or 0 for a in self.open.values())
        held_tokens = sum(a["tokens"] or 0 for a in self.open.values())
        for limit, spent, held in (
            (self.max_calls, self.calls, held_calls),
            (self.max_tokens, self.tokens, held_tokens),
        ):
            if limit is None:
                continue
            left = limit - spent
            if _share(left, slots, left - held) < _share(left, slots, left):
                return True
        return False

    def abandoned(self, key: str, attempts: int, tokens: int) -> NewEvent:
        """The ``model.settled`` of a reservation whose block the run abandoned (its events
        are never journalled): ``attempts`` and ``tokens`` are what its worker sent or had
        in flight when stopped, which a resumed run charges
        (:func:`~dissensus.pipeline.durable.replay_spend`)."""
        from dissensus.pipeline.run_events import ModelSettled
        from dissensus.store.journal import NewEvent

        self.open.pop(key, None)
        payload = ModelSettled(
            reservation=key, attempts=attempts, tokens=tokens, abandoned=True
        ).payload()
        return NewEvent(ev.MODEL_SETTLED, payload, _settled_key(key))

    def lose(self, key: str | None) -> None:
        """The block's worker died: all of its allowance counts as spent (the reservation
        stays open in the journal, so a resumed run charges it too)."""
        if key is None:
            return
        allowance = self.open.pop(key)
        self.calls += allowance["calls"] or 0
        self.tokens += allowance["tokens"] or 0


def _settled_key(key: str) -> str:
    """The key of the settlement of reservation ``key``."""
    return "settled/" + key.removeprefix("reserved/")


class _Sent(NamedTuple):
    """A block sent to a worker."""

    ref: Any
    """Ray's reference to the result."""
    actor: Any
    block: Block
    seed: list[_SeedEvent]
    reservation: str | None


class _Deaths:
    """How many times each block's worker died in this invocation, against the block's
    ``attempts`` (:data:`MAX_ATTEMPTS`)."""

    def __init__(self, attempts: int = MAX_ATTEMPTS) -> None:
        if attempts < 1:
            raise ValueError(f"a block needs at least one attempt, not {attempts}")
        self.attempts = attempts
        self.counts: Counter[int] = Counter()

    def died(self, block: int) -> bool:
        """Count a death of block ``block``'s worker: whether the block has an attempt
        left (False: that was its last)."""
        self.counts[block] += 1
        return self.counts[block] < self.attempts


def _worker_died(
    run_id: str, name: str, block: Block, times: int, error: BaseException, journal: str = ""
) -> WorkerDied:
    """The one-line error of a run stopped because ``block``'s worker died ``times`` times,
    the last with ``error``."""
    first, last = block.first_line, block.last_line
    lines = f"input line {first}" if first == last else f"input lines {first}-{last}"
    where = "" if name == "-" else f" of {name}"
    return WorkerDied(
        f"run {run_id}: the Ray worker deciding {lines}{where} (block {block.index}) died "
        f"{times} time{'s' if times != 1 else ''} ({_death_cause(error)}); the run stopped "
        "and its journalled steps stay: once what kills the worker is fixed (its memory, "
        "its start), finish the run (a panel of those lines that kills every worker "
        "needs a new run without it: a run's input cannot change) with: "
        f"dissensus runs resume {run_id}{journal_option(journal) if journal else ''}"
    )


_CAUSE_CHARS = 160
"""Most characters of the cause a :class:`WorkerDied` message quotes."""


def _death_cause(error: BaseException) -> str:
    """Ray's last error in a few words: its class (``ActorUnavailableError``,
    ``ActorDiedError``, ``OutOfMemoryError``), and the exception a worker that failed to
    start raised (the last line of Ray's message), at most :data:`_CAUSE_CHARS` characters."""
    text = f"Ray's last error: {type(error).__name__}"
    if getattr(error, "actor_init_failed", False):
        lines = [line.strip() for line in str(error).splitlines() if line.strip()]
        text += ", the worker failed to start" + (f": {lines[-1]}" if lines else "")
    if len(text) > _CAUSE_CHARS:
        text = text[: _CAUSE_CHARS - 3].rstrip() + "..."
    return text


def _deaths() -> tuple[type[BaseException], ...]:
    """Ray's errors that mean a worker died: its process died or could not start
    (``RayActorError``), or Ray's memory monitor killed it (``OutOfMemoryError``)."""
    errors = _ray().exceptions
    return (errors.RayActorError, errors.OutOfMemoryError)


class _Flight:
    """The blocks on their way to and from the workers, taken back in block order: each
    block goes to a worker as soon as one of its :data:`_DEPTH` places is free (the
    worker whose result was taken last getting the next), after its reservation is
    journalled (:class:`_Ledger`), all on the run loop's thread; only waiting for a
    result and decoding it happen on a thread of their own. A block whose worker died
    goes again, to the restarted worker, under a new reservation, up to ``attempts``
    (:data:`MAX_ATTEMPTS`) in all: a death on the last raises :class:`WorkerDied`."""

    def __init__(
        self,
        ctx: RunContext,
        todo: list[tuple[Block, list[_SeedEvent]]],
        actors: list[Any],
        ledger: _Ledger,
        attempts: int = MAX_ATTEMPTS,
    ) -> None:
        self.ctx = ctx
        self.waiting = deque(todo)
        self.actors = actors
        self.ledger = ledger
        self.flight: deque[_Sent] = deque()
        self.deaths = _Deaths(attempts)
        self.handed: dict[str, _BlockResult] = {}
        """The results of the blocks handed to the run loop (their cases decoded, and
        dropped: what the worker spent, in all and by case), by reservation key, until
        their settlement is journalled with their last case."""
        self.early: dict[str, tuple[_BlockResult, list[Outcome], float]] = {}
        """Blocks taken back ahead of their turn (:meth:`_make_room`), by reservation key."""

    def start(self) -> None:
        for _ in range(_DEPTH):
            for actor in self.actors:
                self._next_to(actor)

    def _next_to(self, actor: Any) -> None:
        if self.waiting:
            block, seed = self.waiting.popleft()
            self.flight.append(self._send(actor, block, seed, len(self.waiting) + 1))

    def _send(self, actor: Any, block: Block, seed: list[_SeedEvent], waiting: int) -> _Sent:
        key, allowance = self.ledger.reserve(block, waiting)
        item = _WorkItem(
            block=_fields(block),
            name=self.ctx.name,
            seed=seed,
            allowance=allowance,
            reservation=key,
            deadline=_wall_deadline(self.ctx.stop_at),
        )
        ref = _send(actor, json.dumps(item, ensure_ascii=False))
        return _Sent(ref, actor, block, seed, key)

    async def next(self) -> tuple[_BlockResult, list[Outcome], float]:
        """The next block's result, its outcomes (the last one carrying the settlement of
        its reservation) and the CPU s spent decoding it."""
        deaths = _deaths()
        while True:
            sent = self.flight[0]
            try:
                early = self.early.pop(sent.reservation, None) if sent.reservation else None
                if early is not None:
                    result, outcomes, decode_s = early
                else:
                    result, outcomes, decode_s = await asyncio.to_thread(_take, sent.ref)
            except deaths as exc:
                self.ledger.lose(sent.reservation)
                if not self.deaths.died(sent.block.index):
                    # The blocks in flight are abandoned (their reservations settled
                    # with what their workers spent: abandon); the run loop committed the blocks back
                    # before this one while it waited for it.
                    raise _worker_died(
                        self.ctx.run_id,
                        self.ctx.name,
                        sent.block,
                        self.deaths.counts[sent.block.index],
                        exc,
                        self.ctx.journal.path,
                    ) from None
                # Sent again once the restarted worker answers: a block sent to a worker
                # Ray is still restarting fails at once, an attempt lost for nothing.
                await asyncio.to_thread(_restarted, sent.actor)
                waiting = len(self.waiting) + 1
                await self._make_room(waiting)
                self.flight[0] = self._send(sent.actor, sent.block, sent.seed, waiting)
                continue
            break
        if result.late:
            from dissensus.pipeline.durable import PastDeadline

            # The block stays in flight: the stop settles its reservation with what its
            # worker sent (abandon), and the run loop stops as at its deadline.
            raise PastDeadline()
        self.flight.popleft()
        settled = self.ledger.settle(sent.reservation, result)
        if sent.reservation is not None:
            journal, run_id = self.ctx.journal, self.ctx.run_id
            for key in [k for k in self.handed if journal.get(run_id, _settled_key(k))]:
                del self.handed[key]
            self.handed[sent.reservation] = result._replace(cases=[])
        if settled is not None:
            if outcomes:
                # In the transaction that appends the block's last case: its events are
                # durable when the reservation stops counting.
                last = outcomes[-1]
                outcomes[-1] = dataclasses.replace(last, events=[*last.events, settled])
            else:
                self.ctx.journal.append_batch(self.ctx.run_id, [settled])
        self._next_to(sent.actor)
        return result, outcomes, decode_s

    async def _make_room(self, waiting: int) -> None:
        """Before a dead worker's block is sent again: when the open reservations leave
        it less than its share (:meth:`_Ledger.starved`: the dead attempt is charged its
        whole reservation, its spend unknown, and the blocks in flight hold the rest),
        take the blocks in flight back first, ahead of their turn, so that what they did
        not spend is free again for it (with an ample budget it then gets what an
        undisturbed block gets, and its records are the same). A block whose worker
        died too, or stopped at the deadline, is left for its turn."""
        deaths = _deaths()
        for sent in list(self.flight)[1:]:
            if not self.ledger.starved(waiting):
                return
            key = sent.reservation
            if key is None or key in self.early:
                continue
            try:
                taken = await asyncio.to_thread(_take, sent.ref)
            except deaths:
                continue  # its turn raises it again (Ray keeps the error)
            self.early[key] = taken
            if not taken[0].late:
                self.ledger.release(key, taken[0])

    async def abandon(self, *, handed: bool) -> None:
        """The run stopped before its blocks were all journalled: stop the workers of the
        blocks in flight (no attempt is sent any more) and settle each block's
        reservation with what its worker had sent or had in flight (``abandoned``); with
        ``handed``, also those of the blocks handed to the run loop whose last case is
        not journalled (the run loop was cancelled: it journals nothing more), with what
        their worker reported less what their journalled cases' own events charge
        (:meth:`_unjournalled`). A worker that does not answer (dead, restarting, too
        slow), or a restarted one that never started the block (the worker that died
        may have), leaves the reservation open: charged in full on resume. Best effort:
        the journal failing here leaves them open too."""
        sends = [s for s in self.flight if s.reservation is not None]
        answers = await asyncio.to_thread(_stop_all, [s.actor for s in sends]) if sends else {}
        events: list[NewEvent] = []
        for sent in sends:
            key = sent.reservation
            answer = answers.get(id(sent.actor))
            assert key is not None
            if answer is None:
                continue
            if key in answer["spent"]:
                attempts, tokens = answer["spent"][key]
            elif answer["restarted"]:
                continue
            else:  # not started, and a stopped worker never will
                attempts = tokens = 0
            events.append(self.ledger.abandoned(key, attempts, tokens))
        journal, run_id = self.ctx.journal, self.ctx.run_id
        try:
            if handed:
                for key, result in self.handed.items():
                    if journal.get(run_id, _settled_key(key)) is None:
                        events.append(self.ledger.abandoned(key, *self._unjournalled(result)))
            fresh = [e for e in events if journal.get(run_id, e.key) is None]
            if fresh:
                journal.append_batch(run_id, fresh)
        except Exception:  # the journal went away: the reservations stay open
            return

    def _unjournalled(self, result: _BlockResult) -> tuple[int, int]:
        """``(attempts, tokens)`` that the cases not journalled of a block handed to the
        run loop spent: what its worker spent less what its journalled cases' own events
        charge a resumed run (``model.call``, ``model.failed``, ``model.sent``:
        :class:`_Charge`), so that a resume charges each of the block's attempts once.

        Exact because a case's events and its record are appended in one commit, the
        loop appends a block's cases in line order (in one commit or several: it commits
        every :data:`~dissensus.pipeline.batch.BLOCK_CASES` cases), so those journalled
        come first, and it appends nothing once cancelled, which is when this is called.
        Wherever that would not hold, the error is an over-charge: the count stops at the
        first case with a charge whose record is not journalled (one journalled after it
        is charged twice), a case journalled after this count is charged twice, and a
        settlement is never below 0. A case is never charged by neither: its record is
        journalled only with its events. A kill before the settlement is journalled
        leaves the reservation open, charged in full besides the journalled cases."""
        journal, run_id = self.ctx.journal, self.ctx.run_id
        attempts, tokens = result.spent_calls, result.spent_tokens
        for charge in result.charges:
            if journal.get(run_id, f"case/{charge.line}/record") is None:
                break
            attempts -= charge.attempts
            tokens -= charge.tokens
        return max(0, attempts), max(0, tokens)


def _wall_deadline(stop_at: float | None) -> float | None:
    """The run's deadline ``stop_at`` (the running event loop's clock) on the wall clock,
    which a worker's process shares (a cluster's machines keep it in step)."""
    if stop_at is None:
        return None
    return time.time() + (stop_at - asyncio.get_running_loop().time())


def _loop_deadline(deadline: float | None) -> float | None:
    """A wall-clock ``deadline`` (:func:`_wall_deadline`) on the running event loop's clock."""
    if deadline is None:
        return None
    return asyncio.get_running_loop().time() + (deadline - time.time())


def _stop_all(actors: list[Any]) -> dict[int, _Stopped | None]:
    """Stop each worker (:meth:`_Decider.stop`, on its ``control`` thread): its answer by
    ``id(actor)``, ``None`` when it did not answer within :data:`_STOP_S`."""
    ray = _ray()
    unique = {id(actor): actor for actor in actors}
    refs = {
        key: actor.stop.options(concurrency_group=_CONTROL).remote()
        for key, actor in unique.items()
    }
    ray.wait(list(refs.values()), num_returns=len(refs), timeout=_STOP_S)
    out: dict[int, _Stopped | None] = {}
    for key, ref in refs.items():
        try:
            out[key] = ray.get(ref, timeout=0)
        except Exception:  # dead, restarting, not back in time
            out[key] = None
    return out


_CONTROL = "control"
"""The decide workers' concurrency group of :meth:`_Decider.stop` (a thread of its own, so
it answers while a block is being decided; blocks stay one at a time)."""

_KEPT_BUDGETS = 4
"""Budgets of the last blocks a worker started that it keeps for :meth:`_Decider.stop`
(the driver has at most :data:`_DEPTH` blocks in flight on a worker)."""

_STOP_S = 10.0
"""Seconds the driver waits for its workers to answer a stop (:meth:`_Flight.abandon`);
the reservations of a worker that does not answer stay open (charged in full)."""


def _restarted_here() -> bool:
    """Whether Ray restarted the worker this runs in (unknown: True)."""
    try:
        return bool(_ray().get_runtime_context().was_current_actor_reconstructed)
    except Exception:
        return True


_RESTART_S = 120.0
"""Seconds the driver waits for a dead worker to answer again (restarted by Ray) before it
sends the worker's block again (:func:`_restarted`)."""


def _restarted(actor: Any) -> None:
    """Wait until ``actor`` answers (Ray restarts a dead worker), at most
    :data:`_RESTART_S`. Whatever the outcome, the block is sent next: to a worker that is
    not back (dead for good, or still restarting) it fails at once, and that attempt
    counts, so a worker that cannot start ends the run after :data:`MAX_ATTEMPTS`."""
    ray = _ray()
    # A call Ray retries until the actor is alive again (the block's own are never retried).
    ready = actor.__ray_ready__.options(max_task_retries=-1).remote()
    try:
        ray.get(ready, timeout=_RESTART_S)
    except ray.exceptions.RayError:  # dead for good, or not back in time
        return


def _release(actors: list[Any]) -> None:
    """End the run's workers (their CPUs are free for the next run at once)."""
    if not actors:
        return
    ray = _ray()
    for actor in actors:
        ray.kill(actor, no_restart=True)


def _take(ref: Any) -> tuple[_BlockResult, list[Outcome], float]:
    """The block Ray hands back for ``ref`` (waiting for it), decoded (:func:`_decoded`)."""
    raw: bytes = _ray().get(ref)
    return _decoded(raw)


def _decoded(raw: bytes) -> tuple[_BlockResult, list[Outcome], float]:
    """A block a worker handed back (a pickled :class:`_BlockResult`), decoded:
    ``(result, outcomes, CPU s this thread spent decoding it)``."""
    import pickle

    start = time.thread_time()
    # The decoded payloads are trees of JSON values, never cycles: the collector's passes
    # over the driver's heap, which so many fresh containers trigger, would cost more
    # than the decoding itself. Paused for the block only (the rest of the run is not).
    collecting = gc.isenabled()
    gc.disable()
    try:
        result: _BlockResult = pickle.loads(raw)
        outcomes = _outcomes(result.cases)
    finally:
        if collecting:
            gc.enable()
    decode = time.thread_time() - start
    return result, outcomes, decode


def _outcomes(cases: list[_CaseResult]) -> list[Outcome]:
    """What a worker decided for each line of a block, as the run loop takes it."""
    from dissensus.pipeline.executors import Outcome
    from dissensus.pipeline.records import CaseRecord
    from dissensus.store.journal import NewEvent

    out: list[Outcome] = []
    for case in cases:
        if case.reject is not None:
            out.append(Outcome(line=case.line, reject=Reject.model_validate(case.reject)))
            continue
        events = [
            NewEvent(type_, _payload(text), key, where, text)
            for key, type_, where, text in case.events
        ]
        record = case.record if case.record is not None else _record_payload(case.line, events)
        out.append(Outcome(line=case.line, record=CaseRecord.model_validate(record), events=events))
    return out


def _record_payload(line: int, events: list[NewEvent]) -> JsonObject:
    """The payload of line ``line``'s record event (a worker sent the record as that)."""
    key = f"case/{line}/record"
    for event in reversed(events):  # the record is the case's last event
        if event.key == key:
            payload: JsonObject = event.payload
            return payload
    raise InputError(f"a worker sent neither a record nor a reject for line {line}")


def _payload(text: str) -> JsonObject:
    """The payload whose canonical text a worker sent (the same values: integers exact)."""
    try:
        value = _DECODE(text)
    except (msgspec.DecodeError, UnicodeEncodeError):  # e.g. a lone surrogate in a string
        value = json.loads(text)
    if not isinstance(value, dict):
        raise InputError(f"a worker sent an event payload that is not an object: {text[:80]!r}")
    return value


async def decide_ray(
    journal: Any,
    run_id: str,
    *,
    on_reject: Callable[[Reject], None] | None = None,
    options: RayOptions | None = None,
    stats: dict[str, Any] | None = None,  # figures for the caller (bench_scale)
    deadline_s: float | None = None,
) -> AsyncIterator[CaseRecord]:
    """Decide (or finish deciding) a run on Ray: the one run loop with a :class:`RayExecutor`."""
    from dissensus.pipeline.batch import execute_run

    async for record in execute_run(
        journal,
        run_id,
        on_reject=on_reject,
        deadline_s=deadline_s,
        executor=RayExecutor(options, stats),
    ):
        yield record


def _seeds(journal: Any, run_id: str) -> dict[str, list[_SeedEvent]]:
    """The run's journalled case events, by case (line)."""
    out: dict[str, list[_SeedEvent]] = {}
    for event in journal.events(run_id):
        if event.case is not None:
            out.setdefault(event.case, []).append(
                {"key": event.key, "type": event.type, "case": event.case, "payload": event.payload}
            )
    return out


def _complete(block: Block, seeds: dict[str, list[_SeedEvent]]) -> bool:
    """Every non-blank line of ``block`` has a journalled record or reject."""
    if not seeds:
        return False
    for number, text in block_lines(block):
        if not text.strip():
            continue
        keys = {e["key"] for e in seeds.get(str(number), [])}
        if f"case/{number}/record" not in keys and f"reject/{number}" not in keys:
            return False
    return True


def _replayed(journal: Any, run_id: str, block: Block) -> Iterator[Outcome]:
    """The outcomes of a block whose every line is journalled, read from the journal."""
    from dissensus.pipeline.executors import Outcome
    from dissensus.pipeline.records import CaseRecord

    for number, text in block_lines(block):
        if not text.strip():
            continue
        reject = journal.get(run_id, f"reject/{number}")
        if reject is not None:
            yield Outcome(line=number, reject=reject.read_as(Reject), journalled=True)
            continue
        record = journal.get(run_id, f"case/{number}/record")
        yield Outcome(line=number, record=record.read_as(CaseRecord))


# -- route ------------------------------------------------------------------------------


class _Router:
    """One Ray worker of a route run: loads rules and backend once, routes blocks."""

    def __init__(self, spec: _RouteSpec) -> None:
        from dissensus.states.reading import Thresholds
        from dissensus.states.routing import RuleSet
        from dissensus.states.similarity import get_backend

        self.spec = spec
        self.backend = get_backend(spec["similarity"], cache=not spec["no_cache"])
        self.ruleset = RuleSet.load(spec["rules"]) if spec["rules"] else RuleSet.default()
        self.thresholds = Thresholds.for_model(self.backend.name, spec["theta_s"], spec["theta_a"])

    def __call__(self, batch: _Row) -> dict[str, list[Any]]:
        import pickle

        from dissensus.states.stream import route_stream

        results: list[Any] = []
        for raw in batch["item"]:
            item = json.loads(str(raw))
            block = _block_of(item["block"])
            from dissensus.io.views import parse_panel_view

            parsed = [
                (n, parse_panel_view(text, file=item["name"], line=n))
                for n, text in block_lines(block)
                if text.strip()
            ]
            rejects = [r.model_dump(mode="json") for _, r in parsed if isinstance(r, Reject)]
            # Numbered: each record carries its input line, as a local run's does.
            panels = [(n, p) for n, p in parsed if not isinstance(p, Reject)]
            # The local path itself on the block's panels: the same records by construction.
            out = io.StringIO()
            tally = route_stream(
                panels,
                self.backend,
                self.thresholds,
                self.ruleset,
                handle=out,
                with_matrix=self.spec["with_matrix"],
                keep_rows=self.spec["keep_rows"],
                numbered=True,
            )
            # Records end with "\n" only: an id's U+2028, U+0085 or \x1c-\x1e (which
            # str.splitlines splits at) is part of its record, written raw.
            lines = out.getvalue().split("\n")
            if lines and not lines[-1]:
                lines.pop()
            states = Counter({str(state): n for state, n in tally.states.items()})
            actions = tally.actions
            rows = tally.rows
            results.append(
                pickle.dumps(
                    {
                        "index": block.index,
                        "lines": lines,
                        "rejects": rejects,
                        "states": states,
                        "actions": actions,
                        "rows": rows,
                        "rss_mb": _rss_mb(),
                    }
                )
            )
        return {"result": results}


def route_ray(
    path: str,
    *,
    similarity: str,
    no_cache: bool,
    theta_s: float | None,
    theta_a: float | None,
    rules: str | None,
    handle: IO[str] | None,
    sink: RejectSink,
    with_matrix: bool = False,
    keep_rows: int = 0,
    options: RayOptions | None = None,
) -> Any:
    """Route every panel of ``path`` on Ray; the same records and rejects as a local run.

    Returns a :class:`dissensus.states.stream.RouteTally`.
    """
    import pickle

    from dissensus.states.stream import RouteTally

    opts = options or RayOptions()
    if path == "-":
        name = "-"  # as the local reader names standard input
        with open_text("-") as stdin:  # surrogateescape, as the local reader
            blocks = plan_text_blocks(list(bounded_lines(stdin)), opts.lines_per_block)
    else:
        name = path
        if not Path(path).is_file():
            raise InputError(f"file not found: {path}")
        # The workers read the file themselves, their working directory not the
        # driver's (a cluster's is wherever it was started): an absolute path.
        blocks = plan_blocks(str(Path(path).resolve()), opts.lines_per_block)
    tally = RouteTally()
    if not blocks:
        return tally
    spec = _RouteSpec(
        similarity=similarity,
        no_cache=no_cache,
        theta_s=theta_s,
        theta_a=theta_a,
        rules=str(Path(rules).resolve()) if rules else None,
        with_matrix=with_matrix,
        keep_rows=keep_rows,
    )
    _warm(similarity)
    workers = ensure_ray(opts)
    items = [
        {"item": json.dumps({"block": _fields(b), "name": name}, ensure_ascii=False)}
        for b in blocks
    ]
    ds = _dataset(items).map_batches(
        _Router,
        fn_constructor_args=(spec,),
        batch_size=1,
        batch_format="numpy",
        compute=_pool(min(workers, len(items))),
        num_cpus=1,
    )
    for row in _rows(ds):
        result = pickle.loads(row["result"])
        for reject in result["rejects"]:
            sink.add(Reject.model_validate(reject))
        if handle is not None:
            for line in result["lines"]:
                handle.write(line + "\n")
        tally.states.update(result["states"])
        tally.actions.update(result["actions"])
        tally.total += len(result["lines"])
        for pair in result["rows"]:
            if len(tally.rows) < keep_rows:
                tally.rows.append(pair)
    return tally


def _warm(similarity: str) -> None:
    """Distil the static table in the driver first, so workers do not race to do it."""
    if similarity.strip().lower() in {"static", "static-all-minilm-l6-v2"}:
        from dissensus.states.static import distil_static

        distil_static()
