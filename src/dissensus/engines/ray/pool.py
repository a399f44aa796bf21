"""The driver's handle on the pool of decide workers as Ray actors: made (one CPU each,
restarted on death, blocks never retried by Ray), sent a block, stopped on their
``control`` thread while a block is being decided, waited for after a restart, and ended
when the run's blocks are back."""

from __future__ import annotations

from functools import cache
from typing import Any

from dissensus.engines.ray.cluster import _ray
from dissensus.engines.ray.messages import _Stopped
from dissensus.engines.ray.worker import _DecideWorker


def _deciders(n: int, args: tuple[Any, ...]) -> list[Any]:
    """``n`` decide workers (Ray actors, one CPU each), restarted on death. Ray does not
    retry their blocks itself (``max_task_retries=0``): the driver sends a dead worker's
    blocks again, each under a reservation of its own, up to :data:`MAX_ATTEMPTS`
    attempts a block (:class:`_Flight`)."""
    remote = _actor_class()
    return [remote.remote(*args) for _ in range(n)]


@cache
def _actor_class() -> Any:
    """The decide workers' Ray actor class, made once a process: Ray exports a class to
    its cluster (pickled, its code hashed) the first time a job makes an actor of it and
    not again, where a class made anew for every run was exported again by each run."""
    return _ray().remote(
        num_cpus=1,
        max_restarts=-1,
        max_task_retries=0,
        # ``stop`` answers while a block is being decided (one at a time, as before).
        concurrency_groups={_CONTROL: 1},
    )(_DecideWorker)


def _send(actor: Any, text: str) -> Any:
    """Send one block (a :class:`_WorkItem` as JSON text) to ``actor``: Ray's reference
    to its result."""
    return actor.decide.remote(text)


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


_STOP_S = 10.0
"""Seconds the driver waits for its workers to answer a stop (:meth:`_Flight.abandon`);
the reservations of a worker that does not answer stay open (charged in full)."""


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
