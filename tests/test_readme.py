"""The README never lies: its Python examples run, and its quickstart targets exist."""

from __future__ import annotations

import re
import runpy
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
README = (REPO / "README.md").read_text(encoding="utf-8")


def test_readme_python_blocks_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each block runs as a script (``__main__``, in this process) in an empty folder."""
    blocks = re.findall(r"```python\n(.*?)```", README, flags=re.S)
    assert blocks, "the README has a Python example"
    monkeypatch.chdir(tmp_path)
    for i, block in enumerate(blocks):
        script = tmp_path / f"example{i}.py"
        script.write_text(block, encoding="utf-8")
        capsys.readouterr()
        runpy.run_path(str(script), run_name="__main__")
        assert "DD remove 0.67 seek_context" in capsys.readouterr().out


def test_quickstart_targets_exist() -> None:
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    assert "make demo" in README and "make test" in README
    assert re.search(r"^demo:", makefile, flags=re.M)
    assert re.search(r"^test:", makefile, flags=re.M)
    assert "make test" in (REPO / ".ci" / "run").read_text(encoding="utf-8")
