"""No integration imports its framework at ``import dissensus`` (or CLI) time."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
FRAMEWORKS = ("langgraph", "langchain_core", "inspect_ai", "mcp")


def _loaded(code: str) -> list[str]:
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
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
    modules: list[str] = json.loads(done.stdout.strip().splitlines()[-1])
    return [m for m in modules if m.split(".")[0] in FRAMEWORKS]


def test_import_dissensus_loads_no_framework() -> None:
    assert _loaded("import dissensus, dissensus.integrations") == []


def test_the_cli_loads_no_framework_until_a_command_needs_it() -> None:
    assert _loaded("import dissensus.cli") == []


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
