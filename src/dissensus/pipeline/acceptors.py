"""One acceptance interface: "may the pipeline commit this case the guard could not back?"

Every method that answers it is an :class:`Acceptor` with one method, :meth:`judge`, from
one :class:`AcceptInput` to one verdict, the journalled :class:`AcceptanceStep` (crowd-kit's
way: ``MajorityVote``, ``Wawa`` and ``DawidSkene`` behind one ``fit``/``predict``):

* :class:`LearnedAcceptor` — learned acceptance: the run's acceptance file scores the
  case on the features it was calibrated with (:mod:`dissensus.pipeline.learned`);
* :class:`TrustRegionAcceptor` — the measured trust regions of a reliability
  calibration (:mod:`dissensus.pipeline.trust_regions`);
* :class:`HeldAcceptor` — an acceptance file on hold after a shift check with
  ``on_shift: escalate``: it accepts nothing and says why. The hold is the run
  specification's ``shift_hold``: set by :func:`~dissensus.pipeline.batch.start_run`,
  or, for a run the flag came after, by the resume that met it (its ``acceptance.held``
  event; :mod:`dissensus.pipeline.batch`).

:func:`acceptor_for` picks the one a run uses, once, from its run specification: a held
file first, then learned acceptance when a file is configured, else the trust regions
(which accept nothing without a calibration). Choices this module makes: the
signals every verdict carries are computed by the caller, once per case, so that each
acceptor judges exactly what the journal shows.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from dissensus.pipeline.learned import learned_payload
from dissensus.pipeline.steps import AcceptanceStep
from dissensus.pipeline.trust_regions import TrustRegion, calibrated_accept
from dissensus.signals import AgentSignal, SecondAnswer
from dissensus.states import Reading
from dissensus.types import Panel

__all__ = [
    "AcceptInput",
    "Acceptor",
    "HeldAcceptor",
    "LearnedAcceptor",
    "TrustRegionAcceptor",
    "acceptor_for",
]


@dataclass(frozen=True)
class AcceptInput:
    """What an acceptor judges: the panel, its reading, the follow-up's second answers
    (empty without one) and every agent's signals."""

    panel: Panel
    reading: Reading | None
    second: Mapping[str, SecondAnswer]
    """Each re-asked agent's second answer."""
    signals: list[AgentSignal]


class Acceptor(Protocol):
    """Judges whether a case may be committed; one verdict type for every method."""

    @property
    def name(self) -> str:
        """``learned``, ``trust_regions`` or ``held``."""
        ...

    def judge(self, case: AcceptInput) -> AcceptanceStep:
        """The verdict on ``case``, as journalled."""
        ...


@dataclass(frozen=True)
class HeldAcceptor:
    """An acceptance file on hold: nothing is accepted, and each verdict says why."""

    hold: str
    name: str = "held"

    def judge(self, case: AcceptInput) -> AcceptanceStep:
        return AcceptanceStep(
            accepted=False,
            decision=None,
            basis="none",
            supporters=[],
            contradicted_by=[],
            reason=f"acceptance held: {self.hold}",
            signals=case.signals,
        )


@dataclass(frozen=True)
class LearnedAcceptor:
    """Learned acceptance with the run's acceptance file.

    ``learned`` is the loaded file (:class:`~dissensus.acceptance.prepare.LearnedAcceptance`,
    built lazily by the runtime: scikit-learn is imported only when a file is used);
    ``guard`` computes the guard features of a panel with the run's guard calibration and
    options, the function calibration used.
    """

    learned: Callable[[], Any]
    guard: Callable[[Panel], Any]
    name: str = "learned"

    def judge(self, case: AcceptInput) -> AcceptanceStep:
        payload = learned_payload(
            self.learned(),
            case.panel,
            reading=case.reading,
            guard=self.guard(case.panel),
            second=case.second,
        )
        return AcceptanceStep(**payload, signals=case.signals)


@dataclass(frozen=True)
class TrustRegionAcceptor:
    """The trust regions of a reliability calibration (none: nothing is accepted except
    by agreement of independent families, see :func:`calibrated_accept`)."""

    regions: Callable[[], dict[str, TrustRegion]]
    veto_precision: float
    min_families: int
    fallback_max_score: int
    name: str = "trust_regions"

    def judge(self, case: AcceptInput) -> AcceptanceStep:
        result = calibrated_accept(
            case.signals,
            self.regions(),
            veto_precision=self.veto_precision,
            min_families=self.min_families,
            fallback_max_score=self.fallback_max_score,
        )
        return AcceptanceStep(**result.model_dump(), signals=case.signals)


def acceptor_for(rt: Any) -> Acceptor:
    """The acceptor of a run (``rt``: its :class:`~dissensus.pipeline.runtime.Runtime`)."""
    settings = rt.policy.acceptance
    hold = rt.spec.shift_hold
    if rt.acceptance is not None and hold is not None:
        return HeldAcceptor(hold)
    if rt.acceptance is not None:
        from dissensus.acceptance.prepare import GuardInputs, acceptance_guard

        inputs = GuardInputs.from_policy(rt.policy, rt.guard_calibration)
        return LearnedAcceptor(
            learned=lambda: rt.learned, guard=lambda panel: acceptance_guard(panel, inputs)
        )
    return TrustRegionAcceptor(
        regions=lambda: rt.regions,
        veto_precision=settings.veto_precision,
        min_families=settings.min_families,
        fallback_max_score=settings.fallback_max_score,
    )
