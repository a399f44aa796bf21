"""DCI-CF stages 2, 5 and 6 as pure functions: canonicalise, compress, test convergence.

* Stage 2 canonicalisation keeps at most ``max_options`` options: task options first
  (in file order), then proposals in speaking order. A *proposal* that names an earlier
  kept option (:func:`match_name` on the texts) is merged into it (its proposer becomes
  a supporter); the task's own options are never merged, not even with each other
  (:func:`canonical_merges`).
* Stage 5 compression ranks options by mean score over the participants that scored
  them and keeps ``finalist_count``; equal means keep canonical order.
* Stage 6 converges when the top finalist leads the second by at least
  ``convergence_margin`` (a single finalist leads by its own mean) and no *blocking*
  tension on it is still open.

Choices this module makes: how texts are compared, and the mean as the score
aggregate. Texts are compared in three tiers, each used only when the one before it
matches nothing: exactly, then with case and whitespace folded (:func:`fold_text`), then
normalised (:func:`normalise_text`: prose punctuation at the edges of words dropped too).
Normalisation keeps every character that can carry meaning: ``+ - # * / < > @ %``, digits,
a leading ``.`` (``.NET``) and punctuation inside a word (``3.5``, ``Node.js``), so
``C++`` and ``C#``, or ``N+1`` and ``N-1``, stay apart. A tier that matches more than one
option is ambiguous: nothing is matched (no merge, and a baseline's choice is an
abstention), never the first of them.

>>> normalise_text("  Use (C++), not C#! ")
'use c++ not c#'
>>> match_name("c#", {"cpp": ["C++"], "csharp": ["C#"]})
'csharp'
>>> match_name("Scale to n+1.", {"up": ["Scale to N+1"], "down": ["Scale to N-1"]})
'up'
>>> match_name("Red!", {"a": ["red."], "b": ["Red"]}) is None  # ambiguous
True
>>> compress(["o1", "o2", "o3"], {"p": {"o1": 0.2, "o2": 0.9, "o3": 0.5}}, 2)
['o2', 'o3']
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable, Collection, Mapping, Sequence

from pydantic import BaseModel, ConfigDict

__all__ = [
    "Convergence",
    "canonical_merges",
    "compress",
    "convergence",
    "fold_text",
    "match_name",
    "mean_scores",
    "normalise_text",
]

_EPS = 1e-9
_OPENING = "\"'`([{«“‘„¿¡"
"""Prose punctuation dropped from the start of a word by :func:`normalise_text`."""
_CLOSING = "\"'`)]}»”’.,;:!?…"
"""Prose punctuation dropped from the end of a word by :func:`normalise_text`."""


def fold_text(text: str) -> str:
    """Case (Unicode case folding, composed form) and runs of whitespace folded."""
    return " ".join(unicodedata.normalize("NFC", text).casefold().split())


def normalise_text(text: str) -> str:
    """:func:`fold_text`, and quotes, brackets and sentence punctuation at the edges of
    words dropped; symbols that carry meaning (``+ - # * / @ % < >``, digits, a leading
    ``.``, anything inside a word) are kept."""
    words = (w.lstrip(_OPENING).rstrip(_CLOSING) for w in fold_text(text).split())
    return " ".join(w for w in words if w)


def _exact(text: str) -> str:
    return text


_TIERS: tuple[Callable[[str], str], ...] = (_exact, fold_text, normalise_text)


def match_name(name: str, candidates: Mapping[str, Sequence[str]]) -> str | None:
    """The candidate whose names ``name`` matches, or ``None``.

    Tiers: exact, then :func:`fold_text`, then :func:`normalise_text`; the first tier
    that matches decides. Matching two or more candidates there is ambiguous (``None``),
    as is a name that folds to nothing.
    """
    for fold in _TIERS:
        key = fold(name)
        if not key:
            return None
        hits = [cid for cid, names in candidates.items() if any(fold(n) == key for n in names)]
        if hits:
            return hits[0] if len(hits) == 1 else None
    return None


def canonical_merges(options: Sequence[tuple[str, str]], fixed: Collection[str]) -> dict[str, str]:
    """Stage-2 merges: option id -> the id of the kept option it merges into.

    ``options`` are ``(id, text)`` in canonical order; those in ``fixed`` (the task's
    own) are always kept. Any other merges into the earlier kept option its text names
    (:func:`match_name`), or is kept when it names none or several.
    """
    kept: dict[str, tuple[str]] = {}
    merges: dict[str, str] = {}
    for option_id, text in options:
        keeper = None if option_id in fixed else match_name(text, kept)
        if keeper is None:
            kept[option_id] = (text,)
        else:
            merges[option_id] = keeper
    return merges


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
