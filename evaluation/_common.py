"""What the evaluation scripts share: checking their data folder and their lists of names.

Not a script. Each check prints one line on stderr and exits 2 (as argparse does for a
bad option) instead of failing later with a traceback, or running something else than
was asked.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
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
