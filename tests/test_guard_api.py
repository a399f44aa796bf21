"""The guard's public surface is pinned, and the pure core imports nothing it must not."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import dissensus.guard as guard
from dissensus.guard import arrays

GUARD_DIR = Path(guard.__file__).resolve().parent


def test_public_surface_is_pinned() -> None:
    assert sorted(guard.__all__) == sorted(
        [
            "CorrelatedConsensusError",
            "GuardDecision",
            "GuardThresholds",
            "InvariantCheck",
            "Mode",
            "Posterior",
            "PriorSettings",
            "Refusal",
            "ReliabilityFit",
            "ReliabilitySettings",
            "agreement_fraction",
            "guard_votes",
            "guard_case",
            "guard_cases",
            "consensus_weighted_vote",
            "encode_labels",
            "fit_reliability",
            "majority_vote",
            "panel_votes",
            "posterior",
            "wawa",
        ]
    )
    for name in guard.__all__:
        assert hasattr(guard, name)


def test_guard_is_pure_core() -> None:
    forbidden = ("dissensus.llm", "dissensus.agents", "dissensus.store", "dissensus.cli")
    for path in sorted(GUARD_DIR.glob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                assert not name.startswith(forbidden), f"{path.name} imports {name}"
                assert name.split(".")[0] not in ("random", "time", "requests", "openai"), (
                    f"{path.name} imports {name}"
                )
        assert "print(" not in path.read_text(), f"{path.name} prints"


def test_documented_array_api_exists(repo_root: Path) -> None:
    """Every function named in docs/guard.md's array API table exists, under one name."""
    doc = (repo_root / "docs" / "guard.md").read_text(encoding="utf-8")
    table = doc[doc.index("The **array API**") : doc.index("Ties go to the smallest class")]
    names = set(re.findall(r"`([a-z_]+)\((?:labels|rows|errors|present)", table))
    in_arrays = {n for n in names if hasattr(arrays, n)}
    assert names == in_arrays and len(names) >= 7
    assert {
        "encode_labels",
        "majority_vote",
        "wawa",
        "reliability_posterior",
        "n_eff_per_case",
    } <= in_arrays
