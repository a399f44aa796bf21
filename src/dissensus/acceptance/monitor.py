"""The acceptance monitor: anytime-valid bounds on the precision of automatic commits.

Blind audits (:mod:`dissensus.pipeline.audit`) are labels drawn at random from the
automatic commits, so their outcomes (the committed answer was right, or not) are an
unbiased sample of the commits' precision. Per stratum, the monitor runs a betting
confidence sequence (Waudby-Smith & Ramdas, "Estimating means of bounded random
variables by betting"; the ``confseq`` package, extra ``monitor``) over the outcomes in
order: the upper bound holds at every number of audits at once with probability at
least 1 - delta, so looking after every audit is allowed. When the upper bound falls
below the acceptance file's target precision, precision is below the target at level
delta and the stratum is *suspended*: later automatic commits in it escalate.

Choices this module makes:

* delta and the target are the acceptance file's own (the guarantee it states).
* The upper bound is one-sided: one minus ``confseq.betting.betting_lower_cs`` on the
  error indicators, with the running intersection (so once the bound is below the
  target it stays there; the suspension is sticky). The lower bound shown beside it is
  ``betting_lower_cs`` on the correct indicators at the same delta; it informs, it
  suspends nothing.
* The grid has 1000 points (``confseq``'s default; its bounds are widened by one grid
  step, which keeps them valid).
* A case's stratum is ``stratum_of(meta, strata_field)`` of the acceptance file (``(none)``
  for a case without a value for it, as at calibration), spelt as the file spells it
  (``file_stratum``: a file written before stratum values were read as labels, before
  0.3.1, named a boolean stratum ``True``; a later file's ``"True"`` is a stratum of its
  own), or ``all`` when the file has no strata field.
* The outcomes are taken in the order the audits were answered
  (:func:`dissensus.pipeline.audit.audit_outcomes`), so a new answer only extends the
  sequence; and a stratum a run journalled as suspended (``acceptance.suspended``) stays
  suspended whatever is answered later.
* confseq 0.0.11 (the last release) annotates with ``np.float_``, which NumPy 2 removed;
  the alias is restored to ``np.float64`` before importing it (nothing else changes).
* Only a new acceptance file (another sha256) lifts a suspension: the audits are keyed
  by the file's hash.
* A suspension's reason writes the target with two decimals when they show it exactly,
  with as many digits as it takes otherwise (:func:`~dissensus.acceptance.bound.target_words`, which the file's guarantee uses too): a target of 0.999
  is "below 0.999", never "below 1.00".
* The bounds are a pure function of the outcomes, delta and the grid, and the review
  page asks for them on every queue load: the last 256 sequences' bounds are kept in
  memory (an outcome sequence of a thousand audits costs seconds to bound), so a page
  load without a new audit recomputes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

from pydantic import BaseModel, ConfigDict

from dissensus.acceptance.bound import target_words
from dissensus.errors import ConfigError

__all__ = ["ONE_STRATUM", "MonitorStep", "case_stratum", "monitor", "target_words"]

ONE_STRATUM = "all"
BREAKS = 1000


class MonitorStep(BaseModel):
    """The monitor's verdict for one stratum."""

    model_config = ConfigDict(frozen=True)

    stratum: str
    audits: int
    correct: int
    lower: float
    """Anytime-valid lower bound on precision (level delta)."""
    upper: float
    """Anytime-valid upper bound on precision (level delta)."""
    target: float
    delta: float
    suspended: bool
    suspended_after: int | None = None
    """Audits at which the upper bound first fell below the target."""
    acceptance_sha256: str | None = None

    def reason(self) -> str:
        """The escalation reason of a suspended stratum."""
        where = "" if self.stratum == ONE_STRATUM else f" in stratum {self.stratum!r}"
        return (
            f"acceptance suspended: audited precision below {target_words(self.target)} after "
            f"{self.suspended_after or self.audits} audits{where}"
        )


