"""What one run shares across its cases: policy, journal, backend, rules, trust regions, model.

Choices: the similarity backend, the compiled rules, the trust regions and the model
client are built on first use, so a resumed run whose remaining steps are all journalled
loads no embedding model and needs no model spec. Every model client (the run's model,
and one per spec of ``seek_context.models``) draws from one budget, the policy's run
budget, charged with the run's journalled spend when the first client is made (so a
resumed run enforces the run's budget, not a fresh one;
:func:`dissensus.pipeline.durable.replay_spend`).

Prefetching: :meth:`Runtime.prefetch` embeds a window of cases' traces in one batch and
keeps the vectors in memory, and :attr:`Runtime.backend` serves them from there, so
every trace is embedded once whatever the backend (a caching backend, the static table,
MiniLM without cache, a user function). Texts not prefetched (live re-ask answers) are
embedded through the backend as before. The table holds the last two prefetched windows
only (cases of the previous window may still be in flight while the next is
prefetched), so memory stays bounded by the window, not the run; a text that fell out
is embedded again, never read wrongly. The same look at the journal (one query per
window) notes which cases have no event yet, so that deciding them does not ask the
journal again for their steps (:meth:`Runtime.fresh_case`).

In the run loop: :meth:`Runtime.aprefetch` embeds a window in calls of at most
:data:`EMBED_CHUNK` texts and lets the event loop run between them, so the cases in
flight go on while a window is embedded, and it makes no call once the run's deadline
(``stop_at``, the loop's clock) has passed: :class:`PastDeadline`, and the run loop stops
the run. So a run stops within the call in progress at its deadline (the first call of
a run also loads the embedding model). Model attempts obey the same deadline: none
starts once it has passed (:attr:`Runtime.stop_at`, checked by the durable layer before
an attempt is journalled as sent). The calls stay on the loop's thread: an interrupt
(SIGINT, SIGTERM) lands in the embedding and stops it at once, and nothing is left
embedding once the run has stopped (a process exiting while a torch model computes on a
thread of its own aborts). Before a window's first call, a backend with a
``will_embed(count)`` method is told how many texts the window embeds, so that
``decide``'s progress counts them across the calls (``embedding 64/900 texts``).
"""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from dissensus.errors import ConfigError
from dissensus.guard import GuardThresholds, ReliabilityFit
from dissensus.llm.budget import Budget
from dissensus.llm.client import ModelClient
from dissensus.pipeline.acceptors import Acceptor, acceptor_for
from dissensus.pipeline.durable import JournalledClient, PastDeadline, replay_spend
from dissensus.pipeline.learned import make_learned
from dissensus.pipeline.policy import PIPELINE_ACTIONS, Policy, guard_thresholds
from dissensus.pipeline.spec import MODEL_ENV, RunSpec
from dissensus.pipeline.trust_regions import CalibrationFile, TrustRegion, trust_regions
from dissensus.signals import recorded_second_answers
from dissensus.states import (
    EmbeddingBackend,
    Reading,
    RuleSet,
    SimilarityBackend,
    Thresholds,
    get_backend,
    read_panel,
)
from dissensus.states.similarity import Matrix, Vectors, cosine_matrix, embeds
from dissensus.store import event_types as ev
from dissensus.store.journal import Journal
from dissensus.types import JsonObject, Panel

if TYPE_CHECKING:
    from dissensus.acceptance.monitor import MonitorStep

__all__ = [
    "EMBED_CHUNK",
    "MODEL_ENV",
    "PastDeadline",
    "PrefetchedBackend",
    "Runtime",
    "monitor_verdicts",
]

EMBED_CHUNK = 32
"""Most texts one call of :meth:`PrefetchedBackend.aprefetch` embeds (MiniLM on a shared
CPU: about 1.7 s; a deadline is enforced between two calls)."""


