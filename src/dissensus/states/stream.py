"""Streaming reads and routes: panels in, one JSON record per panel out, bounded memory.

:func:`route_stream` reads panels in batches with a similarity backend, routes each
reading through a rule set and writes :func:`record_of` each one as a JSON line; it
holds one batch at a time. ``dissensus route`` and the benchmarks use it.

Choices: a record names ``reasoning_similarity`` and ``min_similarity`` as ``null``
when similarity is undefined (fewer than two agents gave reasoning) and lists
``missing_reasoning`` only when some agent gave none, so records of complete panels
keep their shape. Panels read from a file come with their input line (``numbered``):
each record then carries ``line`` (1-based) after ``id``, as ``decide``'s records do, so
two panels of one id are told apart; panels given without one have no ``line`` key.
Records are compact JSON written by :func:`dissensus.io.fastjson.dumps_line` (orjson
when installed).

The readings of a batch whose records do not show the matrix (no ``with_matrix``) and
none of which is kept for display carry an empty ``matrix``: they never leave
:func:`route_stream`, and routing never reads the matrix (see
:func:`dissensus.states.reading._read_batch`).

While it streams, the collector's first threshold is raised to at least
:data:`GC_THRESHOLD` tracked objects
(:func:`dissensus.states.collector.raised_gc_threshold`, which ``decide``'s executors
use too: one process-wide raise shared by every run going on, the original restored
when the last ends, also on error). A batch of 256 five-agent panels holds about
10,000 tracked objects (models, their dicts and lists) that live until the batch is
written; at the default threshold of 700 the collector scans them over and over (8 to
10 µs per panel measured). The count that
triggers a collection is allocations minus deallocations, so a batch freed by
reference counting does not add to it: collections still happen when objects really
accumulate (reference cycles, larger batches), and memory stays bounded.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import islice
from typing import IO, cast

from dissensus.io.fastjson import dumps_line
from dissensus.states.collector import GC_THRESHOLD, raised_gc_threshold
from dissensus.states.reading import Reading, State, Thresholds, _read_batch
from dissensus.states.routing import Route, RuleSet, route_of
from dissensus.states.similarity import SimilarityBackend
from dissensus.types import JsonObject, PanelLike

__all__ = [
    "GC_THRESHOLD",
    "Numbered",
    "RouteTally",
    "raised_gc_threshold",
    "record_of",
    "route_stream",
]

Numbered = tuple[int, PanelLike]
"""A panel with its input line (1-based): what :func:`route_stream` takes with ``numbered``."""


def record_of(
    reading: Reading, routed: Route, *, with_matrix: bool = False, line: int | None = None
) -> JsonObject:
    """The JSON record of one routed panel (with its input ``line``, when given)."""
    return _record(
        reading,
        (routed.action, routed.rule, routed.defeated, routed.concurring),
        with_matrix,
        line,
    )


def _record(
    reading: Reading,
    routed: tuple[str, str, Sequence[str], Sequence[str]],
    with_matrix: bool,
    line: int | None = None,
) -> JsonObject:
    """:func:`record_of` from the route's fields (lists or tuples: both are JSON arrays)."""
    action, rule, defeated, concurring = routed
    record: JsonObject = {
        "id": reading.id,
        "line": line,
        "state": reading.state._value_,  # as .value, without the enum descriptor
        "action": action,
        "reasoning_similarity": reading.mean_similarity if reading.similarity_defined else None,
        "min_similarity": reading.min_similarity if reading.similarity_defined else None,
        "agreement": reading.agreement,
        "decision": reading.decision,
        "tie": reading.tie,
        "votes": reading.votes,
        "abstentions": reading.abstentions,
        "rule": rule,
        "defeated": defeated,
        "concurring": concurring,
        "model": reading.model,
        "theta_s": reading.thresholds.theta_s,
        "theta_a": reading.thresholds.theta_a,
    }
    if line is None:  # a panel of no file: the record keeps the shape of RouteRecord
        del record["line"]
    if reading.missing_reasoning:
        record["missing_reasoning"] = reading.missing_reasoning
    if with_matrix:
        record["agents"] = reading.agents
        record["matrix"] = reading.matrix
    return record


def _batches(
    panels: Iterator[PanelLike | Numbered], size: int, numbered: bool
) -> Iterator[tuple[list[PanelLike], list[int] | None]]:
    """Batches of ``size`` panels, each with the panels' input lines when ``numbered``."""
    while batch := list(islice(panels, size)):
        if numbered:
            pairs = cast("list[Numbered]", batch)
            yield [p for _, p in pairs], [n for n, _ in pairs]
        else:
            yield cast("list[PanelLike]", batch), None


@dataclass
class RouteTally:
    """What a routing run saw: counts per state and action, and the first rows."""

    total: int = 0
    states: Counter[str] = field(default_factory=Counter)
    actions: Counter[str] = field(default_factory=Counter)
    rows: list[tuple[Reading, Route]] = field(default_factory=list)


def route_stream(
    panels: Iterable[PanelLike] | Iterable[Numbered],
    backend: SimilarityBackend,
    thresholds: Thresholds,
    ruleset: RuleSet,
    *,
    handle: IO[str] | None = None,
    batch_size: int = 256,
    with_matrix: bool = False,
    keep_rows: int = 0,
    numbered: bool = False,
) -> RouteTally:
    """Read and route ``panels`` in batches, writing one JSON record per panel to ``handle``.

    With ``numbered``, ``panels`` are ``(line, panel)`` pairs (:data:`Numbered`) and each
    record carries the panel's input ``line``.

    Holds one batch at a time plus at most ``keep_rows`` readings for display.
    """
    with raised_gc_threshold():
        return _route_batches(
            panels,
            backend,
            thresholds,
            ruleset,
            handle,
            batch_size,
            with_matrix,
            keep_rows,
            numbered,
        )


def _route_batches(
    panels: Iterable[PanelLike] | Iterable[Numbered],
    backend: SimilarityBackend,
    thresholds: Thresholds,
    ruleset: RuleSet,
    handle: IO[str] | None,
    batch_size: int,
    with_matrix: bool,
    keep_rows: int,
    numbered: bool,
) -> RouteTally:
    tally = RouteTally()
    states, actions = tally.states, tally.actions
    encode = dumps_line
    route_fields = ruleset.route_fields
    # No rule reads value_profiles: the count cannot change a route, and is not made.
    count_profiles = "value_profiles" in ruleset.names
    source = iter(cast("Iterable[PanelLike | Numbered]", panels))
    for batch, lines in _batches(source, batch_size, numbered):
        # Matrices only when a record or a kept row can show them (see _read_batch).
        matrices = with_matrix or len(tally.rows) < keep_rows
        readings = _read_batch(batch, backend, thresholds, matrices=matrices)
        # States are counted by value, then by member once per batch: an enum member's
        # hash is a Python call, its value's is not.
        seen: list[str] = []
        numbers = iter(lines) if lines is not None else None
        for panel, reading in zip(batch, readings, strict=True):
            profiles: int | None = None
            if count_profiles:
                profiles = len([o for o in panel.outputs if o.values])
            # The route's fields (shared, immutable): a Route only for a kept row.
            fields = route_fields(reading, panel.meta, value_profiles=profiles)
            seen.append(reading.state._value_)
            actions[fields[0]] += 1
            line = next(numbers) if numbers is not None else None
            if handle is not None:
                handle.write(encode(_record(reading, fields, with_matrix, line)))
            if len(tally.rows) < keep_rows:
                tally.rows.append((reading, route_of(fields)))
        for value, count in Counter(seen).items():
            states[State(value)] += count
        tally.total += len(batch)
    return tally
