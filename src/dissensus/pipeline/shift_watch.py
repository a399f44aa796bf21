"""The shift watch: the cases of one-panel runs checked together, whichever door made them.

A run checks its own judged cases for a shift when it ends (:mod:`dissensus.pipeline.shift`),
but only from :data:`~dissensus.acceptance.shift.MIN_CASES` judged cases up: the doors
that make one run per panel (a one-panel ``POST /v1/decide``, the chat door, the
LangGraph node, the MCP ``decide`` tool, the Inspect reducer) never get there, so under
``acceptance.on_shift: escalate`` their cases alone could never hold the file. The watch
checks them together: the latest :data:`WINDOW` cases judged with its acceptance file
in the journal, across runs, and journals a check that flags the file, so that every run
started after it, through any door of any process on this journal, carries the hold.

:class:`ShiftWatch` is its core, with no clock of its own: :meth:`ShiftWatch.step` counts
the journal's judged cases (one indexed count) and checks when due. The service steps it
every few seconds off the request path (:mod:`dissensus.serve.shift_watch`); a one-panel
door outside the service keeps one and steps it after each run it makes
(:meth:`ShiftWatch.step_quietly`: a failure is logged, never the door's).

Choices this module makes:

* **When.** A step counts the journal's judged cases; at its first step (when any are
  judged), and whenever that count, less the cases of other files seen at its last look,
  has reached a new multiple of ``every`` (``dissensus serve --shift-every``, a door's
  ``shift_every``; default :data:`EVERY`; 0: no watch) since that look, it reads the
  cases judged with its file and checks when their number reached a new multiple of
  ``every``. So check ``i`` is made at the first step after the ``i * every``-th case is
  judged (a door's step right after that case's run), in one process as after a restart:
  a new watch on the journal looks at its first step and goes on from there. A step
  that is not due costs one indexed count (where cases of other files are judged too,
  the count cannot tell them apart: a step may read the file's cases and find no new
  multiple); a check is one logistic fit and a rank test: well under a second. One step
  at a time: a step called while another is under way (threads of one door) returns at
  once, the one under way counting for both. Only a watch whose acceptance file keeps
  calibration vectors watches.
* **Its level, over the file's life.** The watch spends half of
  ``acceptance.shift_alpha`` (the runs' own checks spend the other half;
  :mod:`dissensus.pipeline.shift`): its check ``i`` is tested at
  :func:`~dissensus.acceptance.shift.check_level` ``(alpha, i)``, ``(alpha / 2) * 6 /
  (pi^2 i^2)``, with ``i`` = the cases judged with the file in the journal ``// every``
  (:func:`~dissensus.pipeline.shift.watch_index`): read from the journal, so a restart
  does not start the sequence again, and a check whose index is the one this watch
  checked last is skipped. Check ``i`` looks at the cases judged up to the ``i *
  every``-th (the latest :data:`WINDOW` of them), seeded by ``i``: a restarted door or
  server (or a second one on the journal, with the same ``every``) that makes check
  ``i`` again on the same cases makes the same check, with the same outcome, so
  repeating it adds no chance of a false flag. The first check comes once ``every``
  cases are judged with the file. The levels of the watch's checks sum to at most
  ``alpha / 2``, so a file whose cases stay exchangeable is flagged by a watch or by a
  run with probability at most ``alpha`` over its life. Caveat: the journal lists cases
  in run order, so a run that is still judging when a later run has started can put a
  case among the first ``i * every`` after check ``i`` was made; a later check of the
  same index then sees other cases and deals its halves anew (a new test at the same
  level). Watches on one journal with different ``every`` number different checks
  alike: each spends a full ``alpha / 2``.
* **What is journalled.** A check that flags the file is journalled as a run of its own
  (``via: shift-watch``, no input, no case): its ``run.started``, the ``acceptance.shift``
  event (the check, how many runs the cases came from and the newest of them) and its
  ``run.finished``, so ``runs list``, ``runs show`` and ``runs verify`` read it like any
  run, and :func:`~dissensus.pipeline.shift.latest_flag` finds it. A check that passes
  journals nothing (the runs list would grow by a run every hundred cases), and once a
  flag of the file is in the journal the watch journals no other (the hold it puts on
  the file lasts until a new file is calibrated). Under ``on_shift: warn`` the flag is
  reported the same way (and logged) and holds nothing.
* **After a small batch run.** ``decide`` and ``runs resume`` (:func:`watch_after_run`)
  step a watch of their own once a run they finished judged fewer than
  :data:`~dissensus.acceptance.shift.MIN_CASES` cases (too few for the run's own check):
  a cron job deciding batches of 8 is checked across its runs as a one-panel door is.
  Such a watch lives for one step, its first: it makes the check of the latest multiple
  of ``every`` the cases judged with the file have reached (check ``i``, once ``i *
  every`` are judged), whether or not this run's cases took the count across it. So
  runs that overlap (two batches finishing before either steps its watch) or a process
  that died before its step leave no check unmade; a check made again is the same
  check of the same cases (same index, same seed), with the same outcome, so it adds no
  chance of a false flag, and costs one fit (well under a second) per small run. A run
  big enough for its own check, a replay of a finished run and a file without
  calibration vectors step none. :class:`RunWatch` says what was done, for the run's summary: the check, or
  that none was due and when the next one is (so this watch logs nothing: its caller
  says it).
* **What a check reads.** The watch keeps the judged cases it read
  (:class:`JudgedCases`, over :class:`~dissensus.store.follow.TypeFollower`): a check
  reads, in one snapshot of the journal, the runs' heads and the judged cases of the
  runs that changed since its last read, after checking that what it read of each of
  them is still the run's (the hash of the run's event at the last sequence number
  read); a run restored, replaced or rewritten is read again whole. So a check looks
  at exactly the cases a read of every judged case would, on a journal being written
  to as on an idle one, and costs the cases judged since plus one light row per run
  (none when nothing was committed since, and one read shared with the review desk's
  followers of the same journal object: :mod:`dissensus.store.follow`):
  0.48 s at 100,000 one-case runs (SQLite), where reading every judged case made a
  check 11.6 s (``benchmarks/bench_shift_watch.py``). It keeps about 1.1–1.3 kB per
  judged case (1,286 bytes measured with the LLMBar file's 53 features). A read that
  fails leaves what the watch kept as it was.
* **Failures.** A check that failed (the flag not journalled, the journal busy) counts
  for nothing: the next step makes the same check of the same cases again, so it spends
  no more of the level. Several watches on one journal may journal the same flag, which
  holds the file once.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from array import array
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple, cast

from dissensus.acceptance.shift import MIN_CASES
from dissensus.errors import ConfigError
from dissensus.pipeline.batch import execute_run, new_run_id, start_run
from dissensus.pipeline.shift import (
    EVERY,
    SHIFT_EVENT,
    WATCH_SHARE,
    ShiftOutcome,
    check_vectors,
    checks_shift,
    latest_flag,
    shift_words,
    watch_index,
)
from dissensus.pipeline.spec import RunSpec
from dissensus.store import event_types as ev
from dissensus.store.follow import TypeFollower
from dissensus.store.journal import Event, Journal

__all__ = [
    "EVERY",
    "WINDOW",
    "Judged",
    "JudgedCases",
    "JudgedRead",
    "RunWatch",
    "ShiftWatch",
    "check_every",
    "journal_flag",
    "judged_vectors",
    "watch_after_run",
]

log = logging.getLogger(__name__)

_after_run_log = logging.getLogger(f"{__name__}.after_run")
_after_run_log.addHandler(logging.NullHandler())
_after_run_log.propagate = False  # its caller says the check in words (RunWatch)

WINDOW = 500
"""Latest judged cases a check of the watch (and ``GET /v1/acceptance``) looks at."""


class Judged(NamedTuple):
    """A judged case as :class:`JudgedCases` keeps it: its file's sha256 as journalled,
    its feature vector (names shared with the cases named alike, values packed: about
    half a kilobyte for the 53 features of the LLMBar file, where the vector read as a
    dict takes seven times that) and its run's id."""

    sha: object
    names: tuple[str, ...] | None
    """The vector's names, in order (``None``: ``values`` is the vector as read)."""
    values: array[float] | dict[str, float]
    run_id: str

    def vector(self) -> dict[str, float]:
        """The feature vector, equal to the one journalled."""
        if self.names is None or isinstance(self.values, dict):
            return dict(cast("dict[str, float]", self.values))
        return dict(zip(self.names, self.values, strict=True))


