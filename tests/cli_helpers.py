"""Run the CLI in-process (``dissensus.cli.main``) with captured output and stdin."""

from __future__ import annotations

import contextlib
import importlib
import io
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from dissensus.cli import main
from dissensus.cli.common import err_console, out_console


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


def cli(
    *args: str | Path,
    stdin: bytes | None = None,
    env: dict[str, str | None] | None = None,
    cwd: str | Path | None = None,
) -> Result:
    """``dissensus ARGS`` in this process; stdout and stderr captured as text.

    ``env`` overrides variables (None removes one); ``COLUMNS`` in it sets the width of
    the CLI's consoles, as it would in a fresh process.
    """
    out, err = io.StringIO(), io.StringIO()
    old_in, old_cwd = sys.stdin, os.getcwd()
    widths = (out_console._width, err_console._width)
    columns = (env or {}).get("COLUMNS")
    if stdin is not None:
        sys.stdin = io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8")
    try:
        if columns:
            out_console._width = err_console._width = int(columns)
        if cwd is not None:
            os.chdir(cwd)
        with _env(env or {}), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main([str(a) for a in args])
    finally:
        sys.stdin = old_in
        os.chdir(old_cwd)
        out_console._width, err_console._width = widths
    return Result(code, out.getvalue(), err.getvalue())


def run_cli(
    *args: str | Path,
    stdin: str | bytes | None = None,
    env: dict[str, str] | None = None,
    cwd: str | Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """``dissensus ARGS`` in-process, shaped like ``subprocess.run(..., capture_output=True, text=True)``.

    ``env`` is the whole environment the command sees (as for a subprocess).
    """
    data = stdin.encode("utf-8") if isinstance(stdin, str) else stdin
    overrides: dict[str, str | None] = {}
    if env is not None:
        overrides = {k: None for k in os.environ if k not in env}
        overrides.update(env)
    with _python_path((env or {}).get("PYTHONPATH", "")):
        res = cli(*args, stdin=data, env=overrides, cwd=cwd)
    return subprocess.CompletedProcess(["dissensus", *map(str, args)], res.code, res.out, res.err)


@contextlib.contextmanager
def _python_path(value: str) -> Iterator[None]:
    """Folders of ``PYTHONPATH`` importable for the call; modules loaded from them forgotten after."""
    folders = [f for f in value.split(os.pathsep) if f and f not in sys.path]
    sys.path[:0] = folders
    importlib.invalidate_caches()
    try:
        yield
    finally:
        for folder in folders:
            sys.path.remove(folder)
        for name, module in list(sys.modules.items()):
            if any(str(getattr(module, "__file__", "") or "").startswith(f) for f in folders):
                del sys.modules[name]


def run_steps(steps: list[list[str]]) -> subprocess.CompletedProcess[str]:
    """Several ``dissensus`` commands in this process, one after the other.

    Shaped like one interpreter running each ``main(argv)`` and printing ``<<< CODE``
    after it: stdout is each command's output followed by its ``<<< CODE`` line, stderr
    the commands' error output; the consoles are 80 columns wide, as in a pipe.
    """
    out: list[str] = []
    err: list[str] = []
    for argv in steps:
        res = cli(*argv, env={"COLUMNS": "80"})
        out.append(f"{res.out}<<< {res.code}\n")
        err.append(res.err)
    return subprocess.CompletedProcess(["dissensus"], 0, "".join(out), "".join(err))
