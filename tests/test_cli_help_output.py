"""``--help`` into a closed pipe or a full disk ends as every command's output does.

A command's help cut short by a closed pipe (``dissensus vote --help | head -c 10``)
exits 0 silently (cli.md: a closed pipe is not a failure); it used to exit 1, the
console's own exit. Help that does not fit on the disk (``> /dev/full``) says
``error: cannot write standard output: ...`` as every other output does, exit 1; it
used to say only the reason.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from test_cli_interrupt import _env

COMMANDS = [["vote", "--help"], ["route", "--help"], ["runs", "resume", "--help"], ["--help"]]


def _help(args: list[str], stdout: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dissensus", *args],
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(COLUMNS="80"),
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize("args", COMMANDS)
def test_help_into_a_closed_pipe_exits_zero_silently(args: list[str]) -> None:
    read, write = os.pipe()
    os.close(read)  # the reader went away before the help was written
    try:
        proc = _help(args, write)
    finally:
        os.close(write)
    assert (proc.returncode, proc.stderr) == (0, "")


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
@pytest.mark.parametrize("args", COMMANDS)
def test_help_into_a_full_disk_names_standard_output(args: list[str]) -> None:
    with open("/dev/full", "w", encoding="utf-8") as full:
        proc = _help(args, full.fileno())
    assert proc.returncode == 1
    assert proc.stderr == "error: cannot write standard output: No space left on device (ENOSPC)\n"