def _judged(names: dict[tuple[str, ...], tuple[str, ...]]) -> Callable[[Event], Judged | None]:
    """A ``case.acceptance`` event's case, when it carries a feature vector (names kept
    once each in ``names``)."""

    def judged(event: Event) -> Judged | None:
        vector = event.payload.get("vector")
        if not isinstance(vector, dict):
            return None
        sha = (event.payload.get("figures") or {}).get("file_sha256")
        if not all(type(x) is float for x in vector.values()):
            return Judged(sha, None, dict(vector), event.run_id)  # as read (not a float)
        key = tuple(vector)
        return Judged(sha, names.setdefault(key, key), array("d", vector.values()), event.run_id)

    return judged


def judged_vectors(
    journal: Journal, file_sha256: str | None, window: int | None = WINDOW
) -> list[tuple[dict[str, float], str]]:
    """The feature vectors of the latest ``window`` cases (``None``: all of them) judged
    with the acceptance file ``file_sha256`` in the journal, across runs (run order, then
    sequence), each with its run's id: every case read (:class:`JudgedCases` reads the
    same cases on from its last read)."""
    judged = [
        (case.vector(), case.run_id)
        for case in map(_judged({}), journal.events_of_type(ev.CASE_ACCEPTANCE))
        if case is not None and case.sha == file_sha256
    ]
    return judged if window is None else judged[-window:]


