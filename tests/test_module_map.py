"""``docs/modules.md`` is current: every module of the package, with the first sentence
of its docstring, as ``scripts/module_map.py`` writes it (``make module-map``)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("module_map", ROOT / "scripts" / "module_map.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_module_map_names_every_module_as_its_docstring_says() -> None:
    script = _script()
    shown = (ROOT / "docs" / "modules.md").read_text(encoding="utf-8")
    assert shown == script.render(), "docs/modules.md is stale: run make module-map"
    package = ROOT / "src" / "dissensus"
    modules = [
        p.relative_to(package).as_posix()
        for p in package.rglob("*.py")
        if "__pycache__" not in p.parts
        and p.parent / p.name
        not in {
            package / "__init__.py",
            package / "__main__.py",
        }
    ]
    for rel in modules:
        assert f"- `{rel}`: " in shown, rel
    assert "(no docstring)" not in shown


def test_a_first_sentence_is_one_bounded_line() -> None:
    script = _script()
    assert script.first_sentence("One job.  More words.\\n\\nDetails.") == "One job."
    assert script.first_sentence("Commands:\n\n* a") == "Commands:"
    assert script.first_sentence("CLI commands: ``a``, ``b``.\n\nMore.") == (
        "CLI commands: ``a``, ``b``."
    )
    assert script.first_sentence("a | b") == "a \\| b"
    long = script.first_sentence("word " * 200)
    assert len(long) <= script.LIMIT and long.endswith("…")
    assert script.first_sentence(None) == "(no docstring)"


def test_an_abbreviation_ends_no_sentence_and_a_long_line_is_cut_between_words() -> None:
    script = _script()
    assert script.first_sentence("Reads panels (e.g. LLMBar) and more. Then.") == (
        "Reads panels (e.g. LLMBar) and more."
    )
    assert script.first_sentence("One thing, i.e. Another. Two.") == "One thing, i.e. Another."
    long = script.first_sentence("abcdefghij " * 40)
    assert long.endswith("abcdefghij…") and len(long) <= script.LIMIT
