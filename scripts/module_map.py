"""Write ``docs/modules.md``: every module of the package and the first sentence of its
docstring, package by package, in the order of the layers (``docs/architecture.md``).

    python scripts/module_map.py          # write docs/modules.md
    python scripts/module_map.py --check  # exit 1 when docs/modules.md is not current

The map is read from the source with :mod:`ast` (nothing is imported), so it costs no
optional dependency. ``tests/test_module_map.py`` keeps the file current: a module added,
renamed or re-described without regenerating the map fails the suite.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "src" / "dissensus"
MAP = ROOT / "docs" / "modules.md"

HEADER = """\
# Every module, in one line each

Generated from each module's docstring by `python scripts/module_map.py` (`make
module-map`); `tests/test_module_map.py` fails when this page is not current, so it is
never out of date. The layers and why they are in this order: `architecture.md`. Each
module's docstring says more, and records the choices it makes.
"""

# Top-down, as docs/architecture.md's table (the command line first, the types last).
ORDER = [
    "cli",
    "serve",
    "integrations",
    "engines",
    "calls",
    "outputs",
    "panels",
    "pipeline",
    "acceptance",
    "agents",
    "baselines",
    "convert",
    "concord",
    "dci",
    "states",
    "guard",
    "llm",
    "store",
    "signals",
    "io",
    "signing",
    "canonical",
    "quoting",
    "loading",
    "families",
    "cases",
    "files",
    "switches",
    "errors",
    "deprecation",
    "types",
    "version",
]

_SENTENCE_END = re.compile(r"(?<!e\.g\.)(?<!i\.e\.)(?<=[.;!?])\s+(?=[A-Z`(*])|\n\s*\n")
_PARAGRAPH_END = re.compile(r"\n\s*\n")
LIMIT = 300
"""Most characters of one module's line (a longer first sentence is cut, with ``…``)."""


def first_sentence(doc: str | None) -> str:
    """The first sentence (or first paragraph, if shorter) of ``doc``, on one line; a
    sentence announcing a list (``CLI commands:``) runs on to its paragraph's end."""
    if not doc or not doc.strip():
        return "(no docstring)"
    text = doc.strip()
    cut = _SENTENCE_END.search(text)
    if cut is not None and not text[: cut.start()].rstrip().endswith(":"):
        text = text[: cut.start()]
    else:
        end = _PARAGRAPH_END.search(text)
        text = text if end is None else text[: end.start()]
    line = " ".join(text.split())
    if len(line) > LIMIT:  # cut at a word's end, never inside one
        line = line[: LIMIT - 1].rsplit(" ", 1)[0].rstrip(" ,;:") + "…"
    return line.replace("|", "\\|")


def _doc(path: Path) -> str | None:
    return ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)))


def _group(rel: Path) -> str:
    top = rel.parts[0]
    return top[: -len(".py")] if top.endswith(".py") else top


def render() -> str:
    """The text of ``docs/modules.md`` for the source as it is."""
    files = sorted(
        p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts and p.name != "__main__.py"
    )
    groups: dict[str, list[Path]] = {}
    for path in files:
        rel = path.relative_to(PACKAGE)
        if rel == Path("__init__.py"):
            continue
        groups.setdefault(_group(rel), []).append(rel)
    unknown = sorted(set(groups) - set(ORDER))
    if unknown:
        raise SystemExit(f"module_map: add {', '.join(unknown)} to ORDER (its layer)")
    out = [HEADER]
    for name in ORDER:
        rels = groups.get(name)
        if not rels:
            continue
        out.append(f"\n## `{name}`\n")
        for rel in rels:
            shown = "/".join(rel.parts)
            out.append(f"- `{shown}`: {first_sentence(_doc(PACKAGE / rel))}")
    return "\n".join(out) + "\n"


def main(argv: list[str]) -> int:
    text = render()
    if argv[1:] == ["--check"]:
        if not MAP.exists() or MAP.read_text(encoding="utf-8") != text:
            print(
                "docs/modules.md is not current: run python scripts/module_map.py", file=sys.stderr
            )
            return 1
        return 0
    if argv[1:]:
        print("usage: python scripts/module_map.py [--check]", file=sys.stderr)
        return 2
    MAP.write_text(text, encoding="utf-8")
    print(f"wrote {MAP.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
