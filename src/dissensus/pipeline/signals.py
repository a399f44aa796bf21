"""Former home of the per-agent signals, now :mod:`dissensus.signals` (deprecated path).

The signals are pure functions of a panel and its re-ask that both the pipeline and
the acceptance features read, so they live below both (:mod:`dissensus.signals`).
Importing a name from here still works and warns with :class:`DeprecationWarning`
(a module ``__getattr__``, as httpx does), a star import too: ``__all__`` lists the
moved names, so a star import of this module asks ``__getattr__`` for each and warns,
where an empty ``__all__`` imported nothing without a word. Nothing inside the package
imports this path (a ruff banned-API rule in ``pyproject.toml`` keeps it that way).
"""

from __future__ import annotations

from dissensus import signals as _signals
from dissensus.deprecation import deprecated_names, moved

# The moved names, served by __getattr__ below (a star import warns for each).
__all__ = [*_signals.__all__]


__getattr__ = deprecated_names(__name__, moved(_signals, _signals.__all__))
