"""Communication regimes (CONCORD, ``docs/concord.md``): group channel or workflow graph.

On a *group channel* every agent receives every exchange directly (one hop). On a
*workflow graph* (undirected edges between agents) an exchange travels along the
graph's shortest paths, relayed by the agents in between.

Choices this module makes:

* **Covered set.** The negotiating set is the largest connected component of the graph;
  between components of equal size, the one holding the agent listed first in the
  problem wins. Agents outside it are reported ``unknown``: they cannot receive
  candidates or send scores, so they neither propose, score nor repair, and the
  certificate speaks only for the covered set. An agent named by no edge is its own
  component. On a group channel everyone is covered.
* **Cost accounting.** An exchange (a proposal, a repair, or one agent's batch of
  scores) is delivered to every other covered agent. A delivery over a path of ``d``
  edges costs ``d`` messages (each relay forwards it once); ``hops`` reports the longest
  path any delivery took. The protocol, and so the accepted moves and the outcome, does
  not depend on the regime: only messages and hops do.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import networkx as nx

__all__ = ["Regime"]


@dataclass
class Regime:
    """A communication regime over a fixed agent list."""

    agents: list[str]
    """Every agent of the problem, in problem order."""
    edges: list[tuple[str, str]] | None = None
    """Workflow graph edges; ``None`` is the group channel."""
    covered: list[str] = field(init=False)
    """The negotiating set, in problem order."""
    unknown: list[str] = field(init=False)
    """Agents the graph does not connect to the negotiating set, in problem order."""
    _distance: dict[str, dict[str, int]] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.edges is None:
            self.covered = list(self.agents)
            self.unknown = []
            self._distance = {}
            return
        import networkx as nx  # imported on first use: it costs ~0.3 s at start-up

        graph: nx.Graph = nx.Graph()
        graph.add_nodes_from(self.agents)
        graph.add_edges_from(self.edges)
        position = {a: i for i, a in enumerate(self.agents)}
        components = [set(c) for c in nx.connected_components(graph)]
        components.sort(key=lambda c: (-len(c), min(position[a] for a in c)))
        chosen = components[0] if components else set()
        self.covered = [a for a in self.agents if a in chosen]
        self.unknown = [a for a in self.agents if a not in chosen]
        sub = graph.subgraph(chosen)
        self._distance = {src: dict(dists) for src, dists in nx.all_pairs_shortest_path_length(sub)}

    def broadcast(self, source: str) -> tuple[int, int]:
        """(messages, longest path in hops) of delivering one exchange from ``source``."""
        others = [a for a in self.covered if a != source]
        if not others:
            return 0, 0
        if self.edges is None:
            return len(others), 1
        dists = [self._distance[source][a] for a in others]
        return sum(dists), max(dists)
