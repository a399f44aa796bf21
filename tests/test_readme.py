"""The README never lies: its Python examples run, and its quickstart targets exist."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
README = (REPO / "README.md").read_text(encoding="utf-8")


def test_readme_python_blocks_run(tmp_path: Path) -> None:
    blocks = re.findall(r"```python\n(.*?)```", README, flags=re.S)
    assert blocks, "the README has a Python example"
    for block in blocks:
        script = tmp_path / "example.py"
        script.write_text(block, encoding="utf-8")
        done = subprocess.run(
            [sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path, timeout=300
        )
        assert done.returncode == 0, done.stderr
        assert "DD remove 0.67 seek_context" in done.stdout


def test_quickstart_targets_exist() -> None:
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    assert "make demo" in README and "make test" in README
    assert re.search(r"^demo:", makefile, flags=re.M)
    assert re.search(r"^test:", makefile, flags=re.M)
    assert "make test" in (REPO / ".ci" / "run").read_text(encoding="utf-8")
