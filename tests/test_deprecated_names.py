"""Deprecated names still import, warn with the current name, and are the current object;
nothing in the package uses them (ruff's banned-API rule, checked here against the source
too, so the rule and the names cannot drift apart)."""

from __future__ import annotations

import importlib
import re
import tomllib
import warnings
from pathlib import Path

import pytest

DEPRECATED = [
    ("dissensus.guard", "Calibration", "dissensus.guard", "ReliabilityFit"),
    ("dissensus.guard", "CalibrationSettings", "dissensus.guard", "ReliabilitySettings"),
    ("dissensus.guard", "GuardSettings", "dissensus.guard", "GuardThresholds"),
    ("dissensus.guard", "calibrate", "dissensus.guard", "fit_reliability"),
    ("dissensus.guard", "audit", "dissensus.guard", "guard_votes"),
    ("dissensus.guard", "audit_case", "dissensus.guard", "guard_case"),
    ("dissensus.guard", "audit_many", "dissensus.guard", "guard_cases"),
    ("dissensus", "audit", "dissensus", "guard_votes"),
    ("dissensus.pipeline.signals", "agent_signals", "dissensus.signals", "agent_signals"),
    ("dissensus.pipeline.signals", "MarkerLexicon", "dissensus.signals", "MarkerLexicon"),
    ("dissensus.pipeline.durable", "JournalError", "dissensus.pipeline.durable", "UnreadableStep"),
    (
        "dissensus.baselines.decision_rules",
        "majority_vote",
        "dissensus.baselines.decision_rules",
        "first_choice_plurality",
    ),
    ("dissensus.acceptance", "CaseInput", "dissensus.acceptance", "FeatureInputs"),
    ("dissensus.acceptance", "case_input", "dissensus.acceptance", "feature_inputs"),
    (
        "dissensus.acceptance.features",
        "CaseInput",
        "dissensus.acceptance.features",
        "FeatureInputs",
    ),
    (
        "dissensus.pipeline.reliability",
        "trust_regions",
        "dissensus.pipeline.trust_regions",
        "trust_regions",
    ),
    ("dissensus.concord.record", "Budget", "dissensus.concord.record", "RunControls"),
    ("dissensus.serve.journal_adapter", "Claim", "dissensus.serve.journal_adapter", "ClaimInfo"),
    ("dissensus.store", "ReviewEntry", "dissensus.store", "IndexEntry"),
    (
        "dissensus.serve.acceptance",
        "AcceptanceFile",
        "dissensus.serve.acceptance",
        "AcceptanceFileSummary",
    ),
    ("dissensus.store.journal", "ReviewEntry", "dissensus.store", "IndexEntry"),
    ("dissensus.store.review_index", "ReviewEntry", "dissensus.store", "IndexEntry"),
]


@pytest.mark.parametrize(("module", "old", "home", "new"), DEPRECATED)
def test_a_deprecated_name_warns_and_is_the_current_one(
    module: str, old: str, home: str, new: str
) -> None:
    current = getattr(importlib.import_module(home), new)
    with pytest.warns(DeprecationWarning, match=re.escape(new)):
        value = getattr(importlib.import_module(module), old)
    assert value is current
    listed = old in getattr(importlib.import_module(module), "__all__", [])
    # A module whose every name moved lists them, so a star import warns for each.
    assert listed == (module in MOVED_MODULES)


MOVED_MODULES = {"dissensus.pipeline.signals": "dissensus.signals"}
MOVED_MODULES["dissensus.pipeline.reliability"] = "dissensus.pipeline.trust_regions"
"""Former homes of a whole module's names: ``__all__`` lists them all."""


@pytest.mark.parametrize(("module", "home"), sorted(MOVED_MODULES.items()))
def test_a_star_import_from_a_former_home_warns_and_imports_every_name(
    module: str, home: str
) -> None:
    names: dict[str, object] = {}
    with pytest.warns(DeprecationWarning, match=re.escape(f"{module}.")) as caught:
        exec(f"from {module} import *", names)
    current = importlib.import_module(home)
    assert set(names) - {"__builtins__", "__warningregistry__"} == set(current.__all__)
    assert all(names[name] is getattr(current, name) for name in current.__all__)
    assert len(caught) >= len(current.__all__)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        with pytest.raises(DeprecationWarning):
            exec(f"from {module} import *", {})


@pytest.mark.parametrize("module", sorted({m for m, *_ in DEPRECATED}))
def test_an_unknown_name_is_still_an_attribute_error(module: str) -> None:
    with pytest.raises(AttributeError, match="no_such_name"):
        importlib.import_module(module).no_such_name  # noqa: B018


def test_current_names_do_not_warn() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _, _, home, new in DEPRECATED:
            getattr(importlib.import_module(home), new)


def test_every_deprecated_name_is_banned_and_unused_in_the_package(repo_root: Path) -> None:
    config = tomllib.loads((repo_root / "pyproject.toml").read_text(encoding="utf-8"))
    banned = set(config["tool"]["ruff"]["lint"]["flake8-tidy-imports"]["banned-api"])
    for module, old, *_ in DEPRECATED:
        assert f"{module}.{old}" in banned or module in banned, f"{module}.{old}"
    src = repo_root / "src" / "dissensus"
    pattern = re.compile(
        r"\bimport\s+(?:Calibration|CalibrationSettings|GuardSettings)\b"
        r"|from dissensus\.guard import[^\n]*\b(?:Calibration|GuardSettings|calibrate)\b"
        r"|from dissensus\.guard(?:\.decision)? import[^\n]*\baudit(?:_case|_many)?\b"
        r"|dissensus\.pipeline\.signals import"
    )
    for path in src.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        assert not pattern.search(text), path


MOVED = [
    ("dissensus.agents.negotiator", "dissensus.concord.agent"),
]
"""Modules kept under an earlier path for users' files: the same objects, never used by
the package itself (banned there)."""


@pytest.mark.parametrize(("old", "home"), MOVED)
def test_a_module_kept_under_its_earlier_path_is_the_current_one(
    old: str, home: str, repo_root: Path
) -> None:
    kept, current = importlib.import_module(old), importlib.import_module(home)
    assert kept.__all__
    for name in kept.__all__:
        assert getattr(kept, name) is getattr(current, name), name
    config = tomllib.loads((repo_root / "pyproject.toml").read_text(encoding="utf-8"))
    assert old in config["tool"]["ruff"]["lint"]["flake8-tidy-imports"]["banned-api"]
    src = repo_root / "src" / "dissensus"
    for path in src.rglob("*.py"):
        if path != src.joinpath(*old.split(".")[1:]).with_suffix(".py"):
            assert old not in path.read_text(encoding="utf-8"), path
