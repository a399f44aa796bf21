"""CLI commands ``dissensus route`` and ``dissensus calibrate-thresholds`` (``docs/states.md``).

``route`` streams panels (one JSON object per line, ``-`` for standard input) in bounded
batches, reads each panel's disagreement state and routes it through the default rules
plus an optional YAML rules file. ``--json`` writes one JSON record per panel, with its
input ``line`` as ``decide`` writes it (to ``--out`` or standard output); the human mode prints a table and a summary of states and
actions. Memory stays bounded whatever the number of panels: one batch of panels is held
at a time, and the human table shows at most the first ``--show`` rows.

Bad lines (invalid JSON, missing or mistyped fields, fewer than two agents, confidence
outside [0, 1], duplicate agent ids) are reported on standard error with file, line and
field, written to ``--rejects``, and skipped; every good line is still routed. Empty
reasoning is no bad line: the agent is left out of the similarity and named in the
reading's ``missing_reasoning`` (``docs/states.md``). Too few agents and duplicate agent ids are reported on field ``outputs``. Exit
codes: 0 ok, 2 usage error (missing file, bad flag, bad rules file, unknown backend), 3
when any line was rejected.

Choices this module makes:

* ``calibrate-thresholds`` reads a panel id once: a later panel of an id seen before is
  dropped, one warning per repeated id on standard error once the corpus is read (a copy
  would count twice among the per-panel similarities and shift the quantile taken as
  θ_s); the exit code is unchanged. ``route`` routes every panel, copies included, as
  ``decide`` does. Only the ids seen are kept, never the panels.
* Both open their input before ``--rejects`` (:func:`~dissensus.cli.common.open_input`):
  an input refused whole (gzip or UTF-16 piped in, or from a named pipe) leaves the
  rejects file of an earlier run as it was.
* ``route`` reads a panel's decisions as they are written (a label it cannot know is
  the same is a different decision), but says once, at the end, how many panels have
  decisions that differ only in case, white space or characters no reader tells apart
  (``remove``, ``Remove ``, a full-width ``ｒｅｍｏｖｅ``, a composed and a decomposed
  ``é``: :func:`dissensus.families.decision_form`, the form decisions are told apart
  by elsewhere), naming the first: such a panel reads as a disagreement. Decisions a
  reader tells apart (``2⁵`` and ``25``, ``Ⅸ`` and ``IX``, two flags) are not named.
  With ``--engine ray`` the workers read the panels and nothing is said.
* ``--engine ray`` reads a named pipe as it reads standard input: this process reads it
  whole and sends the lines to the workers (a pipe can be read once, by one reader); a
  regular file is read by the workers themselves.
"""

from __future__ import annotations

import gc
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack
from itertools import islice
from typing import IO, TYPE_CHECKING, Any

import typer
from rich import box
from rich.table import Table

from dissensus.cli.app import app
from dissensus.cli.common import (
    MAX_BATCH,
    MAX_WORKERS,
    atomic_output,
    check_input_path,
    check_outputs,
    err_console,
    exit_for,
    not_empty,
    number_in,
    open_input,
    out_console,
    print_json,
    print_table,
    progress,
    progress_enabled,
    quoted,
    reject_sink,
    shown,
    stdout_handle,
    whole_records,
)
from dissensus.errors import InputError
from dissensus.types import PanelLike

if TYPE_CHECKING:
    from dissensus.io.jsonl import RejectSink
    from dissensus.states.reading import Reading, Thresholds
    from dissensus.states.similarity import SimilarityBackend
    from dissensus.states.stream import RouteTally, record_of, route_stream

__all__ = ["RouteTally", "calibrate_command", "record_of", "route_command", "route_stream"]

DEFAULT_BACKEND = "minilm"
"""``dissensus.states.similarity.DEFAULT_BACKEND``, spelt out so that registering the
commands loads no similarity code (a test keeps the two equal)."""

_REEXPORTED = {"RouteTally", "record_of", "route_stream"}