class PrefetchedBackend:
    """An embedding backend that serves prefetched vectors from memory.

    :meth:`prefetch` embeds texts through ``inner`` in one call (:meth:`aprefetch`: in
    calls of :data:`EMBED_CHUNK` texts, letting the event loop run between them) and
    keeps their rows (the last two prefetched batches); :meth:`embed` returns kept rows
    and embeds only the texts it does not hold. Readings name ``inner``'s model. An
    ``inner`` with a ``will_embed(count)`` method is told, before a prefetch's first
    call, how many texts it will embed (progress counts them across the calls).
    """

    def __init__(self, inner: EmbeddingBackend) -> None:
        self.inner = inner
        self.name = inner.name
        self._current: dict[str, Vectors] = {}
        self._previous: dict[str, Vectors] = {}

    def _held(self, text: str) -> Vectors | None:
        row = self._current.get(text)
        return row if row is not None else self._previous.get(text)

    def _embed(self, texts: Sequence[str]) -> Vectors:
        return np.asarray(self.inner.embed(texts), dtype=np.float32)

    def _split(self, texts: Sequence[str]) -> tuple[dict[str, Vectors], list[str]]:
        """The rows of ``texts`` held already, and the texts missing (each once)."""
        batch: dict[str, Vectors] = {}
        missing: list[str] = []
        for text in dict.fromkeys(texts):
            row = self._held(text)
            if row is None:
                missing.append(text)
            else:
                batch[text] = row
        return batch, missing

    def _keep(self, batch: dict[str, Vectors]) -> None:
        self._previous, self._current = self._current, batch

    def _will_embed(self, count: int) -> None:
        """Tell ``inner`` how many texts the prefetch embeds, when it wants to know (a
        ``will_embed(count)`` method: ``decide``'s progress counts them across calls)."""
        told = getattr(self.inner, "will_embed", None)
        if callable(told):
            told(count)

    def prefetch(self, texts: Sequence[str]) -> None:
        """Embed ``texts`` not held yet, in one call, and keep them as the newest batch."""
        batch, missing = self._split(texts)
        if missing:
            self._will_embed(len(missing))
            batch.update(zip(missing, self._embed(missing), strict=True))
        self._keep(batch)

    async def aprefetch(self, texts: Sequence[str], stop_at: float | None = None) -> None:
        """:meth:`prefetch` in calls of at most :data:`EMBED_CHUNK` texts, the event loop
        running between two of them; no call is made once the loop's clock reaches
        ``stop_at`` (:class:`PastDeadline`). Stopped, it keeps nothing of ``texts``."""
        batch, missing = self._split(texts)
        loop = asyncio.get_running_loop()
        if missing:
            self._will_embed(len(missing))
        for start in range(0, len(missing), EMBED_CHUNK):
            if start:
                await asyncio.sleep(0)
            if stop_at is not None and loop.time() >= stop_at:
                raise PastDeadline()
            part = missing[start : start + EMBED_CHUNK]
            batch.update(zip(part, self._embed(part), strict=True))
        self._keep(batch)

    def embed(self, texts: Sequence[str]) -> Vectors:
        rows: list[Vectors | None] = [self._held(t) for t in texts]
        missing = list(dict.fromkeys(t for t, r in zip(texts, rows, strict=True) if r is None))
        if missing:
            fresh = self._embed(missing)
            by_text = dict(zip(missing, fresh, strict=True))
            rows = [r if r is not None else by_text[t] for t, r in zip(texts, rows, strict=True)]
        if not rows:
            return self._embed([])
        return np.stack([r for r in rows if r is not None]).astype(np.float32, copy=False)

    def matrix(self, texts: Sequence[str]) -> Matrix:
        return cosine_matrix(self.embed(texts))


def policy_rules(policy: Policy) -> RuleSet:
    """The policy's routing rules, compiled (once per distinct rules document)."""
    return _compiled_rules(json.dumps(policy.routing.rules_document(), sort_keys=True))


@functools.lru_cache(maxsize=16)
def _compiled_rules(document: str) -> RuleSet:
    """The routing rules of a policy, compiled once per distinct rules document (a
    service starts one run per request; compiling parses every condition). A
    :class:`RuleSet` only memoises deterministic routes, so runs may share one."""
    # check_policy checks the rules when a policy is loaded (a number compared with a
    # label included), and a RunSpec built directly checks them as it is validated; a
    # spec read back from a journal (RunSpec.from_started) is not checked again, so a run
    # journalled before a check was added resumes with the meaning it started with.
    rules = RuleSet.from_dict(json.loads(document), file="policy routing", labels=False)
    # A case record can only name an action the pipeline runs.
    for rule in rules.rules:
        if rule.action not in PIPELINE_ACTIONS:
            raise ConfigError(
                f"routing rule {rule.id!r} names action {rule.action!r}, which the pipeline "
                f"does not run (it runs: {', '.join(PIPELINE_ACTIONS)})",
                file="policy routing",
                field="routing",
            )
    return rules


def monitor_verdicts(journal: Journal, acceptance: JsonObject) -> dict[str, MonitorStep]:
    """Stratum -> the acceptance monitor's verdict
    (:class:`~dissensus.acceptance.monitor.MonitorStep`) for the acceptance file
    ``acceptance`` (its verified JSON), from the audits ``journal`` holds under it, in
    the order they were answered; a stratum a run journalled as suspended stays
    suspended. A stratum without answered audits is absent (its verdict is the
    monitor's without audits: not suspended)."""
    from dissensus.acceptance.monitor import monitor
    from dissensus.pipeline.audit import audit_outcomes, journalled_suspensions, kept_suspended

    sha = str(acceptance.get("sha256") or "")
    kept = journalled_suspensions(journal, sha)
    return {
        name: kept_suspended(
            monitor(
                outcomes,
                target=float(acceptance["target_precision"]),
                delta=float(acceptance["delta"]),
                stratum=name,
                acceptance_sha256=sha,
            ),
            kept.get(name),
        )
        for name, outcomes in audit_outcomes(journal, sha).items()
    }


