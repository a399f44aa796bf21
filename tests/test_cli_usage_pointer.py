"""Every usage error ends with where to read the usage: the command the words name.

An option's missing value (``--theta-s`` last) or an unwanted one (``--json=true``) is
refused by the parser before the command's context exists: the line ended without the
``(see: ... --help)`` every other usage error carries.
"""

from __future__ import annotations

import pytest

from cli_helpers import cli


@pytest.mark.parametrize(
    ("args", "message", "where"),
    [
        (["route", "x.jsonl", "--theta-s"], "Option '--theta-s' requires an argument.", "route"),
        (["route", "x.jsonl", "--json=true"], "Option '--json' does not take a value.", "route"),
        (
            ["review", "list", "--journal"],
            "Option '--journal' requires an argument.",
            "review list",
        ),
        (["runs", "show", "--journal"], "Option '--journal' requires an argument.", "runs show"),
        (["route", "x.jsonl", "--bogus"], "No such option: --bogus", "route"),
        (["--bogus"], "No such option: --bogus", ""),
    ],
)
def test_a_usage_error_names_the_help_of_its_command(
    args: list[str], message: str, where: str
) -> None:
    res = cli(*args)
    assert res.code == 2, res.err
    path = f"dissensus {where}".strip()
    assert res.err.startswith(f"error: {message}"), res.err
    assert res.err.rstrip("\n").endswith(f"(see: {path} --help)"), res.err
    assert len(res.err.strip().splitlines()) == 1
