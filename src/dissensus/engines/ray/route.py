"""``route`` on Ray (:func:`route_ray`): a Ray Data ``map_batches`` over a pool of
:class:`_Router` workers, each routing blocks of input lines with the local path itself
(:func:`~dissensus.states.stream.route_stream`); the driver writes the records and
rejects in input order and sums the tallies."""

from __future__ import annotations

import io
import json
import logging
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, TypeAlias

from typing_extensions import TypedDict

from dissensus.engines.blocks import block_lines, plan_blocks, plan_text_blocks
from dissensus.engines.ray.cluster import RayOptions, _ray, _warm, ensure_ray
from dissensus.engines.ray.messages import _block_of, _fields, _rss_mb
from dissensus.errors import InputError
from dissensus.io.jsonl import Reject, RejectSink, blank_line, bounded_lines, open_text

_Row: TypeAlias = dict[str, Any]
"""A Ray Data row or batch (Ray's format: column name -> value, or -> array)."""


class _RouteSpec(TypedDict):
    """The settings of a route run, for its workers."""

    similarity: str
    no_cache: bool
    theta_s: float | None
    theta_a: float | None
    rules: str | None
    with_matrix: bool
    keep_rows: int


def _pool(workers: int) -> Any:
    ray = _ray()
    return ray.data.ActorPoolStrategy(size=workers)


def _dataset(items: list[_Row]) -> Any:
    ray = _ray()
    ctx = ray.data.DataContext.get_current()
    ctx.execution_options.preserve_order = True
    ctx.enable_progress_bars = False
    # Ray Data's logger is its own (a line per dataset started and finished on stderr).
    logging.getLogger("ray.data").setLevel(logging.ERROR)
    return ray.data.from_items(items, override_num_blocks=max(1, len(items)))


def _rows(dataset: Any) -> Iterator[_Row]:
    yield from dataset.iter_rows()


class _Router:
    """One Ray worker of a route run: loads rules and backend once, routes blocks."""

    def __init__(self, spec: _RouteSpec) -> None:
        from dissensus.states.reading import Thresholds
        from dissensus.states.routing import RuleSet
        from dissensus.states.similarity import get_backend

        self.spec = spec
        self.backend = get_backend(spec["similarity"], cache=not spec["no_cache"])
        self.ruleset = RuleSet.load(spec["rules"]) if spec["rules"] else RuleSet.default()
        self.thresholds = Thresholds.for_model(self.backend.name, spec["theta_s"], spec["theta_a"])

    def __call__(self, batch: _Row) -> dict[str, list[Any]]:
        import pickle

        from dissensus.states.stream import route_stream

        results: list[Any] = []
        for raw in batch["item"]:
            item = json.loads(str(raw))
            block = _block_of(item["block"])
            from dissensus.io.views import parse_panel_view

            parsed = [
                (n, parse_panel_view(text, file=item["name"], line=n))
                for n, text in block_lines(block)
                if not blank_line(text, n)
            ]
            rejects = [r.model_dump(mode="json") for _, r in parsed if isinstance(r, Reject)]
            # Numbered: each record carries its input line, as a local run's does.
            panels = [(n, p) for n, p in parsed if not isinstance(p, Reject)]
            # The local path itself on the block's panels: the same records by construction.
            out = io.StringIO()
            tally = route_stream(
                panels,
                self.backend,
                self.thresholds,
                self.ruleset,
                handle=out,
                with_matrix=self.spec["with_matrix"],
                keep_rows=self.spec["keep_rows"],
                numbered=True,
            )
            # Records end with "\n" only: an id's U+2028, U+0085 or \x1c-\x1e (which
            # str.splitlines splits at) is part of its record, written raw.
            lines = out.getvalue().split("\n")
            if lines and not lines[-1]:
                lines.pop()
            states = Counter({str(state): n for state, n in tally.states.items()})
            actions = tally.actions
            rows = tally.rows
            results.append(
                pickle.dumps(
                    {
                        "index": block.index,
                        "lines": lines,
                        "rejects": rejects,
                        "states": states,
                        "actions": actions,
                        "rows": rows,
                        "rss_mb": _rss_mb(),
                    }
                )
            )
        return {"result": results}


def route_ray(
    path: str,
    *,
    similarity: str,
    no_cache: bool,
    theta_s: float | None,
    theta_a: float | None,
    rules: str | None,
    handle: IO[str] | None,
    sink: RejectSink,
    with_matrix: bool = False,
    keep_rows: int = 0,
    options: RayOptions | None = None,
    source: IO[str] | None = None,
) -> Any:
    """Route every panel of ``path`` on Ray; the same records and rejects as a local run.

    ``source``: ``path`` already opened, for an input the workers cannot read themselves
    (standard input, a named pipe): the driver reads it whole and sends its lines.
    Returns a :class:`dissensus.states.stream.RouteTally`.
    """
    import pickle

    from dissensus.states.stream import RouteTally

    opts = options or RayOptions()
    if source is not None:
        name = path  # standard input is ``-``, as the local reader names it
        blocks = plan_text_blocks(list(bounded_lines(source)), opts.lines_per_block)
    elif path == "-":
        name = "-"
        with open_text("-") as stdin:  # surrogateescape, as the local reader
            blocks = plan_text_blocks(list(bounded_lines(stdin)), opts.lines_per_block)
    else:
        name = path
        if not Path(path).is_file():
            raise InputError(f"file not found: {path}")
        # The workers read the file themselves, their working directory not the
        # driver's (a cluster's is wherever it was started): an absolute path.
        blocks = plan_blocks(str(Path(path).resolve()), opts.lines_per_block)
    tally = RouteTally()
    if not blocks:
        return tally
    spec = _RouteSpec(
        similarity=similarity,
        no_cache=no_cache,
        theta_s=theta_s,
        theta_a=theta_a,
        rules=str(Path(rules).resolve()) if rules else None,
        with_matrix=with_matrix,
        keep_rows=keep_rows,
    )
    _warm(similarity)
    workers = ensure_ray(opts)
    items = [
        {"item": json.dumps({"block": _fields(b), "name": name}, ensure_ascii=False)}
        for b in blocks
    ]
    ds = _dataset(items).map_batches(
        _Router,
        fn_constructor_args=(spec,),
        batch_size=1,
        batch_format="numpy",
        compute=_pool(min(workers, len(items))),
        num_cpus=1,
    )
    for row in _rows(ds):
        result = pickle.loads(row["result"])
        for reject in result["rejects"]:
            sink.add(Reject.model_validate(reject))
        if handle is not None:
            for line in result["lines"]:
                handle.write(line + "\n")
        tally.states.update(result["states"])
        tally.actions.update(result["actions"])
        tally.total += len(result["lines"])
        for pair in result["rows"]:
            if len(tally.rows) < keep_rows:
                tally.rows.append(pair)
    return tally
