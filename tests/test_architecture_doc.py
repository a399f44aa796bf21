"""docs/architecture.md against the tree: each "in pieces" table names every module of its
package, "One name per concept" names every deprecated name pyproject bans, and the files
of the core include the modules that run user code (and a module docstring that says
which fields a search reads names them all)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

import dissensus

PACKAGE = Path(dissensus.__file__).resolve().parent

SECTIONS = {
    "store": "## The run journal, split by job",
    "serve": "## The service in pieces",
    "panels": "## The panels in pieces",
    "integrations": "## The integrations in pieces",
    "integrations/mcp": "## The MCP server in pieces",
}
"""Package (under ``src/dissensus``) -> the heading of the section whose table names its
modules."""


def _section(text: str, heading: str) -> str:
    """The text under ``heading``, up to the next heading of its level."""
    start = text.index(heading + "\n")
    end = text.find("\n## ", start + len(heading))
    return text[start : end if end != -1 else len(text)]


def _modules(package: str) -> list[str]:
    """The package's modules (subpackages' too, but those with a section of their own), as
    paths relative to it; ``__init__.py`` holds the package's design, not a piece."""
    root = PACKAGE / package
    owned = {PACKAGE / other for other in SECTIONS if other.startswith(package + "/")}
    return sorted(
        str(path.relative_to(root))
        for path in root.rglob("*.py")
        if path.name != "__init__.py" and not any(o in path.parents for o in owned)
    )


@pytest.mark.parametrize("package", sorted(SECTIONS))
def test_each_pieces_table_names_every_module_of_its_package(package: str, repo_root: Path) -> None:
    text = _section((repo_root / "docs" / "architecture.md").read_text("utf-8"), SECTIONS[package])
    named = set(re.findall(r"`([\w/]+\.py)`", text))
    named |= {n.removeprefix(package + "/") for n in named}  # `store/journal.py`
    # A row may name a subfolder's modules after its first (`routes/health.py`, `decide.py`).
    missing = [m for m in _modules(package) if m not in named and Path(m).name not in named]
    assert not missing, f"docs/architecture.md, {SECTIONS[package]!r}, leaves out {missing}"


def test_one_name_per_concept_names_every_banned_old_name(repo_root: Path) -> None:
    config = tomllib.loads((repo_root / "pyproject.toml").read_text("utf-8"))
    banned = config["tool"]["ruff"]["lint"]["flake8-tidy-imports"]["banned-api"]
    text = (repo_root / "docs" / "architecture.md").read_text("utf-8")
    table = _section(text, "## One name per concept")
    cells = set(re.findall(r"`([\w.*]+)`", table))
    missing = []
    for name in banned:
        if name in text:  # named in full (a module moved, named where it now lives)
            continue
        last = name.rsplit(".", 1)[-1]
        if not any(re.fullmatch(rf"(?:[\w.]*\.)?{re.escape(last)}(?:\.\*)?", c) for c in cells):
            missing.append(name)
    assert not missing, f"docs/architecture.md's 'One name per concept' leaves out {missing}"


def test_the_core_modules_that_run_user_code_are_named(repo_root: Path) -> None:
    """The pure core opens "a few files itself": the modules of it that import user Python
    through ``loading.py`` are among those the paragraph lists."""
    text = (repo_root / "docs" / "architecture.md").read_text("utf-8")
    start = text.index("The core opens no connection")
    paragraph = " ".join(text[start : text.index("\n\n", start)].split())
    assert "`loading.py`" in paragraph and "trusted code, run in-process" in paragraph
    loaders = sorted(
        str(path.relative_to(PACKAGE))
        for core in ("states", "guard", "concord", "dci")
        for path in (PACKAGE / core).rglob("*.py")
        if re.search(r"^from dissensus\.loading import", path.read_text("utf-8"), re.M)
    )
    assert loaders, "no module of the core loads code: the check reads nothing"
    missing = [m for m in loaders if f"`{m}`" not in paragraph]
    assert not missing, f"docs/architecture.md's files of the core leave out {missing}"


def test_the_review_desk_names_every_key_its_search_reads_a_question_from() -> None:
    """``serve/journal_adapter.py`` says what a queue search matches: the question is read
    by ``cases.asked_question`` from each of ``QUESTION_KEYS``, so its docstring names each."""
    from dissensus.cases import QUESTION_KEYS
    from dissensus.serve import journal_adapter

    doc = " ".join((journal_adapter.__doc__ or "").split())
    missing = [key for key in QUESTION_KEYS if f"``meta.{key}``" not in doc]
    assert not missing, f"serve/journal_adapter.py's docstring leaves out {missing}"