@dataclass(frozen=True)
class JudgedRead:
    """One read of :class:`JudgedCases`: the cases judged with one file."""

    cases: list[Judged]
    """The file's judged cases, in :func:`judged_vectors`' order."""
    counted: int
    """The journal's judged cases (every file's, with a vector or without), in the same
    snapshot."""

    def __len__(self) -> int:
        return len(self.cases)

    def vectors(
        self, stop: int | None = None, window: int | None = WINDOW
    ) -> list[tuple[dict[str, float], str]]:
        """The latest ``window`` cases (``None``: all) of the first ``stop`` (``None``:
        all), as :func:`judged_vectors` lists them."""
        cases = self.cases[:stop]
        if window is not None:
            cases = cases[-window:] if window else []
        return [(case.vector(), case.run_id) for case in cases]


class JudgedCases:
    """The cases judged in one journal, read on from the last read: a read reads the
    cases judged since, in one snapshot of the journal, and gives what a full read
    (:func:`judged_vectors`) gives at that snapshot (see the module docstring). A read
    that fails leaves it as it was. Threads may share one."""

    def __init__(self) -> None:
        self._follower: TypeFollower[Judged] = TypeFollower(ev.CASE_ACCEPTANCE, _judged({}))
        self._mine: tuple[str | None, int, int, list[Judged]] | None = None
        """The file, the state's serial and number of cases, and the file's cases of the
        last read (a read whose state extends that one picks the file's new cases only)."""
        self._lock = threading.Lock()

    def read(self, journal: Journal, file_sha256: str | None) -> JudgedRead:
        """The cases judged with the file ``file_sha256``, and every judged case counted."""
        state = self._follower.read(journal)
        with self._lock:
            last = self._mine
        if last is not None and last[0] == file_sha256 and state.extends == last[1]:
            new = state.values[last[2] :]
            mine = last[3] + [c for c in new if c.sha == file_sha256]
        else:
            mine = [c for c in state.values if c.sha == file_sha256]
        with self._lock:
            self._mine = (file_sha256, state.serial, len(state.values), mine)
        return JudgedRead(mine, state.count)

    def forget(self) -> None:
        """Start afresh: the next read reads every judged case."""
        self._follower.forget()
        with self._lock:
            self._mine = None


def journal_flag(journal: Journal, spec: RunSpec, outcome: ShiftOutcome) -> str:
    """Journal a flagged check made across runs as a run of its own (see the module
    docstring); its run's id. Callable where an event loop is running too (the run is
    then ended on a thread of its own)."""
    run_id = new_run_id()
    start_run(journal, None, spec, text="", run_id=run_id, via="shift-watch", lock=True)
    journal.append(run_id, SHIFT_EVENT, dict(outcome), key="run/shift")

    async def finish() -> None:
        async for _ in execute_run(journal, run_id):
            pass  # no input: the loop only ends the run

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        asyncio.run(finish())
    else:
        with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
            pool.submit(asyncio.run, finish()).result()
    return run_id


