"""Former home of the per-agent signals, now :mod:`dissensus.signals` (deprecated path).

The signals are pure functions of a panel and its re-ask that both the pipeline and
the acceptance features read, so they live below both (:mod:`dissensus.signals`).
Importing a name from here still works and warns with :class:`DeprecationWarning`
(a module ``__getattr__``, as httpx does); nothing inside the package imports this path
(a ruff banned-API rule in ``pyproject.toml`` keeps it that way).
"""

from __future__ import annotations

import warnings
from typing import Any

from dissensus import signals as _signals

__all__: list[str] = []


def __getattr__(name: str) -> Any:
    if name in _signals.__all__:
        warnings.warn(
            f"dissensus.pipeline.signals.{name} moved to dissensus.signals.{name}",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(_signals, name)
    raise AttributeError(f"module 'dissensus.pipeline.signals' has no attribute {name!r}")
