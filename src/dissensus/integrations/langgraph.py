"""A LangGraph node that decides a panel, routes by action and asks a human on escalation.

>>> from dissensus.integrations.langgraph import decision_node
>>> node = decision_node(policy=policy, journal="journal.sqlite",
...                      panel=lambda state: Panel(id=state["id"], outputs=state["outputs"]),
...                      goto={"auto": "ship", "human": "ship", "escalate": "triage"})
>>> graph.add_node("decide", node)                       # doctest: +SKIP

The node builds the panel from the graph state, calls :func:`dissensus.pipeline.decide`
(the pipeline every door uses) with the node's journal, writes the record into the state
under ``key`` (``"dissensus"`` by default, as the record's JSON) and returns a
``Command`` whose ``goto`` is ``goto[record.action]``.

On ``escalate`` with ``on_escalate="interrupt"`` (the default) the node calls
``langgraph.types.interrupt`` with a :class:`~dissensus.integrations._review.ReviewRequest`
(review id, question, options, each agent's decision and reasons, ``content_sha256``).
The graph is resumed with ``Command(resume={"decision": ..., "note": ...,
"content_sha256": ...})`` (or, with several interrupts pending, ``Command(resume={
interrupt_id: {...}, ...})``); the resolution goes through the CLI's review path
(:func:`~dissensus.integrations._review.resolve_checked`): journalled, the reviewer named
by the node's ``reviewer`` resolver from the run's config (never from the resume value),
a stale hash refused. The node then returns the final record (``action: human``).

Choices where the framework is silent:

* **Default routing**: ``goto`` is empty by default, and an action with no entry adds no
  ``goto``, so the node's static edges apply (none: the graph ends after the node).
  Actions are ``auto``, ``auto_explain``, ``concord``, ``escalate`` (only with
  ``on_escalate="route"``) and ``human``; a ``goto`` key that is none of them (a typo
  would never route) or a target that is not a non-empty string is a
  :class:`~dissensus.errors.ConfigError` when the node is made (an ``escalate`` entry
  is kept with ``on_escalate="interrupt"``, where it never applies, so that one map can
  serve both settings). A node is made before it is
  added to a graph, so it cannot know the graph's node names, and LangGraph does not
  refuse a ``Command`` to a node it lacks: it logs a warning (``wrote to unknown channel
  branch:to:NAME, ignoring it``) and the graph ends after the node, the case unrouted.
  Check the targets against the graph's nodes.
* **Arguments of the wrong kind** are a :class:`~dissensus.errors.ConfigError` naming the
  argument when the node is made: ``goto`` that is no mapping, ``key`` that is not a
  non-empty string, ``panel`` or ``reviewer`` that is not callable, ``policy_dir`` that
  is no path. Each would otherwise fail later as Python's own ``TypeError``, ``panel``
  and ``key`` only at the graph's first case.
* **The record's key**: LangGraph drops, without a word, an update to a key the graph's
  state lacks, and so the record when ``key`` is not in the state schema. The node
  checks ``key`` against the state's channels the first time it runs (what LangGraph
  lets a running node read) and logs a warning (``the graph's state has no key
  'NAME'``) when the state lacks it; the case is decided and journalled all the same.
* **Replays**: LangGraph runs an interrupted node again from its start on resume, so
  the node's run id is derived from the thread id and the task's checkpoint namespace
  (stable across resumes and processes): the second ``decide`` replays the journalled
  steps and finds the same review item.
* **A refused answer** (invalid payload, stale hash, a decision the review path rejects,
  text that is not valid Unicode) does not fail the graph: the node interrupts again with
  the same request and an ``error`` field saying why, since LangGraph keeps the first
  answer given to an interrupt for good.
* **Only an answer given now is tried.** A resumed node runs again from its start, and
  each of its ``interrupt`` calls returns, in order, the answers given so far; the call
  after the last of them raises ``GraphInterrupt``, and only then is an answer tried:
  the one the invocation resuming the graph gave this task. LangGraph also keeps the
  value of the latest ``Command(resume=value)`` while the task is pending and hands it
  to every later run as the newest answer, so resumed with no new answer
  (``invoke(None, config)``) the node was handed its refused answer again, tried it, and
  resolved the case with it once what refused it had gone (a claim released or expired,
  another reviewer named in the config). The node reads, from the running task's config,
  the answers it was handed before and the resume values of the invocation
  (:func:`_fresh_answer`): an answer sent by interrupt id is the one given now; a
  ``Command(resume=value)`` value is one given now unless the answers handed before
  already end with it. Given none, the node drops the held answer untried and asks again
  (``error``: :data:`REPLAYED`). The same answer sent again with ``Command(resume=...)``
  cannot be told from that replay and is dropped too: an answer refused once never
  resolves the case; a new one (another note, say) or one sent by interrupt id is tried.
  Without those config keys (another LangGraph), the newest answer is tried, and the
  node says so once per process (a warning on ``dissensus.integrations.langgraph``: the
  replay guard is off): it was silent, and an answer refused once could resolve the case
  on a later resume with no word of why.
* **Resolved elsewhere**: when the item was resolved meanwhile (``dissensus review
  resolve``, another service), the journalled resolution stands and the node returns
  its record without interrupting.
* **Reviewer**: the default resolver reads ``config["configurable"]["reviewer"]``, set
  by the application that resumes the graph (not by the reviewer's payload); ``None``
  leaves the resolution unnamed, and an unnamed resolution is refused while any
  reviewer holds a live claim on the case (the node interrupts again with the reason).
  A resolver that raises or returns anything but a string or ``None`` fails the run
  with a :class:`~dissensus.errors.ConfigError` naming the resolver: the application's
  error, not the reviewer's (resumed again once fixed, the held answer is tried, as after
  a failed journal below). So
  does a name no resolution may hold, by the rule of ``review resolve --reviewer`` and
  ``dissensus mcp --reviewer`` (a control or invisible character, more than 128
  characters): it was shown to the reviewer as their answer's error, which no answer
  could mend, and the node asked again and again. A blank name is unset (``None``), as
  an empty ``--reviewer`` is: it was journalled as the reviewer ``''``. The default
  resolver takes the configured value as it is: a number or a mapping there is refused,
  not journalled as its ``str``.
* **A journal that fails while an answer is resolved** (busy past
  ``$DISSENSUS_JOURNAL_BUSY_TIMEOUT``, unreachable) fails the run with its
  :class:`~dissensus.store.JournalError`; nothing is journalled, and the held answer is
  tried again when the graph is resumed (``invoke(None, config)``). It was shown to the
  reviewer as the error of their answer (``journal /srv/j.sqlite is locked by another
  writer``), which the answer could not mend. LangGraph keeps nothing that tells a failed
  try from a refused one, so the process remembers the answer whose try failed (by
  journal, review id and run id, the latest 1,024): resumed in another process, the node
  asks again rather than try an answer that may have been refused.
* **Shift watch**: the node makes one run per panel, too few cases for a run's own
  shift check, so it keeps a shift watch (:mod:`dissensus.pipeline.shift_watch`) and
  steps it after each decision: every ``shift_every`` judged cases (default 100; 0: no
  watch) it checks the latest cases judged with the policy's acceptance file in the
  journal, and journals a check that flags the file, so that under ``acceptance.on_shift:
  escalate`` the node's later cases are held as ``dissensus decide`` holds them. A
  failed check is logged and made again at the next step.
* The journal is a path, opened per call: LangGraph runs nodes on worker threads and an
  SQLite connection belongs to the thread that opened it. ``":memory:"`` and an empty
  (or blank) path are refused when the node is made, as the review item must outlive
  the call that opened it and SQLite makes both a throw-away database (the journal opens
  paths, never ``file:`` URIs, so ``file::memory:`` names an ordinary file). The journal
  is opened and closed once when the node is made (an SQLite file not there yet is
  created): anything that is no path (``journal=5``) or a journal that cannot be opened
  (a directory, in a folder that does not exist) is a ConfigError naming ``journal``
  then, not a failure of every call. A relative path is resolved then, against the
  working folder the node is made in, as the Inspect reducer resolves one: opened per
  call against the working folder of the moment, a node made in one folder and called
  after the application (a notebook's ``%cd``) had moved to another decided into a new
  journal there, its review items absent from the journal the node had checked. It is
  opened as every door opens a journal
  (:func:`dissensus.store.journal.open_journal`): with ``$DISSENSUS_SIGNING_KEY`` set,
  each run the node decides or resolves is sealed, and a key set but unusable is a
  ConfigError naming the variable when the node is made.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import ValidationError

from dissensus.integrations._extras import missing_extra

try:
    from langchain_core.runnables import RunnableConfig
    from langgraph.errors import GraphInterrupt
    from langgraph.types import Command, interrupt
except ModuleNotFoundError as exc:  # named with the extra that installs it
    raise missing_extra(exc, door="the LangGraph integration", extra="langgraph") from exc

from dissensus.cases import as_panel
from dissensus.errors import ConfigError, DissensusError, InputError
from dissensus.integrations._journal import checked_journal, open_journal
from dissensus.integrations._review import (
    ReviewAnswer,
    resolve_checked,
    resolved_record,
    review_request,
)
from dissensus.pipeline import CaseRecord, RunSpec, decide
from dissensus.pipeline.records import FinalAction
from dissensus.pipeline.review import find_item, reviewer_name_problem
from dissensus.pipeline.shift_watch import EVERY, ShiftWatch
from dissensus.pipeline.spec import PolicyLike
from dissensus.store import Journal, JournalError
from dissensus.types import Panel

__all__ = ["DecisionNode", "config_reviewer", "decision_node", "node_run_id"]

log = logging.getLogger("dissensus.integrations.langgraph")

_CONFIG_KEY_READ = "__pregel_read"
"""Where LangGraph puts, in a running node's config, the reader of the graph's state
channels (a key the state lacks is a ``KeyError``)."""
_CONFIG_KEY_SCRATCHPAD = "__pregel_scratchpad"
"""Where LangGraph puts a running task's scratchpad: the answers the task was handed
(``resume``) and the value of the latest ``Command(resume=value)`` (``get_null_resume``)."""
_CONFIG_KEY_RESUME_MAP = "__pregel_resume_map"
"""Where LangGraph puts the answers of a ``Command(resume={interrupt_id: value})``."""

REPLAYED = (
    "the last answer was not applied and is not tried again (it was refused, or its try "
    "failed on the journal in a process since stopped; an answer refused once never "
    "resolves the case): send a new answer, or send it again by interrupt id"
)
"""The ``error`` of a request asked again when the graph was resumed with no new answer
(``invoke(None, config)``), or with the last answer again, after that answer had been
refused, or its try had failed in another process (which this one cannot tell apart)."""

_NONE = object()
"""No answer (``None`` is no answer LangGraph hands back, but a value all the same)."""

_FAILED_MAX = 1024
_FAILED: OrderedDict[tuple[str, str, str], object] = OrderedDict()
"""The answer whose try failed on the journal or the reviewer resolver (not refused), by
journal, review id and node run id, in this process: tried again when the graph is
resumed with no new answer. The oldest are dropped past ``_FAILED_MAX`` (such an answer
is then asked for again, never tried)."""
_FAILED_LOCK = threading.Lock()


def _remember_failed(key: tuple[str, str, str], answer: object) -> None:
    with _FAILED_LOCK:
        _FAILED[key] = answer
        _FAILED.move_to_end(key)
        while len(_FAILED) > _FAILED_MAX:
            _FAILED.popitem(last=False)


def _fresh_answer(config: RunnableConfig) -> int | None:
    """The place, among the answers a re-run node is handed, of the one the invocation
    running it gave this task (``Command(resume=...)``), or ``None`` when it gave none
    (``invoke(None, config)``, or a resume by id naming another interrupt).

    LangGraph keeps the answers a task was handed (its resume list) and also the value of
    the latest ``Command(resume=value)`` for as long as the task is pending, and appends
    that value again at each re-run: resumed with no new answer, the node is handed the
    answer it tried last time once more, as the newest. That value is the one given now
    only while the resume list does not already end with it. An answer sent by interrupt
    id is the last of the resume list when the run starts (the very object of the
    invocation's resume map). Read from the running node's config (what LangGraph keeps
    there); with a LangGraph keeping neither, ``-1``: the newest answer is taken as given
    now.
    """
    conf = config.get("configurable") or {}
    pad = conf.get(_CONFIG_KEY_SCRATCHPAD)
    given = getattr(pad, "resume", None)
    null = getattr(pad, "get_null_resume", None)
    if not isinstance(given, list) or not callable(null):
        _warn_unguarded()
        return -1
    by_id = conf.get(_CONFIG_KEY_RESUME_MAP)
    if isinstance(by_id, Mapping):
        if given and any(v is given[-1] for v in by_id.values()):
            return len(given) - 1
        return None
    latest = null(False)
    if latest is None or (given and _same(given[-1], latest)):
        return None
    return len(given)


_UNGUARDED_WARNED = threading.Event()


def _warn_unguarded() -> None:
    """Say, once per process, that this LangGraph keeps no task scratchpad where the node
    reads which answer was given now: the replay guard is off, and said to be off."""
    if _UNGUARDED_WARNED.is_set():
        return
    _UNGUARDED_WARNED.set()
    log.warning(
        "this LangGraph puts no task scratchpad (%s) in a running node's config: "
        "decision_node cannot tell an answer given now from one handed back again on "
        "resume, and tries the newest answer it was handed (a refused answer may then "
        "resolve the case on a later resume); use the LangGraph version in "
        "constraints.txt",
        _CONFIG_KEY_SCRATCHPAD,
    )


def _to_try(answers: list[object], fresh: int | None, failed: object) -> object:
    """The answer to try of those a run was handed (``_NONE``: none, each was tried):
    the one given now, else one whose try failed (not refused) in an earlier run."""
    if fresh is not None:
        return answers[-1] if fresh == -1 or fresh >= len(answers) else answers[fresh]
    if failed is not _NONE and any(_same(a, failed) for a in answers):
        return failed
    return _NONE


def _same(a: object, b: object) -> bool:
    try:
        return bool(a == b)
    except Exception:  # a value that cannot be compared is no copy of another
        return False


def _take_failed(key: tuple[str, str, str]) -> object:
    with _FAILED_LOCK:
        return _FAILED.pop(key, _NONE)


PanelBuilder = Callable[[Any], Panel | Mapping[str, Any]]
ReviewerResolver = Callable[[RunnableConfig], str | None]


def _as_panel(built: object) -> Panel:
    """The panel the builder gave, read as :func:`dissensus.pipeline.decide` reads one: a
    :class:`~dissensus.errors.InputError` naming what is wrong, not a raw validation error."""
    found = as_panel(built)
    if not isinstance(found, Panel):
        raise InputError(f"a panel is a Panel or a mapping, not {type(built).__name__}")
    return found


def config_reviewer(config: RunnableConfig) -> str | None:
    """The default reviewer resolver: ``config["configurable"]["reviewer"]``, as it is set
    (a value that is no string is refused by the node, never made a name by ``str``)."""
    value: str | None = (config.get("configurable") or {}).get("reviewer")
    return value


def node_run_id(config: RunnableConfig) -> str:
    """The run id of a node's decision: stable for a task across resumes and processes."""
    conf = config.get("configurable") or {}
    basis = f"{conf.get('thread_id', '')}\x1f{conf.get('checkpoint_ns', '')}"
    return "lg-" + hashlib.sha256(basis.encode("utf-8")).hexdigest()[:16]


def _check_kinds(
    *, goto: object, key: object, panel: object, reviewer: object, policy_dir: object
) -> None:
    """The node's arguments of the wrong kind, each a :class:`ConfigError` naming it when
    the node is made (never Python's own ``TypeError`` then, nor one at the first case)."""
    if not isinstance(goto, Mapping):
        raise ConfigError(
            f"goto maps an action to a node name (a mapping), not {type(goto).__name__}",
            field="goto",
        )
    if not (isinstance(key, str) and key):
        raise ConfigError(f"key must be a state key (a non-empty string), got {key!r}", field="key")
    for name, fn in (("panel", panel), ("reviewer", reviewer)):
        if not callable(fn):
            raise ConfigError(
                f"{name} must be a function of the graph's "
                f"{'state' if name == 'panel' else 'config'}, not {type(fn).__name__}",
                field=name,
            )
    if policy_dir is not None and not (
        isinstance(policy_dir, str | os.PathLike) and isinstance(os.fspath(policy_dir), str)
    ):
        raise ConfigError(
            f"policy_dir is a folder's path, not {type(policy_dir).__name__}", field="policy_dir"
        )


class DecisionNode:
    """The callable ``decision_node`` returns (a LangGraph node taking state and config)."""

    def __init__(
        self,
        *,
        policy: PolicyLike,
        journal: str | Path,
        panel: PanelBuilder,
        on_escalate: Literal["interrupt", "route"],
        goto: Mapping[str, str],
        key: str,
        reviewer: ReviewerResolver,
        policy_dir: str | Path | None = None,
        shift_every: int = EVERY,
    ) -> None:
        if on_escalate not in ("interrupt", "route"):
            raise ConfigError(
                f"on_escalate must be 'interrupt' or 'route', got {on_escalate!r}",
                field="on_escalate",
            )
        if str(journal).strip() in ("", ":memory:"):
            raise ConfigError(
                "the journal must be a file (not ':memory:' or empty, which SQLite makes a "
                f"throw-away database, got {str(journal)!r}): a review item outlives the "
                "node's call",
                field="journal",
            )
        _check_kinds(goto=goto, key=key, panel=panel, reviewer=reviewer, policy_dir=policy_dir)
        unknown = sorted(set(goto) - set(get_args(FinalAction)), key=repr)
        if unknown:
            raise ConfigError(
                f"goto names no action a record can have: {', '.join(map(repr, unknown))} "
                f"(the actions: {', '.join(get_args(FinalAction))})",
                field="goto",
            )
        bad = [k for k, v in goto.items() if not (isinstance(v, str) and v)]
        if bad:
            raise ConfigError(
                f"goto[{bad[0]!r}] must be a node name (a non-empty string)", field="goto"
            )
        # Built once, every file the policy names loaded and checked: a bad policy fails
        # when the graph is built, not at its first case.
        self.spec = RunSpec.from_policy(policy, base_dir=policy_dir)
        self.policy = self.spec.policy
        # Against the working folder now: the journal checked here is the one every call uses.
        self.journal = checked_journal(journal, resolve=True)
        self.panel = panel
        self.on_escalate = on_escalate
        self.goto = dict(goto)
        self.key = key
        self._key_checked = False
        self.reviewer = reviewer
        # The shift watch of this node's cases (dissensus.pipeline.shift_watch).
        self.shift_watch = ShiftWatch(self.spec, every=shift_every)

    def __call__(self, state: Any, config: RunnableConfig) -> Command[Any]:
        self._check_key(config)
        panel = _as_panel(self.panel(state))
        with open_journal(self.journal) as journal:
            return self._decide(panel, config, journal)

    def _check_key(self, config: RunnableConfig) -> None:
        """Warn, once per node, when the graph's state has no ``key``: LangGraph drops an
        update to a key its state lacks without a word, and the record with it. The
        state's keys are the channels LangGraph lets a running node read (nothing is
        checked when this LangGraph passes no reader)."""
        if self._key_checked:
            return
        read = (config.get("configurable") or {}).get(_CONFIG_KEY_READ)
        if not callable(read):
            return
        self._key_checked = True
        try:
            read(self.key)
        except KeyError:
            log.warning(
                "the graph's state has no key %r (decision_node key=): LangGraph drops the "
                "record from the node's update, ignoring it; add %r to the state schema",
                self.key,
                self.key,
            )
        except Exception:  # a reader of another LangGraph: nothing is known of the keys
            return

    def _decide(self, panel: Panel, config: RunnableConfig, journal: Journal) -> Command[Any]:
        record = decide(panel, self.spec, journal=journal, run_id=node_run_id(config))
        self.shift_watch.step_quietly(journal)
        if record.action == "escalate" and self.on_escalate == "interrupt":
            assert record.review_id is not None
            record = self._ask(journal, record.review_id, config)
        return self._command(record)

    def _ask(self, journal: Journal, review_id: str, config: RunnableConfig) -> CaseRecord:
        error: str | None = None
        fresh = _fresh_answer(config)
        failed_key = (str(self.journal), review_id, node_run_id(config))
        # The answers interrupt() returned so far in this run: LangGraph hands a re-run
        # node every answer given to it, oldest first, and the call after the last of them
        # raises. Only then is an answer tried, and only one this run was given (see
        # _fresh_answer), or one whose try failed on the journal or the resolver.
        answers: list[object] = []
        handled = False
        while True:
            status = find_item(journal, review_id)
            done = resolved_record(journal, status)
            if done is not None:
                _take_failed(failed_key)
                return done
            request = review_request(status, error=error).model_dump(mode="json")
            try:
                answers.append(interrupt(request))
                continue
            except GraphInterrupt:
                if handled or not answers:
                    raise
            handled = True
            raw = _to_try(answers, fresh, _take_failed(failed_key))
            if raw is _NONE:
                error = REPLAYED
                continue
            try:
                record, error = self._try(journal, review_id, raw, config)
            except (JournalError, ConfigError):
                # Not the answer's fault: tried again when the graph is resumed.
                _remember_failed(failed_key, raw)
                raise
            if record is not None:
                return record

    def _try(
        self, journal: Journal, review_id: str, raw: object, config: RunnableConfig
    ) -> tuple[CaseRecord | None, str | None]:
        """The record ``raw`` resolved the item to, or why it was refused."""
        reviewer = self._reviewer(config)
        try:
            answer = ReviewAnswer.model_validate(raw)
            return (
                resolve_checked(
                    journal,
                    review_id,
                    decision=answer.decision,
                    note=answer.note,
                    content_sha256=answer.content_sha256,
                    reviewer=reviewer,
                ),
                None,
            )
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "resume"
            return None, f"field {where!r}: {first['msg']}"
        except JournalError:
            # The journal's failure (busy past its timeout, unreachable), not the answer's:
            # the run fails, and the held answer is tried again when it is resumed.
            raise
        except DissensusError as exc:
            return None, str(exc)

    def _reviewer(self, config: RunnableConfig) -> str | None:
        """Who resumed, as the node's resolver names them: a resolver that raises or names
        no string is the application's error (a :class:`ConfigError` naming it), not the
        reviewer's."""
        name = getattr(self.reviewer, "__qualname__", None) or repr(self.reviewer)
        try:
            who = self.reviewer(config)
        except Exception as exc:
            raise ConfigError(
                f"the reviewer resolver {name} failed: {type(exc).__name__}: {exc}",
                field="reviewer",
            ) from exc
        if who is not None and not isinstance(who, str):
            raise ConfigError(
                f"the reviewer resolver {name} returned {type(who).__name__}, "
                "not a name (a string) or None",
                field="reviewer",
            )
        if who is None or not who.strip():
            return None  # blank: unset, as an empty --reviewer or $DISSENSUS_REVIEWER is
        problem = reviewer_name_problem(
            who.strip(), f"the name the reviewer resolver {name} returned"
        )
        if problem is not None:
            raise ConfigError(problem, field="reviewer")
        return who.strip()

    def _command(self, record: CaseRecord) -> Command[Any]:
        update = {self.key: record.model_dump(mode="json")}
        target = self.goto.get(record.action)
        if target is None:
            return Command(update=update)
        return Command(update=update, goto=target)


def decision_node(
    *,
    policy: PolicyLike = None,
    journal: str | Path,
    panel: PanelBuilder,
    on_escalate: Literal["interrupt", "route"] = "interrupt",
    goto: Mapping[str, str] | None = None,
    key: str = "dissensus",
    reviewer: ReviewerResolver = config_reviewer,
    policy_dir: str | Path | None = None,
    shift_every: int = EVERY,
) -> DecisionNode:
    """A ``StateGraph`` node deciding ``panel(state)`` with ``policy`` into ``journal``.

    ``goto`` maps a record's action to the node to go to next (unmapped: the node's
    static edges apply). ``on_escalate="interrupt"`` asks a human through
    ``langgraph.types.interrupt``; ``"route"`` records the escalation, leaves the item in
    the review queue and routes by ``goto["escalate"]``. The record's JSON is written to
    ``state[key]``; ``reviewer(config)`` names who resolved an interrupt. ``policy`` is a
    policy file, a :class:`~dissensus.pipeline.Policy` (its relative paths under
    ``policy_dir``), a :class:`~dissensus.pipeline.RunSpec` or ``None`` (the defaults): the
    node decides with the same run specification ``dissensus decide`` would build.
    ``shift_every``: judged cases between two checks of the node's shift watch (as
    ``dissensus serve --shift-every``; 0: none).
    """
    return DecisionNode(
        policy=policy,
        journal=journal,
        panel=panel,
        on_escalate=on_escalate,
        goto={} if goto is None else goto,
        key=key,
        reviewer=reviewer,
        policy_dir=policy_dir,
        shift_every=shift_every,
    )