def check_every(every: object) -> int:
    """A door's ``shift_every``: a whole number of judged cases, 0 or more (0: no watch);
    anything else is a :class:`~dissensus.errors.ConfigError` naming the argument."""
    if isinstance(every, bool) or not isinstance(every, int) or every < 0:
        raise ConfigError(
            "shift_every must be a whole number of judged cases, 0 or more (0: no shift "
            f"watch), got {every!r}",
            field="shift_every",
        )
    return every


class ShiftWatch:
    """Checks the latest cases judged with an acceptance file, each time it is stepped and
    enough were judged since (see the module docstring).

    ``journal`` is the journal a step reads when it is given none (a door that opens its
    journal per call passes it to each step); ``open_journal`` opens the connection a
    flag is journalled with (default: the journal read); ``cases`` keeps what the watch
    read of the journal's judged cases (default: its own; a service shares it with
    ``GET /v1/acceptance``).
    """

    log: logging.Logger = log
    """Where a flag, and a step that failed, are reported."""

    def __init__(
        self,
        spec: RunSpec,
        *,
        every: int = EVERY,
        journal: Journal | None = None,
        open_journal: Callable[[], Journal] | None = None,
        cases: JudgedCases | None = None,
    ) -> None:
        self.journal = journal
        self.cases = cases if cases is not None else JudgedCases()
        """The judged cases read so far (each check reads only those judged since)."""
        self.spec = spec
        self.every = check_every(every)
        self._open = open_journal
        self._seen: int | None = None
        """Cases judged with the file in the journal at this watch's last look (``None``:
        none yet)."""
        self._others = 0
        """Judged cases of other files (or without a vector) in the journal at the last
        look, at least: they never become the file's, so the journal's count less them
        bounds the file's from above."""
        self._check = 0
        """The index of this watch's last check (0: none yet)."""
        self._stopped = threading.Event()
        self._stepping = threading.Lock()
        self.flagged_run: str | None = None
        """The run this watch journalled a flag in, if any."""

    @property
    def enabled(self) -> bool:
        """Whether this watch checks: a positive ``every`` and an acceptance file that
        keeps calibration vectors."""
        return self.every > 0 and checks_shift(self.spec.acceptance)

    def _journal(self, journal: Journal | None) -> Journal:
        found = journal if journal is not None else self.journal
        if found is None:
            raise ConfigError("the shift watch has no journal to read", field="journal")
        return found

    def due(self, journal: Journal | None = None) -> bool:
        """Whether the cases judged with the file may have reached a new multiple of
        ``every`` since this watch's last look, or it has not looked yet and some are
        judged (one count: the journal's judged cases, less those of other files)."""
        judged = self._journal(journal).count_of_type(ev.CASE_ACCEPTANCE)
        if self._seen is None:
            return judged > 0
        most = judged - self._others
        return watch_index(most, self.every) > watch_index(self._seen, self.every)

    def step(self, journal: Journal | None = None) -> ShiftOutcome | None:
        """Check when due; journal a flag (see the module docstring). The check's outcome,
        ``None`` when none was made (not due, or another step under way)."""
        if not self.enabled or not self._stepping.acquire(blocking=False):
            return None
        try:
            return self._step(self._journal(journal))
        finally:
            self._stepping.release()

    def step_quietly(self, journal: Journal | None = None) -> ShiftOutcome | None:
        """:meth:`step`, a failure logged in one line rather than raised: a door's decision
        is made and journalled whatever becomes of the watch (the next step tries again)."""
        try:
            return self.step(journal)
        except Exception as exc:
            if not self._stopped.is_set():
                self.log.warning("shift watch: the check failed (%s); trying again later", exc)
            return None

    @property
    def seen(self) -> int | None:
        """Cases judged with the file in the journal at this watch's last look (``None``:
        it has not looked)."""
        return self._seen

    def _step(self, journal: Journal) -> ShiftOutcome | None:
        acceptance = self.spec.acceptance
        if acceptance is None or not self.due(journal):
            return None
        # Counted in the snapshot the file's cases are read in: a case judged meanwhile is
        # in neither, so `due`'s bound on the file's cases stays above them.
        sha = acceptance.get("sha256")
        judged = self.cases.read(journal, None if sha is None else str(sha))
        counted = judged.counted
        index = watch_index(len(judged), self.every)
        window = judged.vectors(index * self.every)
        if index < 1 or index == self._check or len(window) < MIN_CASES:
            self._looked(counted, len(judged))
            return None
        outcome = check_vectors(
            acceptance,
            [vector for vector, _ in window],
            alpha=self.spec.policy.acceptance.shift_alpha,
            check=index,
            share=WATCH_SHARE,
        )
        if (
            outcome is not None
            and outcome["shifted"]
            and not self._stopped.is_set()
            # Once the file is flagged in this journal, no second flag.
            and latest_flag(journal, outcome.get("file_sha256")) is None
        ):
            outcome["across_runs"] = len({run for _, run in window})
            outcome["newest_run"] = window[-1][1]
            writer = self._open() if self._open is not None else journal
            try:
                self.flagged_run = self._journal_flag(writer, outcome)
            finally:
                if writer is not journal:
                    writer.close()
            self.log.warning("shift watch (run %s): %s", self.flagged_run, shift_words(outcome))
        # Only a check that ran to its end counts: one that failed (the flag not journalled,
        # the journal busy) is made again at the next step, the same check of the same
        # cases, so it spends no more of the level.
        self._looked(counted, len(judged))
        self._check = index
        return outcome

    def _looked(self, counted: int, mine: int) -> None:
        """Remember a look that ran to its end: ``mine`` cases judged with the file, of
        ``counted`` (or more) in the journal."""
        self._seen = mine
        self._others = max(self._others, counted - mine)

    def _journal_flag(self, journal: Journal, outcome: ShiftOutcome) -> str:
        """Journal a flag (:func:`journal_flag`); its run's id."""
        return journal_flag(journal, self.spec, outcome)


