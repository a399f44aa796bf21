"""dissensus: the decision layer for multi-agent LLM systems.

Read a panel's disagreement (:mod:`dissensus.states`), check whether agreement is
evidence (:mod:`dissensus.guard`), negotiate (:mod:`dissensus.concord`), deliberate
(:mod:`dissensus.dci`), or hand the case to a human through the composed pipeline
(:mod:`dissensus.pipeline`), always with a verifiable record.

The shared models and the entry points of each part are loaded on first access, so that
``import dissensus`` costs nothing (the command line's launcher, :mod:`dissensus.__main__`,
relies on it: a Ctrl-C while the command line loads must find its handler in place).
"""

from __future__ import annotations

import warnings
from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dissensus.concord import negotiate, verify
    from dissensus.dci import deliberate
    from dissensus.guard import guard_votes
    from dissensus.llm import resolve_model
    from dissensus.pipeline import decide
    from dissensus.states import read_panel, read_panels, route
    from dissensus.types import AgentOutput, Evidence, Panel, Usage, Vote, VoteCase

from dissensus.version import __version__

_LAZY = {
    "AgentOutput": "dissensus.types",
    "Evidence": "dissensus.types",
    "Panel": "dissensus.types",
    "Usage": "dissensus.types",
    "Vote": "dissensus.types",
    "VoteCase": "dissensus.types",
    "read_panel": "dissensus.states",
    "read_panels": "dissensus.states",
    "route": "dissensus.states",
    "guard_votes": "dissensus.guard",
    "negotiate": "dissensus.concord",
    "verify": "dissensus.concord",
    "deliberate": "dissensus.dci",
    "decide": "dissensus.pipeline",
    "resolve_model": "dissensus.llm",
}

__all__ = [
    "AgentOutput",
    "Evidence",
    "Panel",
    "Usage",
    "Vote",
    "VoteCase",
    "__version__",
    "decide",
    "deliberate",
    "guard_votes",
    "negotiate",
    "read_panel",
    "read_panels",
    "resolve_model",
    "route",
    "verify",
]


_RENAMED = {"audit": "guard_votes"}
"""Earlier top-level names: still importable, with a :class:`DeprecationWarning` naming
the current one (an *audit* is a reviewer's blind check of an automatic commit)."""


def __getattr__(name: str) -> Any:
    if name in _RENAMED:
        new = _RENAMED[name]
        warnings.warn(
            f"dissensus.{name} is deprecated: use dissensus.{new}", DeprecationWarning, stacklevel=2
        )
        return __getattr__(new)
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'dissensus' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value
