"""The integration examples run offline and print what the docs say they print."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXPECTED = {
    "langgraph_review.py": (
        "langgraph",
        ["agreed: auto 1", "resolved: human 2 by kim@example.org"],
    ),
    "inspect_panel.py": (
        "inspect_ai",
        ["s1 C auto support 1.00", "s2 C escalate support 0.33 tie ['C', 'I']"],
    ),
    "mcp_client.py": (
        "mcp",
        [
            "bound: {'rounds': 6, 'candidates': 11",
            "resolved: human 2 by kim@example.org",
            "bad argument: True agents",
        ],
    ),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_example_runs(name: str) -> None:
    framework, lines = EXPECTED[name]
    pytest.importorskip(framework)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "integrations" / name)],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=180, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    for line in lines:
        assert line in done.stdout, done.stdout


DOC = (ROOT / "docs" / "integrations.md").read_text(encoding="utf-8")
BLOCKS = re.findall(r"```python\n(.*?)```", DOC, flags=re.S)
SHOWN = {"langgraph": "human 2", "inspect_ai": "C escalate ['C', 'I'] 0.33", "mcp": "True agents"}


def test_docs_show_each_integration_in_under_30_lines() -> None:
    assert len(BLOCKS) == 3
    for block in BLOCKS:
        assert len(block.strip().splitlines()) < 30, block


@pytest.mark.parametrize(("index", "framework"), [(0, "langgraph"), (1, "inspect_ai"), (2, "mcp")])
def test_docs_blocks_run(tmp_path: Path, index: int, framework: str) -> None:
    pytest.importorskip(framework)
    script = tmp_path / "block.py"
    script.write_text(BLOCKS[index], encoding="utf-8")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert SHOWN[framework] in done.stdout, done.stdout
