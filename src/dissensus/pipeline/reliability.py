"""Deprecated: the trust regions moved to :mod:`dissensus.pipeline.trust_regions` (the
guard's reliabilities are :mod:`dissensus.guard.reliability`; one module name, one meaning)."""

from __future__ import annotations

import importlib
import warnings
from typing import Any

# The package exports a function named trust_regions, so the module is looked up by name.
_moved = importlib.import_module("dissensus.pipeline.trust_regions")

__all__: list[str] = []


def __getattr__(name: str) -> Any:
    if name in _moved.__all__:
        warnings.warn(
            f"dissensus.pipeline.reliability.{name} is deprecated: use "
            f"dissensus.pipeline.trust_regions.{name}",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(_moved, name)
    raise AttributeError(f"module 'dissensus.pipeline.reliability' has no attribute {name!r}")
