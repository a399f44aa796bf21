"""No integration imports its framework at ``import dissensus`` (or CLI) time, and one whose
framework is missing says which extra installs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
FRAMEWORKS = ("langgraph", "langchain_core", "inspect_ai", "mcp")


def _loaded_after(*steps: str) -> list[list[str]]:
    """The framework modules loaded after each of ``steps``, run in order in one fresh interpreter."""
    snapshot = "print(json.dumps(sorted(sys.modules)), flush=True)"
    probe = "\n".join(["import json, sys", *(f"{step}\n{snapshot}" for step in steps)])
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        env=env,
        check=True,
        timeout=120,
    )
    lines = done.stdout.strip().splitlines()[-len(steps) :]
    return [[m for m in json.loads(line) if m.split(".")[0] in FRAMEWORKS] for line in lines]


@pytest.fixture(scope="module")
def loaded() -> list[list[str]]:
    """After ``import dissensus, dissensus.integrations``, then after ``import dissensus.cli``."""
    return _loaded_after("import dissensus, dissensus.integrations", "import dissensus.cli")


def test_import_dissensus_loads_no_framework(loaded: list[list[str]]) -> None:
    assert loaded[0] == []


def test_the_cli_loads_no_framework_until_a_command_needs_it(loaded: list[list[str]]) -> None:
    assert loaded[1] == []


def test_mcp_without_its_extra_is_a_usage_error_naming_the_extra() -> None:
    code = "import sys\nsys.modules['mcp'] = None\nfrom dissensus.cli import main\nraise SystemExit(main(['mcp']))"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2
    assert "dissensus[mcp]" in done.stderr and "Traceback" not in done.stderr


_BLOCK = """
import importlib.abc, sys
class _Missing(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {blocked!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None
sys.meta_path.insert(0, _Missing())
try:
    import {module}
except ModuleNotFoundError as exc:
    print(exc.name)
    print(exc)
"""


@pytest.mark.parametrize(
    ("module", "blocked", "extra"),
    [
        ("dissensus.integrations.langgraph", ("langgraph", "langchain_core"), "langgraph"),
        ("dissensus.integrations.inspect", ("inspect_ai",), "inspect"),
        ("dissensus.integrations.mcp", ("mcp",), "mcp"),
    ],
)
def test_an_integration_without_its_framework_names_the_extra_to_install(
    module: str, blocked: tuple[str, ...], extra: str
) -> None:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]),
    }
    code = _BLOCK.format(module=module, blocked=set(blocked))
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    name, message = done.stdout.strip().splitlines()
    assert name.split(".")[0] in blocked  # still a ModuleNotFoundError naming the module
    assert f"pip install 'dissensus[{extra}]'" in message, message
    assert "No module named" in message, message
