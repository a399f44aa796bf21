"""``negotiate`` and ``verify`` read their file whole: a device, a named pipe or an empty
path is refused as what it is, without offering a named pipe or standard input, which
neither command reads."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cli_helpers import cli


@pytest.mark.parametrize(
    ("command", "label", "what"),
    [("negotiate", "PROBLEM.yaml", "problem file"), ("verify", "CERT.json", "certificate")],
)
def test_a_device_a_pipe_or_an_empty_path_is_named_for_what_it_is(
    tmp_path: Path, command: str, label: str, what: str
) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path, kind in (("/dev/zero", "a character device"), (str(fifo), "a named pipe")):
        res = cli(command, path)
        assert res.code == 2, res.err
        assert res.err.strip() == f"error: {path}: cannot read {what}: not a regular file ({kind})"
    res = cli(command, "")
    assert res.code == 2
    assert res.err.strip() == f"error: {label}: an empty path: name the {what}", res.err
