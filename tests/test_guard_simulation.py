"""Reproduction A in miniature: the sweep shows the cliff and the guard tracks accuracy."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def _load() -> ModuleType:
    path = Path(__file__).resolve().parent.parent / "evaluation" / "guard_simulation.py"
    spec = importlib.util.spec_from_file_location("guard_simulation", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["guard_simulation"] = module
    spec.loader.exec_module(module)
    return module


def test_sweep_has_a_cliff_and_guard_stays_calibrated() -> None:
    sim = _load()
    setup = sim.Setup(cases=800)
    grid = [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]
    rows = sim.sweep(setup, grid, seed=3)
    assert rows == sim.sweep(setup, grid, seed=3)  # seeded
    where = sim.cliff(rows, "present")
    assert where is not None and 0.0 < where < 1.0
    # Below the cliff weighting calibrates better, at full correlation worse.
    assert rows[0]["present_consensus_gap"] < rows[0]["present_majority_gap"]
    assert rows[-2]["present_consensus_gap"] > rows[-2]["present_majority_gap"]
    for r in rows[1:]:
        assert r["absent_consensus_accuracy"] == r["absent_majority_accuracy"]
        assert (
            r["absent_guarded_gap"] < r["absent_majority_gap"] < r["absent_consensus_gap"] + 1e-12
        )
