"""Adapters that put the pipeline where users already are: LangGraph, Inspect AI, MCP.

Each integration is a module of its own and imports its framework only when that module
is imported, never at ``import dissensus`` time (this package imports nothing):

* :mod:`dissensus.integrations.langgraph` -- ``decision_node(...)``, a ``StateGraph``
  node that decides, routes by action and turns an escalation into a human interrupt
  (extra ``langgraph``);
* :mod:`dissensus.integrations.inspect` -- the ``dissensus`` score reducer for
  ``multi_scorer`` grader panels (extra ``inspect``);
* :mod:`dissensus.integrations.mcp` -- the ``dissensus mcp`` server over stdio (extra
  ``mcp``).

Every adapter calls the same public pipeline (:func:`dissensus.pipeline.decide`) and the
same review path as the CLI; none of them decides anything the CLI would decide
differently. See ``docs/integrations.md``.
"""

__all__: list[str] = []
