"""Former home of the per-agent signals, now :mod:`dissensus.signals` (deprecated path).

The signals are pure functions of a panel and its re-ask that both the pipeline and
the acceptance features read, so they live below both (:mod:`dissensus.signals`).
Importing a name from here still works and warns with :class:`DeprecationWarning`
(a module ``__getattr__``, as httpx does); nothing inside the package imports this path
(a ruff banned-API rule in ``pyproject.toml`` keeps it that way).
"""

from __future__ import annotations

from dissensus import signals as _signals
from dissensus.deprecation import deprecated_names, moved

__all__: list[str] = []


__getattr__ = deprecated_names(__name__, moved(_signals, _signals.__all__))