def __getattr__(name: str) -> Any:
    """The streaming helpers of :mod:`dissensus.states.stream`, loaded on first use."""
    if name in _REEXPORTED:
        from dissensus.states import stream

        return getattr(stream, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_STATE_ORDER = ("CA", "DA", "CD", "DD")

ROUTE_LEGEND = (
    "CA convergent agreement, DA divergent agreement, CD convergent disagreement, DD divergent "
    "disagreement (reasoning similar or not x conclusions agree or not); sim n/a: fewer than two "
    "agents gave reasoning"
)


def _progress_total(path: str) -> int | None:
    """Line count for the progress bar (only when a bar will be shown)."""
    if path == "-" or not progress_enabled():
        return None
    count = 0
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            count += chunk.count(b"\n")
    return count


def _panels(handle: IO[str], path: str, sink: RejectSink) -> Iterator[tuple[int, PanelLike]]:
    """Valid panels of ``handle`` (``path`` opened by :func:`open_input`, before the
    rejects file) with their input lines, read-only views where they parse as one,
    lazily; rejects go to ``sink``."""
    from dissensus.io.jsonl import Reject, bounded_lines
    from dissensus.io.views import read_numbered_panel_views

    name = path  # standard input is ``-`` in rejects, as every JSONL reader names it
    try:
        lines = progress(
            bounded_lines(handle), description="reading panels", total=_progress_total(path)
        )
        for number, item in read_numbered_panel_views(lines, file=name):
            if isinstance(item, Reject):
                sink.add(item)
            else:
                yield number, item
    except UnicodeDecodeError as exc:
        raise InputError(
            f"{name}: not UTF-8 text ({exc.reason} at byte {exc.start} of a read block)"
        ) from None
    except OSError as exc:
        raise InputError(f"cannot read {name}: {exc.strerror or exc}") from None


def _regular_file(path: str) -> bool:
    """Whether ``path`` names a regular file (checked already to be a file or a pipe); a
    path gone since is no regular file: opening it then says why, as for a local run."""
    import stat
    from pathlib import Path

    if path == "-":
        return False
    try:
        return stat.S_ISREG(Path(path).stat().st_mode)
    except OSError:
        return False


def _backend(similarity: str, no_cache: bool, allow_code: bool) -> SimilarityBackend:
    from dissensus.states.similarity import get_backend

    return get_backend(similarity, cache=not no_cache, allow_code=allow_code or None)


def _fmt(x: float) -> str:
    return f"{x:.3f}"


def _decision_cell(reading: Reading) -> str:
    if reading.tie:
        return "tie " + "/".join(shown(t) for t in reading.tie)
    return "—" if reading.decision is None else shown(reading.decision)


def _print_human(tally: RouteTally, rejected: int, thresholds: Thresholds, model: str) -> None:
    rows, total, states, actions = tally.rows, tally.total, tally.states, tally.actions
    n_rows = len(rows)
    table = Table(
        title=f"dissensus route  (model {model}, θ_s={thresholds.theta_s:g}, θ_a={thresholds.theta_a:g})",
        box=box.SIMPLE_HEAD,
    )
    wide = out_console.width >= 100
    columns = ["id", "state", "action", "rule", "decision", "agree", "sim"] + (
        ["min"] if wide else []
    )
    for col in columns:
        numeric = col in ("agree", "sim", "min")
        table.add_column(
            col,
            justify="right" if numeric else "left",
            # Only the free-text columns may wrap; the codes stay readable on one line.
            no_wrap=col not in ("id", "decision"),
            overflow="fold",
        )
    for reading, routed in rows:
        cells = [
            shown(reading.id),
            reading.state.value,
            shown(routed.action),
            shown(routed.rule),
            _decision_cell(reading),
            _fmt(reading.agreement),
            _fmt(reading.mean_similarity) if reading.similarity_defined else "n/a",
        ]
        least = _fmt(reading.min_similarity) if reading.similarity_defined else "n/a"
        table.add_row(*cells, *([least] if wide else []))
    if total:
        print_table(table)
        out_console.print(ROUTE_LEGEND)
    if total > n_rows:
        out_console.print(
            f"… {total - n_rows} more panels not shown (use --json or --out for every record)"
        )
    summary = Table(title="summary")
    summary.add_column("state")
    summary.add_column("panels", justify="right")
    summary.add_column("share", justify="right")
    for s in _STATE_ORDER:
        summary.add_row(s, str(states[s]), f"{states[s] / total:.1%}" if total else "—")
    actions_table = Table(title="actions")
    actions_table.add_column("action")
    actions_table.add_column("panels", justify="right")
    for action, n in sorted(actions.items(), key=lambda kv: (-kv[1], kv[0])):
        actions_table.add_row(shown(action), str(n))
    out_console.print(summary)
    out_console.print(actions_table)
    out_console.print(f"routed {total} panels, rejected {rejected} lines")


@app.command("route")
def route_command(
    panels: str = typer.Argument(
        ...,
        help="Panels JSONL, one panel per line ('-' = standard input).",
        callback=check_input_path,
    ),
    theta_s: float | None = typer.Option(
        None,
        "--theta-s",
        callback=number_in(-1.0, 1.0),
        help="Reasoning-similarity threshold (default: the model's calibrated default).",
    ),
    theta_a: float | None = typer.Option(
        None,
        "--theta-a",
        callback=number_in(0.0, 1.0),
        help="Conclusion-agreement threshold (default 0.8).",
    ),
    rules: str | None = typer.Option(
        None, "--rules", help="YAML rules file (domain rules, priorities, superiority)."
    ),
    similarity: str = typer.Option(
        DEFAULT_BACKEND,
        "--similarity",
        help="Similarity backend: minilm, tfidf, static or module:function.",
    ),
    json_out: bool = typer.Option(False, "--json", help="Write JSONL records instead of a table."),
    out: str | None = typer.Option(None, "--out", help="Write the JSONL records to this file."),
    rejects: str | None = typer.Option(
        None, "--rejects", help="Write rejected lines (JSONL) to this file."
    ),
    batch_size: int = typer.Option(
        256, "--batch-size", min=1, max=MAX_BATCH, help="Panels read per batch."
    ),
    no_cache: bool = typer.Option(
        False, "--no-cache", help="Do not use the on-disk embedding cache."
    ),
    allow_code: bool = typer.Option(
        False,
        "--allow-code",
        help="Allow a module:function similarity backend (it runs code over every panel's text).",
    ),
    matrix: bool = typer.Option(
        False, "--matrix", help="Include agent ids and the similarity matrix in records."
    ),
    show: int = typer.Option(
        50, "--show", min=0, help="Rows of the human table (the summary counts all)."
    ),
    engine: str = typer.Option(
        "local",
        "--engine",
        help="local (this process) or ray (Ray Data map_batches over a pool of workers; the 'ray' extra).",
    ),
    ray_address: str | None = typer.Option(
        None, "--ray-address", help="Ray cluster to join (default: start a local one)."
    ),
    workers: int | None = typer.Option(
        None,
        "--workers",
        min=1,
        max=MAX_WORKERS,
        help="Ray workers (default: the cluster's CPUs).",
    ),
) -> None:
    """Read each panel's disagreement state (CA/DA/CD/DD) and route it to an action."""
    from dissensus.engines import check_engine
    from dissensus.states.reading import Thresholds
    from dissensus.states.routing import RuleSet
    from dissensus.states.stream import route_stream

    not_empty(rules, "--rules", "the rules file")
    not_empty(similarity, "--similarity", "the similarity backend")
    engine = check_engine(engine, workers=workers, address=ray_address)
    check_outputs({"--out": out, "--rejects": rejects}, reads={"PANELS": panels, "--rules": rules})
    json_out = json_out or out == "-"  # the records on standard output: no table after them
    ruleset = RuleSet.load(rules) if rules else RuleSet.default()
    backend = _backend(similarity, no_cache, allow_code)
    thresholds = Thresholds.for_model(backend.name, theta_s, theta_a)
    handle: IO[str] | None = None
    alike = _LookAlikeDecisions()
    # Everything alive now (modules, schemas, rules) lives until exit: moving it out of
    # the collector's reach makes the per-batch garbage collections cheap (~25% faster).
    gc.freeze()
    with ExitStack() as stack:
        # The input first: one refused whole (gzip piped in) leaves --rejects as it was.
        # Ray's workers read a regular file themselves; standard input and a named pipe
        # can be read once only, by this process, which sends their lines.
        source = (
            stack.enter_context(open_input(panels))
            if engine != "ray" or not _regular_file(panels)
            else None
        )
        sink = stack.enter_context(reject_sink(rejects))
        if out is not None and out != "-":
            handle = stack.enter_context(atomic_output(out))
        elif json_out or out == "-":
            handle = stdout_handle()  # a failed write names standard output
        if handle is not None:  # no progress line inside a record (a shared pipe)
            handle = whole_records(handle)
        if engine == "ray":
            from dissensus.engines.ray import RayOptions, route_ray

            tally = route_ray(
                panels,
                similarity=similarity,
                no_cache=no_cache,
                theta_s=theta_s,
                theta_a=theta_a,
                rules=rules,
                handle=handle,
                sink=sink,
                with_matrix=matrix,
                keep_rows=0 if json_out else show,
                options=RayOptions(address=ray_address, workers=workers),
                source=source,
            )
        else:
            assert source is not None
            tally = route_stream(
                alike.panels(_panels(source, panels, sink)),
                backend,
                thresholds,
                ruleset,
                handle=handle,
                batch_size=batch_size,
                with_matrix=matrix,
                keep_rows=0 if json_out else show,
                numbered=True,
            )
        rejected = sink.count
    alike.warn(panels)
    if not json_out:
        _print_human(tally, rejected, thresholds, backend.name)
    raise typer.Exit(code=exit_for(rejected))


@app.command("calibrate-thresholds")
def calibrate_command(
    corpus: str = typer.Argument(
        ...,
        help="Reference corpus of panels (JSONL, '-' = standard input).",
        callback=check_input_path,
    ),
    quantile: float = typer.Option(
        ...,
        "--quantile",
        callback=number_in(0.0, 1.0),
        help="Quantile of per-panel mean similarity taken as θ_s.",
    ),
    similarity: str = typer.Option(
        DEFAULT_BACKEND,
        "--similarity",
        help="Similarity backend: minilm, tfidf, static or module:function.",
    ),
    json_out: bool = typer.Option(False, "--json", help="Print the calibration as JSON."),
    rejects: str | None = typer.Option(
        None, "--rejects", help="Write rejected lines (JSONL) to this file."
    ),
    batch_size: int = typer.Option(
        256, "--batch-size", min=1, max=MAX_BATCH, help="Panels read per batch."
    ),
    no_cache: bool = typer.Option(
        False, "--no-cache", help="Do not use the on-disk embedding cache."
    ),
    allow_code: bool = typer.Option(
        False,
        "--allow-code",
        help="Allow a module:function similarity backend (it runs code over every panel's text).",
    ),
) -> None:
    """Derive θ_s from a reference corpus: the QUANTILE of per-panel mean reasoning similarity."""
    from dissensus.states.theta_fit import fit_theta_s

    not_empty(similarity, "--similarity", "the similarity backend")
    check_outputs({"--rejects": rejects}, reads={"CORPUS": corpus})
    backend = _backend(similarity, no_cache, allow_code)
    once = _FirstOfEachId()
    with open_input(corpus) as source, reject_sink(rejects) as sink:
        panels_iter = once.panels(_panels(source, corpus, sink))
        first = list(islice(panels_iter, 1))
        if not first:
            raise InputError(f"{corpus}: no valid panels to calibrate on")
        result = fit_theta_s(
            _chain(first, panels_iter), backend, quantile, batch_size, source=corpus
        )
        rejected = sink.count
    once.warn()
    if json_out:
        print_json({**result.model_dump(), "rejected": rejected})
    else:
        table = Table(title="calibrated thresholds")
        table.add_column("field")
        table.add_column("value", justify="right")
        for key, value in result.model_dump().items():
            table.add_row(key, f"{value:.4f}" if isinstance(value, float) else str(value))
        table.add_row("rejected lines", str(rejected))
        out_console.print(table)
        out_console.print(
            f"use: dissensus route PANELS --similarity {similarity} --theta-s {result.theta_s:.4f}"
        )
    raise typer.Exit(code=exit_for(rejected))


class _FirstOfEachId:
    """Keeps the first panel of every id of a corpus (a copy would count twice among the
    per-panel similarities: ``cat a a`` moved the quantile taken as θ_s) and warns once
    per repeated id when asked, after the corpus is read."""

    def __init__(self) -> None:
        self.first: dict[str, int] = {}
        self.again: Counter[str] = Counter()

    def panels(self, numbered: Iterator[tuple[int, PanelLike]]) -> Iterator[PanelLike]:
        for number, panel in numbered:
            if panel.id in self.first:
                self.again[panel.id] += 1
                continue
            self.first[panel.id] = number
            yield panel

    def warn(self) -> None:
        for panel_id, n in self.again.items():
            err_console.print(
                f"warning: panel id {quoted(panel_id)} appears {n + 1} times (first at line "
                f"{self.first[panel_id]}): calibrating on the first only",
                markup=False,
                highlight=False,
                soft_wrap=True,
            )


class _LookAlikeDecisions:
    """Counts the panels two of whose decisions differ only in case, white space or
    characters no reader tells apart (:func:`dissensus.families.decision_form`:
    ``remove``, ``Remove``, ``remove ``, ``ｒｅｍｏｖｅ``, a composed and a decomposed
    ``é``; never ``2⁵`` and ``25``, ``Ⅸ`` and ``IX``, or two flags): the
    reading counts them as different decisions, as it must a label it cannot know is the
    same, so a unanimous panel reads as a disagreement. One warning names the first."""

    def __init__(self) -> None:
        self.count = 0
        self.first: tuple[int, str, list[str]] | None = None

    def panels(self, numbered: Iterator[tuple[int, PanelLike]]) -> Iterator[tuple[int, PanelLike]]:
        for number, panel in numbered:
            decisions = {o.decision for o in panel.outputs if o.decision is not None}
            if len(decisions) > 1:
                self._check(number, panel.id, decisions)
            yield number, panel

    def _check(self, number: int, panel_id: str, decisions: set[str]) -> None:
        from dissensus.families import decision_form

        # the form decisions are told apart by elsewhere (NFC, case and white space
        # folded; joiners and tag characters kept): '2⁵' and '25', 'Ⅸ' and 'IX', two
        # flags, are decisions a reader tells apart, never one decision spelled twice
        forms: dict[str, list[str]] = {}
        for decision in decisions:
            forms.setdefault(decision_form(decision), []).append(decision)
        alike = [sorted(group) for group in forms.values() if len(group) > 1]
        if alike:
            self.count += 1
            if self.first is None:
                self.first = (number, panel_id, min(alike))

    def warn(self, path: str) -> None:
        if self.first is None:
            return
        number, panel_id, spellings = self.first
        err_console.print(
            f"warning: {path}: {self.count} panel(s) have decisions that differ only in "
            "case, white space or characters no reader tells apart (full-width, invisible, "
            "an accent composed or not), read as different decisions "
            f"(first: line {number}, panel {quoted(panel_id)}: "
            f"{', '.join(quoted(s) for s in spellings)}); write each decision one way",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )


def _chain(first: list[PanelLike], rest: Iterator[PanelLike]) -> Iterator[PanelLike]:
    yield from first
    yield from rest
