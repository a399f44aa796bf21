"""``dissensus.acceptance`` imports scikit-learn and scipy on first use, and says when they are missing."""

from __future__ import annotations

import subprocess
import sys

PROBE = """
import sys
import dissensus.acceptance
print(sorted(m for m in ("sklearn", "scipy", "scipy.stats") if m in sys.modules))
"""

BLOCKED = """
import importlib.util
found = importlib.util.find_spec
importlib.util.find_spec = lambda name, package=None: None if name == "sklearn" else found(name, package)
try:
    import dissensus.acceptance
except Exception as exc:
    print(type(exc).__name__, exc)
"""


def _run(code: str) -> list[str]:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return done.stdout.splitlines()


def test_importing_the_package_loads_neither_library_until_used() -> None:
    assert _run(PROBE) == ["[]"]  # (the bound and fit tests use both libraries)


def test_a_missing_library_is_a_config_error_naming_the_extra() -> None:
    (line,) = _run(BLOCKED)
    assert line.startswith(
        "ConfigError learned acceptance needs scikit-learn and scipy (sklearn is missing)"
    )
    assert "pip install 'dissensus[accept]'" in line
