"""Every command that opens a journal exits 1 when the journal cannot be reached, and
docs/cli.md says so for those whose row of the exit-code table does not list 1.

The table listed ``runs list``, ``runs show``, ``runs export``, ``review list`` and
``review show`` as ``0 2`` while its text said an unreachable or busy journal is exit 1
for every command that opens one; the note under the table now names them.
"""

from __future__ import annotations

import re
import socket
from pathlib import Path

import pytest

from cli_helpers import run_cli

pytest.importorskip("psycopg")

REPO = Path(__file__).resolve().parent.parent

JOURNAL_COMMANDS = {
    "runs list": [],
    "runs schema": [],
    "runs show": ["x"],
    "runs export": ["x"],
    "review list": [],
    "review show": ["x.1"],
    "review audits": [],
    "acceptance status": [],
}
"""Commands that open a journal without anything else to read first, and their arguments."""


def _doc() -> str:
    return (REPO / "docs" / "cli.md").read_text(encoding="utf-8")


def _table_codes(text: str) -> dict[str, set[int]]:
    return {
        m.group(1): {int(c) for c in m.group(2).split()}
        for m in re.finditer(r"^\| `([a-z -]+)` \| ([0-9 ]+) \|", text, flags=re.M)
    }


def _unreachable() -> str:
    with socket.socket() as sock:  # a loopback port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"postgresql://u@127.0.0.1:{port}/db"


@pytest.mark.parametrize("command", sorted(JOURNAL_COMMANDS))
def test_an_unreachable_journal_is_exit_1_for_every_command_that_opens_one(command: str) -> None:
    res = run_cli(*command.split(), *JOURNAL_COMMANDS[command], "--journal", _unreachable())
    assert res.returncode == 1, res.stderr
    assert res.stderr.startswith("error: cannot reach journal"), res.stderr


def test_the_exit_code_table_says_so_for_the_rows_without_1() -> None:
    text = _doc()
    codes = _table_codes(text)
    table_end = text.index("| `version` |")
    note = text[table_end : text.index("\n\n", text.index("\n\n", table_end) + 2)]
    assert "cannot be reached or is busy" in note, note
    for command in JOURNAL_COMMANDS:
        assert command in codes, command
        if 1 not in codes[command]:
            assert f"`{command}`" in note, command