def case_stratum(acceptance: Mapping[str, Any] | None, meta: Mapping[str, Any]) -> str:
    """The case's monitoring stratum under the acceptance file ``acceptance`` (its JSON)."""
    from dissensus.acceptance.calibrate import file_stratum, names_strata_older, stratum_of

    field = (acceptance or {}).get("strata_field")
    value = stratum_of(meta, field) if field else None
    if value is None:
        return ONE_STRATUM
    # The file's own spelling of the stratum (a file written before the label rule
    # named a boolean stratum "True"): its audits and suspensions are journalled under it.
    known = _file_strata(acceptance or {})
    return file_stratum(value, known, older=names_strata_older((acceptance or {}).get("libraries")))


def _file_strata(acceptance: Mapping[str, Any]) -> set[str]:
    """The strata an acceptance file's JSON names (its folds and its figures)."""
    names: set[str] = set()
    folds = acceptance.get("fold_of_stratum")
    if isinstance(folds, Mapping):
        names.update(k for k in folds if isinstance(k, str))
    figures = acceptance.get("strata")
    if isinstance(figures, list):
        names.update(
            f["stratum"]
            for f in figures
            if isinstance(f, Mapping) and isinstance(f.get("stratum"), str)
        )
    return names


def _lower_cs(x: Sequence[float], delta: float, breaks: int = BREAKS) -> list[float]:
    return list(_lower_cs_cached(tuple(float(v) for v in x), float(delta), breaks))


@lru_cache(maxsize=256)
def _lower_cs_cached(x: tuple[float, ...], delta: float, breaks: int) -> tuple[float, ...]:
    import numpy as np

    if not hasattr(np, "float_"):
        # confseq 0.0.11 names ``np.float_`` in annotations, removed in NumPy 2.
        np.float_ = np.float64  # type: ignore[attr-defined]
    try:
        from confseq.betting import betting_lower_cs
    except ImportError:  # pragma: no cover - depends on the installation
        raise ConfigError(
            "the acceptance monitor needs confseq: pip install 'dissensus[monitor]'"
        ) from None

    lower = betting_lower_cs(
        np.asarray(x, dtype=float), alpha=delta, breaks=breaks, running_intersection=True
    )
    return tuple(float(v) for v in lower)


def confseq_available() -> bool:
    """Whether the monitor's library can be used here (it builds from source: see the
    ``monitor`` extra)."""
    try:
        _lower_cs([1.0, 1.0], 0.5, breaks=10)
    except ConfigError:
        return False
    return True


def upper_bounds(outcomes: Sequence[bool], *, delta: float, breaks: int = BREAKS) -> list[float]:
    """The anytime-valid upper bound on precision after each audit (running intersection)."""
    if not outcomes:
        return []
    return [1.0 - v for v in _lower_cs([0.0 if o else 1.0 for o in outcomes], delta, breaks)]


def suspended_after(
    outcomes: Sequence[bool], *, target: float, delta: float, breaks: int = BREAKS
) -> int | None:
    """The number of audits at which the upper bound first fell below ``target``, if ever."""
    upper = upper_bounds(outcomes, delta=delta, breaks=breaks)
    return next((i + 1 for i, u in enumerate(upper) if u < target), None)


def monitor(
    outcomes: Sequence[bool],
    *,
    target: float,
    delta: float,
    stratum: str = ONE_STRATUM,
    acceptance_sha256: str | None = None,
) -> MonitorStep:
    """The monitor's verdict after the audit ``outcomes`` (True: the commit was right), in order."""
    n = len(outcomes)
    correct = sum(1 for o in outcomes if o)
    if n == 0:
        return MonitorStep(
            stratum=stratum,
            audits=0,
            correct=0,
            lower=0.0,
            upper=1.0,
            target=target,
            delta=delta,
            suspended=False,
            acceptance_sha256=acceptance_sha256,
        )
    low = _lower_cs([1.0 if o else 0.0 for o in outcomes], delta)
    upper = upper_bounds(outcomes, delta=delta)
    first = next((i + 1 for i, u in enumerate(upper) if u < target), None)
    return MonitorStep(
        stratum=stratum,
        audits=n,
        correct=correct,
        lower=low[-1],
        upper=upper[-1],
        target=target,
        delta=delta,
        suspended=first is not None,
        suspended_after=first,
        acceptance_sha256=acceptance_sha256,
    )
