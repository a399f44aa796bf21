"""DCI-CF stages 2, 5 and 6 as pure functions: canonicalise, compress, test convergence.

* Stage 2 canonicalisation keeps at most ``max_options`` options: task options first
  (in file order), then proposals in speaking order; an option whose normalised text
  equals an earlier one is merged into it (its proposer becomes a supporter).
* Stage 5 compression ranks options by mean score over the participants that scored
  them and keeps ``finalist_count``; equal means keep canonical order.
* Stage 6 converges when the top finalist leads the second by at least
  ``convergence_margin`` (a single finalist leads by its own mean) and no *blocking*
  tension on it is still open.

Choices where the design is silent: text normalisation (case, whitespace and punctuation
folded) for merging, and the mean as the score aggregate.

>>> compress(["o1", "o2", "o3"], {"p": {"o1": 0.2, "o2": 0.9, "o3": 0.5}}, 2)
['o2', 'o3']
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from pydantic import BaseModel, ConfigDict

__all__ = ["Convergence", "compress", "convergence", "mean_scores", "normalise_text"]

_EPS = 1e-9


def normalise_text(text: str) -> str:
    """Fold case, punctuation and whitespace for duplicate detection."""
    return " ".join(re.sub(r"[^\w\s]", " ", text.lower()).split())


def mean_scores(
    options: Sequence[str], scores: Mapping[str, Mapping[str, float]]
) -> dict[str, float]:
    """Mean score per option over participants that scored it (0.0 when nobody did)."""
    out: dict[str, float] = {}
    for o in options:
        vals = [row[o] for row in scores.values() if o in row]
        out[o] = sum(vals) / len(vals) if vals else 0.0
    return out


def compress(
    options: Sequence[str], scores: Mapping[str, Mapping[str, float]], finalist_count: int
) -> list[str]:
    """The ``finalist_count`` best options by mean score, ties in canonical order."""
    means = mean_scores(options, scores)
    order = sorted(range(len(options)), key=lambda i: (-round(means[options[i]], 9), i))
    return [options[i] for i in order[:finalist_count]]


class Convergence(BaseModel):
    """Outcome of the stage-6 test, with the numbers it used."""

    model_config = ConfigDict(frozen=True)

    converged: bool
    top: str | None
    margin: float
    """Lead of the top finalist over the second (its own mean if it is alone)."""
    blocking_tensions: list[str]
    """Open blocking tensions on the top finalist."""


def convergence(
    finalists: Sequence[str],
    scores: Mapping[str, Mapping[str, float]],
    open_blocking: Mapping[str, Sequence[str]],
    margin: float,
) -> Convergence:
    """Stage 6: top finalist ahead by ``margin`` and no open blocking tension on it."""
    if not finalists:
        return Convergence(converged=False, top=None, margin=0.0, blocking_tensions=[])
    means = mean_scores(finalists, scores)
    ranked = compress(finalists, scores, len(finalists))
    top = ranked[0]
    lead = means[top] - (means[ranked[1]] if len(ranked) > 1 else 0.0)
    blocking = list(open_blocking.get(top, ()))
    scored = any(top in row for row in scores.values())
    ok = scored and lead >= margin - _EPS and not blocking
    return Convergence(converged=ok, top=top, margin=round(lead, 9), blocking_tensions=blocking)
