"""CLI commands: ``dissensus convert llmbar|varierrnli|zeroeval`` (registered on import).

Both write JSONL, one record per line, to standard output or ``--out``. A source item
that cannot be converted, or whose record no reader would take (a field over the
readers' bounds), is reported on stderr with its file, item and field, control
characters escaped (and written to ``--rejects`` when given); the rest is converted and
the exit code is 3.
A failed write to standard output (a full disk) is one line naming it (``error: cannot
write standard output: ...``, exit 1), as for every command.
A source without the expected layout, or an ``--out`` / ``--rejects`` file that cannot
be written (a directory, in a missing directory, the source file, or both the same
file), is a usage error (exit 2): one line on stderr, never a traceback. Outputs are
checked before the source is read: none may be a file the converter reads (for LLMBar
every ``dataset.json`` and ``result.json`` of the subsets found, for ZeroEval every
``*.json`` of the directory). ``--out`` and ``--rejects`` are written to temporary
files renamed over them at the end, so a conversion that fails replaces neither.

Choices this module makes:

* An interrupted conversion (SIGINT, SIGTERM, SIGHUP: exit 130) keeps ``--rejects``
  with the items skipped so far, as an interrupted ``route``, ``vote`` or ``calibrate``
  keeps the lines it rejected so far; ``--out`` is not written, as theirs is not.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from enum import StrEnum
from pathlib import Path
from typing import IO, TYPE_CHECKING, Annotated

import typer
from pydantic import BaseModel

from dissensus.cli.app import app
from dissensus.cli.common import (
    atomic_output,
    check_input_path,
    check_outputs,
    exit_for,
    json_shown,
    output_handle,
    progress,
    shown,
    stdout_handle,
    whole_records,
)
from dissensus.errors import InputError

if TYPE_CHECKING:
    from dissensus.convert.skips import Skipped

__all__ = ["convert_app"]

convert_app = typer.Typer(
    help="Convert real panels (LLMBar judges, VariErrNLI annotators, ZeroEval solvers) to dissensus JSONL.",
    no_args_is_help=True,
)
app.add_typer(convert_app, name="convert")


class Strategy(StrEnum):
    """LLMBar judging strategy."""

    cot = "CoT"
    vanilla = "Vanilla"
    swap_cot = "Swap_CoT"


class Shape(StrEnum):
    """Output record type."""

    panels = "panels"
    votes = "votes"


class _SkipLog:
    """Reports every skipped item on stderr and, while :meth:`writing`, to a JSONL file."""

    def __init__(self) -> None:
        self.count = 0
        self._handle: IO[str] | None = None

    @contextmanager
    def writing(self, path: str | None) -> Iterator[None]:
        """Also write skipped items to ``path`` for the block: through a temporary file
        renamed over it at the end (:func:`atomic_output`), so a failed conversion leaves
        the old file as it was; an interrupted one keeps the items skipped so far, as an
        interrupted ``route`` or ``vote`` keeps its rejects."""
        if path is None:
            yield
            return
        with atomic_output(path, keep_on=(KeyboardInterrupt,)) as handle:
            self._handle = handle
            try:
                yield
            finally:
                self._handle = None

    def __call__(self, skipped: Skipped) -> None:
        from dissensus.io.jsonl import write_jsonl_line

        self.count += 1
        # Control characters of a source's names and values are escaped, never interpreted.
        typer.echo(f"skipped {shown(skipped.describe())}", err=True)
        if self._handle is not None:
            write_jsonl_line(self._handle, skipped)


def _convert(
    records: Iterator[BaseModel],
    skips: _SkipLog,
    out: str | None,
    rejects: str | None,
    description: str,
) -> None:
    """Write ``records`` and the skipped items; exit 0, or 3 when an item was skipped."""
    with skips.writing(rejects):
        _write(records, out, description)
    raise typer.Exit(code=exit_for(skips.count))


def _write(records: Iterator[BaseModel], out: str | None, description: str) -> int:
    written = 0
    with output_handle(out) as opened:
        # A failed write to standard output (a full disk) names it, as every command's does.
        # Which one is the option's to say: a progress bar swaps sys.stdout while drawn.
        to_stdout = out is None or out == "-"
        # One write a record, whole: no progress line lands inside one (a shared pipe).
        handle = whole_records(stdout_handle() if to_stdout else opened)
        for record in progress(records, description=description):
            # exclude_defaults drops unset optional fields; required ones (decision) stay.
            handle.write(json_shown(record.model_dump_json(exclude_defaults=True)) + "\n")
            written += 1
        if to_stdout:
            handle.flush()  # what is still buffered fails here, before --rejects is kept
    return written


OutOption = Annotated[
    str | None, typer.Option("--out", "-o", help="Write JSONL here instead of standard output.")
]
RejectsOption = Annotated[
    str | None,
    typer.Option(
        "--rejects",
        help="Also write every skipped item (file, item, field, message) here as JSONL.",
    ),
]


def _directory(source: str) -> Path:
    """The source directory; an empty path (an unset shell variable) is refused, not
    read as the current directory."""
    if not source.strip():
        raise InputError(
            "the input is an empty path (an unset shell variable?): name the directory to convert"
        )
    return Path(source)


@convert_app.command("llmbar")
def convert_llmbar(
    source: Annotated[
        str,
        typer.Argument(
            metavar="DIRECTORY",
            help="A directory laid out like LLMBar (every subset below it is read).",
        ),
    ],
    strategy: Annotated[
        Strategy, typer.Option("--strategy", help="Judging strategy to read.")
    ] = Strategy.cot,
    shape: Annotated[
        Shape, typer.Option("--as", help="panels (for route/decide) or votes (for guard).")
    ] = Shape.panels,
    per_subset: Annotated[
        int | None,
        typer.Option("--per-subset", min=1, help="Keep only the first N items of each subset."),
    ] = None,
    out: OutOption = None,
    rejects: RejectsOption = None,
) -> None:
    """LLMBar judge panels -> panels (one per item, 6 judges) or vote cases, gold kept."""
    from dissensus.convert.llmbar import (
        iter_llmbar_panels,
        iter_llmbar_votes,
        llmbar_source_files,
    )

    directory = _directory(source)
    outputs = {"--out": out, "--rejects": rejects}
    check_outputs(outputs)
    # The layout is checked here, and no output may be a file of it, before anything is
    # read or written.
    check_outputs(outputs, reads=[str(f) for f in llmbar_source_files(directory, strategy.value)])
    skips = _SkipLog()
    if shape is Shape.panels:
        records: Iterator[BaseModel] = iter_llmbar_panels(
            directory, strategy.value, on_skip=skips, per_subset=per_subset
        )
    else:
        records = iter_llmbar_votes(directory, strategy.value, on_skip=skips, per_subset=per_subset)
    _convert(records, skips, out, rejects, f"llmbar {strategy.value}")


@convert_app.command("varierrnli")
def convert_varierrnli(
    file: Annotated[str, typer.Argument(help="A VariErrNLI JSON file (e.g. VariErrNLI_dev.json).")],
    out: OutOption = None,
    rejects: RejectsOption = None,
) -> None:
    """VariErrNLI annotators -> panels (one agent per annotator, labels + explanations)."""
    from dissensus.convert.varierrnli import iter_varierrnli_panels

    check_input_path(file)
    if file == "-":
        raise typer.BadParameter(
            "reading VariErrNLI from standard input is not supported; give a file"
        )
    check_outputs({"--out": out, "--rejects": rejects}, reads={"FILE": file})
    skips = _SkipLog()
    # The file is read here, before any output is opened, so a bad file leaves no output.
    panels = iter_varierrnli_panels(file, on_skip=skips)
    _convert(panels, skips, out, rejects, "varierrnli")


@convert_app.command("zeroeval")
def convert_zeroeval(
    source: Annotated[
        str,
        typer.Argument(
            metavar="DIRECTORY",
            help="A directory of ZeroEval result files, one <model>.json each.",
        ),
    ],
    limit: Annotated[
        int | None, typer.Option("--limit", min=1, help="Keep only the first N problems.")
    ] = None,
    out: OutOption = None,
    rejects: RejectsOption = None,
) -> None:
    """ZeroEval solver outputs -> panels (one agent per model, answer extracted, gold in meta.gold)."""
    from dissensus.convert.zeroeval import iter_zeroeval_panels, zeroeval_source_files

    directory = _directory(source)
    outputs = {"--out": out, "--rejects": rejects}
    check_outputs(outputs)
    check_outputs(outputs, reads=[str(f) for f in zeroeval_source_files(directory)])
    skips = _SkipLog()
    # The files are read here, before any output is opened, so a bad directory leaves no output.
    panels = iter_zeroeval_panels(directory, on_skip=skips, limit=limit)
    _convert(panels, skips, out, rejects, "zeroeval")