@dataclass(frozen=True)
class RunWatch:
    """What the shift watch stepped after a small run did (:func:`watch_after_run`)."""

    run_cases: int
    """Cases the run judged (fewer than a run's own check needs)."""
    every: int
    """Judged cases between two checks of the watch (0: no watch)."""
    file_cases: int | None = None
    """Cases judged with the file in the journal, across runs (``None``: not counted)."""
    outcome: ShiftOutcome | None = None
    """The watch's check, when the run's cases made one due."""
    flagged_run: str | None = None
    """The run the watch journalled its flag in, if it flagged the file."""

    def words(self) -> str:
        """The run's shift check in one paragraph: the watch's check, or why none was made."""
        own = (
            f"This run judged {self.run_cases} case(s), fewer than the {MIN_CASES} its own "
            "shift check needs"
        )
        if self.outcome is not None:
            across = self.outcome.get("across_runs")
            runs = f", from {across} run(s)" if across is not None else ""
            said = (
                f"{own}; the shift watch checked the cases judged with its file across runs{runs}: "
            )
            words = said + shift_words(self.outcome)
            if self.flagged_run is not None:
                words += f" (journalled as run {self.flagged_run})"
            return words
        if self.every == 0 or self.file_cases is None:
            return f"{own}, and the shift watch is off (--shift-every 0): not checked."
        following = (watch_index(self.file_cases, self.every) + 1) * self.every
        return (
            f"{own}; the shift watch checks the cases judged with its file across runs "
            f"every {self.every}: {self.file_cases} so far, the next check at {following}."
        )


def watch_after_run(
    journal: Journal, run_id: str, spec: RunSpec, *, every: int = EVERY
) -> RunWatch | None:
    """Step a shift watch after run ``run_id`` (just finished by this process, with ``spec``)
    when it judged too few cases for its own check (see the module docstring); what was
    done, ``None`` when the run needs no watch (its own check was made, it judged no case,
    it is unfinished, or its file keeps no calibration vectors)."""
    every = check_every(every)
    if not checks_shift(spec.acceptance) or journal.get(run_id, "run/shift") is not None:
        return None
    if journal.get(run_id, "run/finished") is None:
        return None
    run_cases = 0
    for event in journal.events(run_id, type=ev.CASE_ACCEPTANCE):
        run_cases += isinstance(event.payload.get("vector"), dict)
        if run_cases >= MIN_CASES:
            return None  # (a held run judges none: counted to the end, streamed)
    if run_cases == 0:
        return None
    if every == 0:
        return RunWatch(run_cases=run_cases, every=0)
    watch = ShiftWatch(spec, every=every, journal=journal)
    watch.log = _after_run_log
    outcome = watch.step(journal)
    return RunWatch(
        run_cases=run_cases,
        every=every,
        file_cases=watch.seen,
        outcome=outcome,
        flagged_run=watch.flagged_run,
    )
