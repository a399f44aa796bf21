"""Function agents, under their earlier import path (they live in :mod:`dissensus.concord.function`)."""

from __future__ import annotations

from dissensus.concord.function import FunctionAgent, as_outcome
from dissensus.loading import load_callable

__all__ = ["FunctionAgent", "as_outcome", "load_callable"]
