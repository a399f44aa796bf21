"""``--deadline`` across the commands that take it: negative, ``nan`` and ``inf`` are
usage errors everywhere; ``deliberate --deadline 0`` is one too (the task file's
``dci.deadline_s: 0`` was refused, the option ran a deliberation given no time and
printed "no option was available"); ``negotiate --deadline 0`` keeps its documented
meaning (the run stops before its first agent call, exit 0)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli_helpers import cli

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
COMMANDS = [
    ["decide", "in.jsonl"],
    ["runs", "resume", "R"],
    ["negotiate", str(EXAMPLES / "concord" / "incident.yaml")],
    ["deliberate", str(EXAMPLES / "dci" / "routine.yaml")],
]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
@pytest.mark.parametrize("value", ["-1", "-0.5", "nan", "inf", "-inf"])
def test_a_deadline_that_is_no_duration_is_a_usage_error(
    tmp_path: Path, command: list[str], value: str
) -> None:
    done = cli(*command, f"--deadline={value}", cwd=tmp_path)
    assert done.code == 2, done.err
    [line] = done.err.splitlines()
    assert line.startswith("error: Invalid value for '--deadline'")
    assert not list(tmp_path.iterdir()), "nothing was written"


@pytest.mark.parametrize("value", ["0", "0.0", "-0"])
def test_deliberate_refuses_a_deadline_of_zero(tmp_path: Path, value: str) -> None:
    done = cli("deliberate", EXAMPLES / "dci" / "routine.yaml", "--deadline", value)
    assert done.code == 2, done.out
    assert done.out == ""
    assert "'--deadline': must be more than 0 (got " in done.err


def test_negotiate_deadline_zero_stops_before_its_first_call(tmp_path: Path) -> None:
    done = cli("negotiate", EXAMPLES / "concord" / "incident.yaml", "--deadline", "0", "--json")
    assert done.code == 0, done.err
    assert json.loads(done.out)["spent"]["stopped"] == "deadline"
