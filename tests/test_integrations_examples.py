"""The integration examples run offline and print what the docs say they print.

The examples and the docs' blocks run in this process (``runpy``, as ``__main__``, in a
temporary working directory), so each framework is imported once per test process;
one example also runs in a fresh interpreter, as a user runs it.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import re
import runpy
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
        [
            "s1 C auto support 1.00",
            "s2 C escalate support 0.33 tie ['C', 'I']",
            "Inspect's log: ",  # the directory `inspect view --log-dir` needs
        ],
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


@pytest.fixture(scope="module")
def mcp_stdio() -> None:
    """Import mcp's stdio client before a test's ``capsys`` replaces ``sys.stderr``.

    The client takes ``sys.stderr`` as its default error log when first imported; the
    stream ``capsys`` installs has no file descriptor to hand the server process.
    """
    with contextlib.suppress(ImportError):
        importlib.import_module("mcp.client.stdio")


def _run_here(
    script: Path, cwd: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> str:
    """Run ``script`` as ``__main__`` in this process; its standard output."""
    # Processes the script starts (the MCP server) import this checkout's package.
    path = os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])
    monkeypatch.setenv("PYTHONPATH", path)
    monkeypatch.chdir(cwd)
    monkeypatch.setattr(sys, "argv", [str(script)])
    capsys.readouterr()
    runpy.run_path(str(script), run_name="__main__")
    return capsys.readouterr().out


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_example_runs(
    name: str,
    mcp_stdio: None,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    framework, lines = EXPECTED[name]
    pytest.importorskip(framework)
    out = _run_here(ROOT / "examples" / "integrations" / name, tmp_path, monkeypatch, capsys)
    for line in lines:
        assert line in out, out


def test_an_example_runs_in_a_fresh_interpreter() -> None:
    framework, lines = EXPECTED["langgraph_review.py"]
    pytest.importorskip(framework)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "integrations" / "langgraph_review.py")],
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
def test_docs_blocks_run(
    mcp_stdio: None,
    tmp_path: Path,
    index: int,
    framework: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    pytest.importorskip(framework)
    script = tmp_path / "block.py"
    script.write_text(BLOCKS[index], encoding="utf-8")
    out = _run_here(script, tmp_path, monkeypatch, capsys)
    assert SHOWN[framework] in out, out
