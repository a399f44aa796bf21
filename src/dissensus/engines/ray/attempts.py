"""A block's attempts in one invocation: the Ray errors that mean its worker died
(:func:`_deaths`), the deaths counted against :data:`MAX_ATTEMPTS` (:class:`_Deaths`),
and the one-line :class:`WorkerDied` that stops the run when the last attempt dies."""

from __future__ import annotations

from collections import Counter

from dissensus.engines.blocks import Block
from dissensus.engines.ray.cluster import _ray
from dissensus.errors import DissensusError
from dissensus.store.targets import journal_option

MAX_ATTEMPTS = 3
"""Attempts at a block in one invocation (the first and two after a worker's death):
when the block's worker dies on the last one, the run stops (:class:`WorkerDied`)."""


class WorkerDied(DissensusError):
    """A block's Ray worker died on each of the block's :data:`MAX_ATTEMPTS` attempts:
    the run stopped, partial and resumable (exit 1)."""

    def __init__(self, message: str, *, resume: str = "") -> None:
        super().__init__(message)
        self.resume = resume
        """The resume command the message ends with (``decide`` adds its output)."""


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
    resume = f"dissensus runs resume {run_id}{journal_option(journal) if journal else ''}"
    return WorkerDied(
        f"run {run_id}: the Ray worker deciding {lines}{where} (block {block.index}) died "
        f"{times} time{'s' if times != 1 else ''} ({_death_cause(error)}); the run stopped "
        "and its journalled steps stay: once what kills the worker is fixed (its memory, "
        "its start), finish the run (a panel of those lines that kills every worker "
        "needs a new run without it: a run's input cannot change) with: "
        f"{resume}",
        resume=resume,
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
