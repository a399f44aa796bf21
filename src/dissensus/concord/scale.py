"""Anchor calibration (CONCORD phase 1, ``docs/concord.md``).

Each agent scores two shared anchor outcomes, one rejected and one ideal, on its private
scale. A raw score ``x`` becomes ``(x - rejected) / (ideal - rejected)``, so the rejected
anchor is 0 and the ideal anchor is 1 for every agent.

Choices this module makes:

* A scale may run either way (``ideal < rejected`` is a lower-is-better scale such as
  latency in milliseconds); only equal anchors are unusable.
* A raw score outside the closed interval spanned by the agent's two anchors (or not a
  finite number) is *out of range*: nothing can be worse than rejected or better than
  ideal on the shared bar. It is reported as a fault of that agent, never clipped.
* Calibrated values are rounded to 12 decimals so that every comparison downstream
  (margin, ties) is exact and a verifier recomputes the very same numbers. The floor is
  compared with the unrounded value (:func:`ratio`): rounding may never lift a score that
  is below the floor onto it.
* Two finite anchors whose span overflows (``ideal - rejected`` is infinite) cannot
  calibrate a scale either; nor can a raw score whose calibrated value is not a finite
  number (:func:`ratio` raises :class:`ValueError`). Either is a fault of that agent.
* **A score is any real number** (:func:`real`): an ``int``, a ``float``, a NumPy
  number (``numpy.int64``, ``numpy.float32``), a ``Fraction``; never a ``bool``. A
  score callable over a NumPy array returns NumPy numbers, and those are numbers. One
  beyond the range of a float (``10**400``) is read as an infinity, so it is out of
  range (a fault of that evaluation), never an ``OverflowError`` out of the run.
* **A fault message is one line** (:func:`fault_line`, :func:`exception_line`): the
  text of an exception an agent raised, or of a :class:`ScoreFault` it answered, has
  its line breaks and runs of white space read as one space and is cut to 500
  characters (a model client's error may hold a whole response body); an exception
  whose own message raises is named by its type, never an error out of the run.
* **A score below the floor is never shown as the floor** (:func:`below_floor`,
  :func:`gap_text`: the reason of a pipeline's CONCORD step, ``dissensus negotiate``'s
  human output): two decimals, or as many digits as tell it from the floor, and a gap
  never reads as 0.
"""

from __future__ import annotations

import math
import numbers

__all__ = [
    "DIGITS",
    "below_floor",
    "brief",
    "check_anchors",
    "exception_line",
    "fault_line",
    "gap_text",
    "in_range",
    "ratio",
    "real",
    "rescale",
    "shortfall_gap",
]

DIGITS = 12
"""Decimals kept in calibrated scores and score differences."""


def real(value: object) -> float | None:
    """``value`` as a float when it is a real number other than a ``bool`` (an ``int``,
    a ``float``, a NumPy number, a ``Fraction``), else ``None``. A number beyond the
    range of a float is an infinity of its sign (out of every anchor range)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return None
    try:
        return float(value)
    except OverflowError:  # only an integer or a fraction is beyond a float's range
        if isinstance(value, numbers.Rational):
            return math.inf if int(value.numerator) > 0 else -math.inf
        return None
    except (TypeError, ValueError):  # a Real subclass whose float() refuses
        return None


def brief(value: object, limit: int = 200) -> str:
    """``repr(value)`` cut to ``limit`` characters, for a fault message: what an agent
    answered may be huge, and an integer of more than 4300 digits has no ``repr``."""
    try:
        text = repr(value)
    except Exception:  # any repr that fails (too many digits, a broken __repr__)
        return f"<{type(value).__name__}>"
    return text if len(text) <= limit else f"{text[: limit - 1]}…"


FAULT_LIMIT = 500
"""Most characters a fault message keeps (an exception's text may be a whole page)."""


def fault_line(text: str, limit: int = FAULT_LIMIT) -> str:
    """``text`` as one line of a fault message: runs of white space (line breaks
    included) as one space, cut to ``limit`` characters."""
    line = " ".join(text.split())
    return line if len(line) <= limit else f"{line[: limit - 1]}…"


def exception_line(exc: BaseException) -> str:
    """``Type: message`` of an exception an agent raised, as one fault line; an exception
    whose message cannot be read (a ``__str__`` that raises) is named by its type."""
    try:
        said = str(exc)
    except Exception:  # agent code: its exception may be as broken as its answer
        said = "(its message could not be read)"
    return fault_line(f"{type(exc).__name__}: {said}")


def check_anchors(rejected: float, ideal: float) -> str | None:
    """Why these anchor scores cannot calibrate a scale, or ``None`` when they can."""
    if not (math.isfinite(rejected) and math.isfinite(ideal)):
        return "anchor scores must be finite numbers"
    if rejected == ideal:
        return f"the two anchors score equal ({rejected:g}); the scale cannot be calibrated"
    if not math.isfinite(ideal - rejected):
        return (
            f"the span of the anchors ({rejected:g} to {ideal:g}) is not a finite number; "
            "the scale cannot be calibrated"
        )
    return None


def in_range(raw: float, rejected: float, ideal: float) -> bool:
    """Whether ``raw`` lies in the closed interval spanned by the anchors."""
    if not math.isfinite(raw):
        return False
    low, high = min(rejected, ideal), max(rejected, ideal)
    return low <= raw <= high


def ratio(raw: float, rejected: float, ideal: float) -> float:
    """The unrounded calibrated value of ``raw`` (what the floor is compared with).

    Raises :class:`ValueError` when it is not a finite number (an unusable answer)."""
    try:
        value = (raw - rejected) / (ideal - rejected)
    except ZeroDivisionError:
        value = math.nan
    if not math.isfinite(value):
        raise ValueError(
            f"score {raw!r} cannot be calibrated between the anchors {rejected!r} and {ideal!r}"
        )
    return value + 0.0


def rescale(raw: float, rejected: float, ideal: float) -> float:
    """Rescale ``raw`` so that ``rejected`` maps to 0 and ``ideal`` to 1 (rounded to
    :data:`DIGITS` decimals; :class:`ValueError` when not a finite number)."""
    return round(ratio(raw, rejected, ideal), DIGITS) + 0.0


def shortfall_gap(floor: float, score: float, exact: float) -> float:
    """How far below ``floor`` an agent is: ``floor - score`` (the recorded, rounded score)
    rounded to :data:`DIGITS` decimals; when that is not positive (the score rounded onto
    the floor), ``floor - exact`` with the unrounded value ``exact < floor``."""
    gap = round(floor - score, DIGITS)
    return gap if gap > 0 else floor - exact


def below_floor(score: float, gap: float, floor: float) -> str:
    """A shortfall's score as it is shown: two decimals, or its shortest ``repr``
    when two decimals would read at or above the floor. A score the record rounded onto
    the floor (12 decimals) is shown as ``floor - gap``, the unrounded value."""
    value = score if score < floor else floor - gap
    value = min(value, math.nextafter(floor, -math.inf))
    text = f"{value:.2f}"
    return text if float(text) < floor else repr(value)


def gap_text(gap: float) -> str:
    """A shortfall's gap (always above 0): two decimals, or two significant digits when
    two decimals would read 0.00."""
    text = f"{gap:.2f}"
    return text if float(text) > 0 else f"{gap:.2g}"
