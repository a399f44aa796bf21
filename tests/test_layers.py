"""The layers of docs/architecture.md hold: import-linter's contracts pass on the tree, and
every top-level module of the package is in a layer (a new one cannot slip past them)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

import dissensus

PACKAGE = Path(dissensus.__file__).resolve().parent


def _contracts(repo_root: Path) -> list[dict[str, object]]:
    config = tomllib.loads((repo_root / "pyproject.toml").read_text(encoding="utf-8"))
    contracts: list[dict[str, object]] = config["tool"]["importlinter"]["contracts"]
    return contracts


def test_every_top_level_module_is_in_a_layer(repo_root: Path) -> None:
    (layers,) = [c for c in _contracts(repo_root) if c["type"] == "layers"]
    assert layers["containers"] == ["dissensus"]
    layered = [
        name for line in layers["layers"] for name in re.split(r"\s*[|:]\s*", str(line).strip())
    ]
    assert len(layered) == len(set(layered)), "a module is in two layers"
    present = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    present |= {p.stem for p in PACKAGE.glob("*.py") if p.stem not in ("__init__", "__main__")}
    assert set(layered) == present
    assert layered[0] == "cli"
    assert "types" in re.split(r"\s*[|:]\s*", str(layers["layers"][-1]).strip())


def test_the_core_packages_are_forbidden_every_adapter(repo_root: Path) -> None:
    (pure,) = [c for c in _contracts(repo_root) if c["id"] == "pure-core"]
    core = {"dissensus.states", "dissensus.guard", "dissensus.concord", "dissensus.dci"}
    adapters = {
        f"dissensus.{name}"
        for name in ("llm", "store", "serve", "cli", "engines", "integrations", "pipeline")
    }
    assert set(pure["source_modules"]) == core  # type: ignore[arg-type]
    assert adapters <= set(pure["forbidden_modules"])  # type: ignore[arg-type]


def test_the_import_contracts_pass(repo_root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cli = pytest.importorskip("importlinter.cli", reason="import-linter is in the dev extra")
    code = cli.lint_imports(
        config_filename=str(repo_root / "pyproject.toml"), no_cache=True, no_logo=True
    )
    out = capsys.readouterr().out
    assert code == 0, out
    assert "Contracts: 2 kept, 0 broken." in out
