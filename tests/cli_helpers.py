"""Run the CLI in-process (``dissensus.cli.main``) with captured output and stdin."""

from __future__ import annotations

import contextlib
import io
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from dissensus.cli import main


@dataclass
class Result:
    code: int
    out: str
    err: str


@contextlib.contextmanager
def _env(env: dict[str, str | None]) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in env}
    try:
        for k, v in env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def cli(*args: str | Path, stdin: bytes | None = None, env: dict[str, str | None] | None = None) -> Result:
    """``dissensus ARGS`` in this process; stdout and stderr captured as text."""
    out, err = io.StringIO(), io.StringIO()
    old_in = sys.stdin
    if stdin is not None:
        sys.stdin = io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8")
    try:
        with _env(env or {}), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main([str(a) for a in args])
    finally:
        sys.stdin = old_in
    return Result(code, out.getvalue(), err.getvalue())
