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


def _commands(command: object, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found = [path]
    for name, sub in (getattr(command, "commands", None) or {}).items():
        found += _commands(sub, (*path, name))
    return found


def test_switches_are_shown_without_a_value_in_every_help() -> None:
    """``--help`` listed every switch with a value (``--json <bool>``), and ``--json
    true`` is a usage error: a switch shows no value, an option still shows its type."""
    from dissensus.cli import _command

    paths = _commands(_command())
    assert ("route",) in paths and ("runs", "show") in paths
    for path in paths:
        res = cli(*path, "--help", env={"COLUMNS": "200"})
        assert res.code == 0, (path, res.err)
        assert "<bool>" not in res.out, (path, res.out)
        assert "--help" in res.out
    assert "<float>" in cli("route", "--help", env={"COLUMNS": "200"}).out
