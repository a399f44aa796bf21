"""What the evaluation scripts share: checking their data folder and their lists of names.

Not a script. Each check prints one line on stderr and exits 2 (as argparse does for a
bad option) instead of failing later with a traceback, or running something else than
was asked.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, NoReturn

import numpy as np


def missing_data(missing: Sequence[Path]) -> NoReturn:
    """One line naming the missing data folders and ``--data``; exit 2."""
    names = ", ".join(str(p) for p in missing)
    no_data(f"{names} {'is not a directory' if len(missing) == 1 else 'are not directories'}")


def no_data(what: str) -> NoReturn:
    """One line saying what data is missing (``what``) and naming ``--data``; exit 2."""
    sys.stderr.write(
        f"{_script()}: data not found: {what} (give the data folder with --data DIR)\n"
    )
    raise SystemExit(2)


def refuse(what: str) -> NoReturn:
    """One line saying what is wrong with an option (``what``); exit 2, as argparse does."""
    sys.stderr.write(f"{_script()}: {what}\n")
    raise SystemExit(2)


def require_data(data: str | Path, needed: Iterable[str]) -> Path:
    """``data`` as a path, once every folder of ``needed`` is a directory under it
    (else :func:`missing_data`)."""
    root = Path(data)
    missing = [root / name for name in dict.fromkeys(needed) if not (root / name).is_dir()]
    if missing:
        missing_data(missing)
    return root


def parse_names(text: str, known: Sequence[str], option: str, *, empty: bool = False) -> list[str]:
    """The comma-separated names of ``option`` (in order, once each); one line and exit 2
    for a name not in ``known`` (or for no name at all, unless ``empty``)."""
    names = list(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    unknown = [n for n in names if n not in known]
    if unknown or not (names or empty):
        what = (
            f"unknown name{'s' if len(unknown) > 1 else ''} {', '.join(repr(n) for n in unknown)}"
            if unknown
            else "no name"
        )
        sys.stderr.write(f"{_script()}: {option}: {what} (known: {', '.join(known)})\n")
        raise SystemExit(2)
    return names


def _script() -> str:
    return Path(sys.argv[0]).name if sys.argv and sys.argv[0] else "evaluation"


def guard_row(name: str, conf: np.ndarray, hit: np.ndarray) -> dict[str, Any]:
    """One aggregator's figures (accuracy, mean confidence, gap, ECE) as the guard
    evaluations print them."""
    from dissensus.guard.metrics import figures

    f = figures(conf, hit)
    return {
        "method": name,
        "accuracy": f.accuracy,
        "confidence": f.mean_confidence,
        "gap": f.gap,
        "ece": f.ece,
    }


# Option types: a bad value is argparse's one-line usage error (exit 2), given before any
# data is read, rather than a traceback (or a run that never ends) later.


def at_least(minimum: int) -> Callable[[str], int]:
    """An ``int`` option type refusing a whole number below ``minimum``."""

    def whole(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, not {value}")
        return value

    return whole


def fraction(text: str) -> float:
    """A ``float`` option type for a number in [0, 1]."""
    value = finite(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must lie in [0, 1], not {text}")
    return value


def fractions(text: str) -> list[float]:
    """A comma-separated list of :func:`fraction` values (at least one)."""
    values = [fraction(part.strip()) for part in text.split(",") if part.strip()]
    if not values:
        raise argparse.ArgumentTypeError("no number given")
    return values


def non_negative(text: str) -> float:
    """A ``float`` option type for a finite number >= 0."""
    value = finite(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, not {text}")
    return value


def finite(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"not a finite number: {text}")
    return value


def output_file(text: str) -> Path:
    """A file the script will write: its folder must exist (checked before the run, not
    after it, when the figures would be lost)."""
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a directory, not a file")
    if not path.parent.is_dir():
        raise argparse.ArgumentTypeError(f"no directory {path.parent} to write {path.name} in")
    return path


def work_dir(text: str) -> Path:
    """A directory the script keeps files in, created (with its parents) if need be."""
    path = Path(text)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise argparse.ArgumentTypeError(
            f"cannot use {text} as a directory: {exc.strerror or exc}"
        ) from None
    return path


def input_file(text: str) -> Path:
    """A file the script reads: it must be one."""
    path = Path(text)
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"no file {text}")
    return path
