"""``dissensus negotiate``'s human output never shows a score below the floor as the floor.

It printed ``Shortfall: m1 0.70 (gap 1.1e-16)`` under ``floor 0.70`` (a score
0.6999999999999999 against a floor of 0.7), and ``0.70`` in the scores table beside
``below floor``. Scores beside the floor now read as the reason of a pipeline's CONCORD
step reads them (:func:`~dissensus.pipeline.negotiate.below_floor`,
:func:`~dissensus.pipeline.negotiate.gap_text`): two decimals, or as many digits as
tell a score below the floor from it; an ordinary shortfall keeps two decimals.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from cli_helpers import cli
from dissensus.pipeline.negotiate import below_floor


def _problem(
    tmp: Path, m1: float, *, floor: float = 0.7, rounds: int = 1, name: str = "p.json"
) -> Path:
    doc: dict[str, Any] = {
        "problem": "p",
        "floor": floor,
        "rounds": rounds,
        "anchors": {"rejected": {"id": "R0", "text": "r"}, "ideal": {"id": "I0", "text": "i"}},
        "options": [{"id": "x", "text": "x"}, {"id": "y", "text": "y"}],
        "agents": [
            {"id": "m1", "kind": "table", "scores": {"R0": 0, "I0": 1, "x": m1, "y": 0.1}},
            {"id": "m2", "kind": "table", "scores": {"R0": 0, "I0": 1, "x": 0.9, "y": 0.9}},
        ],
    }
    path = tmp / name
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


def _negotiate(path: Path) -> tuple[str, dict[str, Any]]:
    human = cli("negotiate", path, env={"COLUMNS": "200"})
    assert human.code == 0, human.err
    machine = cli("negotiate", path, "--json")
    assert machine.code == 0, machine.err
    return human.out, json.loads(machine.out)


def _line(out: str, start: str) -> str:
    (line,) = [x for x in out.splitlines() if x.startswith(start)]
    return line


def _score_row(out: str, agent: str) -> list[str]:
    (row,) = [x for x in out.splitlines() if re.match(rf"│ {agent}\s", x)]
    return [cell.strip() for cell in row.strip("│").split("│")]


def test_a_score_a_hair_below_the_floor_does_not_read_as_the_floor(tmp_path: Path) -> None:
    out, cert = _negotiate(_problem(tmp_path, 0.6999999999999999))
    assert cert["status"] == "best_effort"
    (short,) = cert["shortfall"]
    assert short["agent"] == "m1" and short["score"] == 0.7  # the record rounds onto it
    assert _line(out, "CONCORD best_effort").startswith("CONCORD best_effort  floor 0.70,")
    shown = below_floor(short["score"], short["gap"], 0.7)
    assert float(shown) < 0.7
    assert _line(out, "Shortfall:") == f"Shortfall: m1 {shown} (gap 1.1e-16)"
    calibrated, status = _score_row(out, "m1")[1], _score_row(out, "m1")[4]
    assert calibrated == shown and status == "below floor"
    assert _score_row(out, "m2")[1] == "0.90"  # at or above the floor: two decimals


def test_an_ordinary_shortfall_keeps_two_decimals(tmp_path: Path) -> None:
    out, _ = _negotiate(_problem(tmp_path, 0.5))
    assert _line(out, "Shortfall:") == "Shortfall: m1 0.50 (gap 0.20)"
    assert _score_row(out, "m1")[1] == "0.50"
    assert _line(out, "Worst-off of the leader per round:").endswith("0.50")


def test_a_floor_two_decimals_do_not_hold_is_shown_whole(tmp_path: Path) -> None:
    """A score of 0.70 below a floor of 0.701 reads apart from it."""
    out, cert = _negotiate(_problem(tmp_path, 0.7, floor=0.701))
    assert cert["status"] == "best_effort"
    assert "floor 0.701," in _line(out, "CONCORD best_effort")
    assert _line(out, "Shortfall:") == "Shortfall: m1 0.70 (gap 0.001)"


def test_a_recorded_worst_off_below_the_floor_reads_below_it(tmp_path: Path) -> None:
    """A worst-off the record holds below the floor (12 decimals), per round."""
    out, cert = _negotiate(_problem(tmp_path, 0.699999999999))
    assert [s["worst_off"] for s in cert["trajectory"]] == [0.699999999999] * 2
    path = _line(out, "Worst-off of the leader per round:")
    assert path == "Worst-off of the leader per round: 0.699999999999 → 0.699999999999"


def test_a_score_above_a_floor_two_decimals_do_not_hold_never_reads_below_it(
    tmp_path: Path,
) -> None:
    """0.703 against a floor of 0.701 read ``0.70`` (below the floor shown) in a
    certified run: a score at or above the floor keeps the digits that show it there."""
    out, cert = _negotiate(_problem(tmp_path, 0.703, floor=0.701))
    assert cert["status"] == "certified"
    assert "floor 0.701," in _line(out, "CONCORD certified")
    assert _line(out, "Worst-off of the leader per round:").endswith("0.703")
    assert _score_row(out, "m1")[1] == "0.703"
    assert _score_row(out, "m2")[1] == "0.90"
