"""`dissensus negotiate --out FILE` never writes over a file the run reads: the module a
function agent names beside the problem file, or the model's scripted answers."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from cli_helpers import run_cli

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "concord"


@pytest.mark.parametrize(
    ("target", "label"),
    [("cost_model.py", "agents.2.score"), ("llm-checkout.script.yaml", "model")],
)
def test_out_naming_an_input_of_the_run_is_refused(tmp_path: Path, target: str, label: str) -> None:
    for name in ("llm-checkout.yaml", "llm-checkout.script.yaml", "cost_model.py"):
        shutil.copy(EXAMPLES / name, tmp_path / name)
    before = (tmp_path / target).read_bytes()
    res = run_cli(
        "negotiate",
        tmp_path / "llm-checkout.yaml",
        "--out",
        tmp_path / target,
        env={"PATH": "/usr/bin:/bin", "COLUMNS": "200"},
    )
    assert res.returncode == 2, res.stdout + res.stderr
    assert f"({label}); refusing to overwrite it" in res.stderr
    assert (tmp_path / target).read_bytes() == before
