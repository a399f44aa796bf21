"""Deprecated: the trust regions moved to :mod:`dissensus.pipeline.trust_regions` (the
guard's reliabilities are :mod:`dissensus.guard.reliability`; one module name, one meaning).

Each moved name still imports from here with a :class:`DeprecationWarning`, a star
import too: ``__all__`` lists them, so ``import *`` asks ``__getattr__`` for each."""

from __future__ import annotations

import importlib

from dissensus.deprecation import deprecated_names, moved

# The package exports a function named trust_regions, so the module is looked up by name.
_moved = importlib.import_module("dissensus.pipeline.trust_regions")

# The moved names, served by __getattr__ below (a star import warns for each).
__all__ = [*_moved.__all__]


__getattr__ = deprecated_names(__name__, moved(_moved, _moved.__all__))
