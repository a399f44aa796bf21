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

The package, in the order data flows:

* :mod:`~dissensus.engines.ray.cluster`: the options, Ray imported when used, a cluster
  joined or a local instance started.
* :mod:`~dissensus.engines.ray.executor`: :class:`RayExecutor` and :func:`decide_ray`, the
  run loop's executor: blocks planned, replayed or sent, handed over in input order.
* :mod:`~dissensus.engines.ray.resume`: what the journal holds already (seeds, complete
  blocks replayed).
* :mod:`~dissensus.engines.ray.ledger`: the budget shared between blocks (reservations
  and their settlements).
* :mod:`~dissensus.engines.ray.flight`: the blocks on their way to and from the workers,
  taken back in order, sent again after a death, abandoned on a stop.
* :mod:`~dissensus.engines.ray.pool`: the workers as Ray actors (made, sent a block,
  stopped, waited for, ended).
* :mod:`~dissensus.engines.ray.messages`: what the driver and the workers send each other.
* :mod:`~dissensus.engines.ray.worker`: a decide worker, deciding blocks against a
  throw-away journal; :mod:`~dissensus.engines.ray.charge`: what a case's events charge a
  resumed run.
* :mod:`~dissensus.engines.ray.codec`: a block handed back, decoded into the run loop's
  outcomes; :mod:`~dissensus.engines.ray.handover`: those outcomes handed to the loop.
* :mod:`~dissensus.engines.ray.attempts`: a block's attempts and the worker deaths that
  stop a run; :mod:`~dissensus.engines.ray.fault`: the test switch that kills a worker.
* :mod:`~dissensus.engines.ray.route`: ``route`` as a Ray Data ``map_batches``.

Choices this module makes:

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
  depends on how the blocks shared the budget, as with the per-worker shares before),
  and it binds for a block needing more than its share even while the run's budget has
  room: that refusal names the block's share and the run's limit
  (:class:`~dissensus.engines.ray.worker._BlockBudget`), so "all 15 attempts allowed"
  under ``max_calls: 60`` does not read as a wrong limit; with a budget whose share
  covers the block needing most (workers x 2 x its calls) they are the same. A policy without call and token limits
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
  (:data:`_RUN_GC_THRESHOLD`, one raise shared with the process's other runs, restored
  when the last ends): the decoded blocks are hundreds of thousands of fresh, acyclic
  containers that live until the loop journals them, and the default thresholds had
  the collector walk them again and again.
* **Cluster.** Without ``--ray-address`` (nor ``$RAY_ADDRESS``, which Ray joins when
  given no address: probed and named as the option is) a local Ray instance is started with
  ``--workers`` CPUs (default: all; more than this machine's is refused before Ray
  starts, naming ``workers``: it started a worker process per CPU claimed), no
  dashboard; an empty address is refused (naming ``ray_address``), not taken for none; with an address the driver joins that
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
  A SIGTERM landing while ``ray.init`` itself runs (Ray's handler already in place, the
  program's not yet back) is turned into the interrupt the program's handler would have
  made of it, what Ray started meanwhile stopped: ``decide`` then ends with exit 130 and
  no run created, not with Ray's silent exit 15.
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

from dissensus.engines.ray.attempts import MAX_ATTEMPTS, WorkerDied
from dissensus.engines.ray.cluster import LINES_PER_BLOCK, RayOptions, ensure_ray
from dissensus.engines.ray.executor import RayExecutor, decide_ray
from dissensus.engines.ray.fault import FAULT_ENV
from dissensus.engines.ray.route import route_ray

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
