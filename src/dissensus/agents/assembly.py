"""Assembly: the negotiating agents a CONCORD problem file names.

Building agents is outside CONCORD's core: it joins the problem file (the core's
input), user code (function agents) and the model stack (LLM agents). The protocol
only sees :class:`~dissensus.concord.agent.NegotiationAgent` objects.

Choices this module makes:

* A problem file is trusted code: ``module:function`` names are loaded with
  :func:`dissensus.loading.load_callable`, a module beside the problem file
  (``base_dir``) first, imported by file path without touching ``sys.path``.
* LLM agents need a model client (any :class:`~dissensus.llm.ChatClient`); a problem
  with LLM agents and no client is a :class:`~dissensus.errors.ConfigError` naming
  the agent.
"""

from __future__ import annotations

from pathlib import Path

from dissensus.agents.llm_negotiator import LLMNegotiator
from dissensus.concord.agent import NegotiationAgent
from dissensus.concord.function import FunctionAgent
from dissensus.concord.problem import Problem
from dissensus.concord.table import TableAgent
from dissensus.errors import ConfigError
from dissensus.llm.base import ChatClient
from dissensus.loading import load_callable

__all__ = ["build_agents"]


def build_agents(
    problem: Problem,
    *,
    base_dir: str | Path | None = None,
    client: ChatClient | None = None,
    file: str | None = None,
    threaded: bool = False,
) -> list[NegotiationAgent]:
    """Instantiate the agents a problem names (LLM agents need ``client``).

    ``threaded`` runs synchronous function agents in worker threads, so a deadline or a
    cancellation can stop waiting for them.
    """
    base = Path(base_dir).resolve() if base_dir is not None else None
    agents: list[NegotiationAgent] = []
    for i, spec in enumerate(problem.agents):
        where = f"agents.{i}"
        if spec.kind == "table":
            assert spec.scores is not None
            agents.append(TableAgent(spec.id, spec.scores, timeout=spec.timeout))
        elif spec.kind == "function":
            assert spec.score is not None
            score = load_callable(spec.score, base_dir=base, field=f"{where}.score", file=file)
            propose = (
                load_callable(spec.propose, base_dir=base, field=f"{where}.propose", file=file)
                if spec.propose
                else None
            )
            repair = (
                load_callable(spec.repair, base_dir=base, field=f"{where}.repair", file=file)
                if spec.repair
                else None
            )
            agents.append(
                FunctionAgent(
                    spec.id,
                    score,
                    propose=propose,
                    repair=repair,
                    timeout=spec.timeout,
                    threaded=threaded,
                )
            )
        else:
            if client is None:
                raise ConfigError(
                    f"agent {spec.id!r} is an LLM agent: configure a model (--model or DISSENSUS_MODEL)",
                    file=file,
                    field=where,
                )
            assert spec.role is not None
            agents.append(LLMNegotiator(spec.id, spec.role, client, timeout=spec.timeout))
    return agents