@dataclass
class Runtime:
    """Everything one run shares across its cases: its :class:`RunSpec` and what is built from it.

    Only the run loop (:mod:`dissensus.pipeline.batch` and its executors) makes one, from
    the run's spec; doors hand in a spec, never a runtime.
    """

    spec: RunSpec
    journal: Journal
    run_id: str
    backend_factory: Callable[[], SimilarityBackend] | None = None
    client_factory: Callable[[str | None], ModelClient] | None = None
    """Makes the model client of a spec (``None``: the run's model); default: one client per
    spec drawing from the run's budget. The Ray engine's workers pass their own (one budget
    share per worker)."""
    stop_at: float | None = None
    """The run's deadline on the event loop's clock (the run loop's
    :attr:`~dissensus.pipeline.executors.RunContext.stop_at`): no model attempt starts
    once it has passed (:class:`PastDeadline`)."""
    monitor: dict[str, MonitorStep] | None = None
    """The acceptance monitor's verdicts by stratum (:func:`monitor_verdicts`) as read
    elsewhere: the Ray engine's driver reads them from the run's journal and hands them
    to its workers, whose journal holds only their block's events. ``None``: read from
    :attr:`journal` on first use (:meth:`monitor_state`)."""
    _backend: SimilarityBackend | None = field(default=None, init=False)
    _rules: RuleSet | None = field(default=None, init=False)
    _regions: dict[str, TrustRegion] | None = field(default=None, init=False)
    _budget: Budget | None = field(default=None, init=False)
    _learned: Any = field(default=None, init=False)
    _acceptor: Acceptor | None = field(default=None, init=False)
    _guard_settings: GuardThresholds | None = field(default=None, init=False)
    _thresholds: Thresholds | None = field(default=None, init=False)
    _fresh: set[str] = field(default_factory=set, init=False)
    """Cases (refs) :meth:`prefetch` found without any event, not yet decided."""
    client: JournalledClient = field(init=False)

    def __post_init__(self) -> None:
        self.client = JournalledClient(
            self.journal,
            self.run_id,
            self.client_factory or self._make_client,
            stop_at=self.stop_at,
        )

    @property
    def policy(self) -> Policy:
        return self.spec.policy

    @property
    def calibration(self) -> CalibrationFile | None:
        return self.spec.calibration

    @property
    def guard_calibration(self) -> ReliabilityFit | None:
        return self.spec.guard_calibration

    @property
    def guard_settings(self) -> GuardThresholds:
        """The guard's thresholds of the policy (``guard.options``), validated once per run."""
        settings = self._guard_settings
        if settings is None:
            settings = self._guard_settings = guard_thresholds(self.policy)
        return settings

    @property
    def acceptance(self) -> JsonObject | None:
        """The learned acceptance file's verified content, if any."""
        return self.spec.acceptance

    @property
    def model(self) -> str | None:
        """Model spec for live follow-ups (policy's, else ``$DISSENSUS_MODEL``)."""
        return self.spec.model

    @property
    def budget(self) -> Budget:
        """The run's budget, charged with the run's journalled spend on first use."""
        if self._budget is None:
            self._budget = Budget(
                max_calls=self.policy.budget.max_calls, max_tokens=self.policy.budget.max_tokens
            )
            replay_spend(self.journal, self.run_id, self._budget)
        return self._budget

    def _make_client(self, spec: str | None) -> ModelClient:
        from dissensus.llm.resolve import resolve_model

        return resolve_model(spec or self.model, budget=self.budget)

    @property
    def backend(self) -> SimilarityBackend:
        if self._backend is None:
            factory = self.backend_factory or (
                lambda: get_backend(
                    self.policy.reading.similarity, allow_code=self.policy.allow_code or None
                )
            )
            backend = factory()
            if embeds(backend):
                backend = PrefetchedBackend(backend)
            self._backend = backend
        return self._backend

    @property
    def rules(self) -> RuleSet:
        if self._rules is None:
            self._rules = policy_rules(self.policy)
        return self._rules

    @property
    def regions(self) -> dict[str, TrustRegion]:
        if self._regions is None:
            acc = self.policy.acceptance
            self._regions = (
                trust_regions(
                    self.calibration, target=acc.target_precision, min_support=acc.min_support
                )
                if self.calibration is not None
                else {}
            )
        return self._regions

    @property
    def acceptor(self) -> Acceptor:
        """The one acceptance method of this run (:func:`~dissensus.pipeline.acceptors.acceptor_for`)."""
        if self._acceptor is None:
            self._acceptor = acceptor_for(self)
        return self._acceptor

    @property
    def learned(self) -> Any:
        """The learned acceptance (:class:`~dissensus.acceptance.prepare.LearnedAcceptance`) or ``None``."""
        if self.acceptance is None:
            return None
        if self._learned is None:
            self._learned = make_learned(
                self.acceptance,
                similarity=self.policy.reading.similarity,
                backend=self.backend,
                allow_code=self.policy.allow_code or None,
            )
        return self._learned

    def monitor_state(self, stratum: str) -> MonitorStep:
        """The acceptance monitor's verdict (:class:`~dissensus.acceptance.monitor.MonitorStep`)
        for ``stratum``: :func:`monitor_verdicts` of the run's journal (or :attr:`monitor`,
        when handed in). Read once per run (audits answered while the run goes on count
        from the next run on)."""
        from dissensus.acceptance.monitor import monitor

        acc = self.acceptance or {}
        if self.monitor is None:
            self.monitor = monitor_verdicts(self.journal, acc)
        found = self.monitor.get(stratum)
        if found is None:
            found = monitor(
                [],
                target=float(acc["target_precision"]),
                delta=float(acc["delta"]),
                stratum=stratum,
                acceptance_sha256=str(acc.get("sha256") or ""),
            )
        return found

    def journal_suspension(self, state: MonitorStep) -> None:
        """Journal (once per run and stratum) that the monitor suspended ``state.stratum``.
        A run resumed after more audits were answered keeps the suspension it journalled
        first (the monitor's verdict then, which a resume's later reading extends)."""
        key = f"acceptance/suspended/{state.stratum}"
        if self.journal.get(self.run_id, key) is not None:
            return
        self.journal.append(
            self.run_id,
            ev.ACCEPTANCE_SUSPENDED,
            {**state.model_dump(mode="json"), "reason": state.reason()},
            key=key,
        )

    def can_call_models(self) -> bool:
        """Whether any live follow-up can be made (the run's model or a per-agent model)."""
        return bool(self.model) or bool(self.policy.seek_context.models)

    def prefetch(self, cases: list[tuple[int, Panel]]) -> None:
        """Embed the traces of ``(line, panel)`` cases (and their recorded re-asks) in one batch.

        The vectors are kept in memory (see the module docstring), so the per-case
        readings embed nothing again; cases whose record is already journalled are
        skipped (nothing to read).
        """
        found = self._prefetching(cases)
        if found is not None:
            found[0].prefetch(found[1])

    async def aprefetch(self, cases: list[tuple[int, Panel]], stop_at: float | None = None) -> None:
        """:meth:`prefetch` in calls of :data:`EMBED_CHUNK` texts, the event loop running
        between them, none once the loop's clock reaches ``stop_at`` (the run's deadline:
        :class:`PastDeadline`; see the module docstring)."""
        found = self._prefetching(cases)
        if found is not None:
            await found[0].aprefetch(found[1], stop_at)

    def _prefetching(
        self, cases: list[tuple[int, Panel]]
    ) -> tuple[PrefetchedBackend, list[str]] | None:
        """The backend and the texts a prefetch of ``cases`` embeds (``None``: nothing to
        embed); notes the cases without any event (:meth:`fresh_case`)."""
        journalled = self.journal.cases_with_events(self.run_id, [str(line) for line, _ in cases])
        self._fresh.update(str(line) for line, _ in cases if str(line) not in journalled)
        todo = [
            p
            for line, p in cases
            if str(line) not in journalled
            or self.journal.get(self.run_id, f"case/{line}/record") is None
        ]
        if not todo:
            return None
        backend = self.backend
        if not isinstance(backend, PrefetchedBackend):
            return None
        texts = {o.reasoning for p in todo for o in p.outputs}
        texts |= {
            a.reasoning for p in todo for a in recorded_second_answers(p).values() if a.reasoning
        }
        return backend, sorted(texts)

    def fresh_case(self, line: int) -> bool:
        """Whether case ``line`` had no event in the journal when :meth:`prefetch` looked
        (once: the case is being decided, and its own steps are journalled from now on)."""
        ref = str(line)
        if ref in self._fresh:
            self._fresh.discard(ref)
            return True
        return False

    def read(self, panel: Panel) -> Reading:
        backend = self.backend
        thresholds = self._thresholds
        if thresholds is None:
            # The run's backend and policy are fixed: its (frozen) thresholds, made once.
            rd = self.policy.reading
            thresholds = Thresholds.for_model(backend.name, rd.theta_s, rd.theta_a)
            self._thresholds = thresholds
        return read_panel(panel, backend, thresholds)
