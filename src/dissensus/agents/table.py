"""Table agents, under their earlier import path (they live in :mod:`dissensus.concord.table`)."""

from __future__ import annotations

from dissensus.concord.table import TableAgent

__all__ = ["TableAgent"]
