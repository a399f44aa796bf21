"""Tables keep the id a user types in the next command whole at any width: with
``COLUMNS`` between 10 and 20 the id column was squeezed out (``runs list`` showed no
run id, ``review list`` no review id), and a little wider its id was wrapped over lines."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cli_helpers import cli
from pipeline_cases import mixed_batch, panel, write_jsonl, write_policy

WIDTHS = [1, 3, 10, 13, 16, 20, 30, 45]


@pytest.fixture(scope="module")
def journal(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("narrow")
    inp = write_jsonl(tmp / "in.jsonl", mixed_batch())
    pol = write_policy(tmp / "p.yaml")
    target = tmp / "j.sqlite"
    done = cli("decide", inp, "--policy", pol, "--journal", target, "--run-id", "run-0123456789")
    assert done.code in (0, 3), done.err
    return target


@pytest.mark.parametrize("width", WIDTHS)
def test_runs_list_keeps_the_run_id_whole(journal: Path, width: int) -> None:
    done = cli("runs", "list", "--journal", journal, env={"COLUMNS": str(width)})
    assert done.code == 0, done.err
    assert "run-0123456789" in done.out


@pytest.mark.parametrize("width", WIDTHS)
def test_review_list_keeps_the_review_id_whole(journal: Path, width: int) -> None:
    done = cli("review", "list", "--journal", journal, env={"COLUMNS": str(width)})
    assert done.code == 0, done.err
    assert re.search(r"^ run-0123456789\.\d+ ", done.out, re.MULTILINE), done.out


@pytest.mark.parametrize("width", WIDTHS)
def test_route_keeps_the_panel_id_whole(tmp_path: Path, width: int) -> None:
    inp = write_jsonl(tmp_path / "in.jsonl", [panel("panel-id-0042", ["1", "2", "1"])])
    done = cli("route", inp, env={"COLUMNS": str(width)})
    assert done.code == 0, done.err
    assert "panel-id-0042" in done.out
