"""Helpers shared by the CLI command modules: consoles, exit codes, progress, output."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, TypeVar

import typer
from pydantic import BaseModel
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

__all__ = [
    "EXIT_FAILURE",
    "EXIT_OK",
    "EXIT_REJECTED",
    "EXIT_USAGE",
    "check_input_path",
    "err_console",
    "exit_for",
    "out_console",
    "output_handle",
    "print_json",
    "progress",
]

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_REJECTED = 3

T = TypeVar("T")

err_console = Console(stderr=True)
out_console = Console()


def check_input_path(path: str) -> str:
    """Fail with a usage error (exit 2) when ``path`` is neither ``-`` nor a readable file."""
    if path == "-":
        return path
    p = Path(path)
    if not p.exists():
        raise typer.BadParameter(f"file not found: {path}")
    if p.is_dir():
        raise typer.BadParameter(f"expected a file, got a directory: {path}")
    return path


def exit_for(rejected: int) -> int:
    """Exit code for a run that rejected ``rejected`` records."""
    return EXIT_REJECTED if rejected else EXIT_OK


@contextmanager
def output_handle(path: str | None) -> Iterator[IO[str]]:
    """Standard output, or ``path`` opened for writing."""
    if path is None or path == "-":
        yield sys.stdout
        return
    with open(path, "w", encoding="utf-8") as handle:
        yield handle


def print_json(obj: BaseModel | dict[str, object] | list[object]) -> None:
    """Print one JSON document to standard output."""
    if isinstance(obj, BaseModel):
        sys.stdout.write(obj.model_dump_json(indent=2) + "\n")
    else:
        sys.stdout.write(json.dumps(obj, indent=2, ensure_ascii=False, default=str) + "\n")


def progress(items: Iterable[T], *, description: str, total: int | None = None, enabled: bool = True) -> Iterator[T]:
    """Iterate ``items`` with a progress bar on stderr when stderr is a terminal."""
    show = enabled and (err_console.is_terminal or os.environ.get("DISSENSUS_PROGRESS") == "1")
    if not show:
        yield from items
        return
    columns = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()]
    with Progress(*columns, console=err_console, transient=True) as bar:
        task = bar.add_task(description, total=total)
        for item in items:
            yield item
            bar.advance(task)
