"""``--output`` and ``--rejects`` never overwrite a file the run's model reads.

``decide`` and ``runs resume`` refused outputs naming the journal, the input and the
files the policy names, but not the ``scripted:`` or ``replay:`` file of the run's model
(``--model``, ``seek_context.model``, ``seek_context.models``, inside a ``record:``
spec too): ``runs resume P -o rel.yaml`` exited 0 and replaced the script with records.
Now both exit 2 naming the file, and the file is left as it was.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cli_helpers import cli
from pipeline_cases import CRASH_ANSWERS, panel, write_jsonl, write_policy, write_script

ROWS = [panel(f"p{i}", ["2", "1", "2"]) for i in range(300)]
ENV = {"DISSENSUS_MODEL": None}

WAYS: dict[str, tuple[dict[str, Any], tuple[str, ...]]] = {
    "--model": ({}, ("--model", "scripted:rel.yaml")),
    "record": ({}, ("--model", "record:rec.jsonl:scripted:rel.yaml")),
    "seek_context.model": ({"seek_context": {"model": "scripted:rel.yaml"}}, ()),
    "seek_context.models": ({"seek_context": {"models": {"a3": "scripted:rel.yaml"}}}, ()),
}


@pytest.mark.parametrize("option", ["--output", "--rejects"])
@pytest.mark.parametrize("way", sorted(WAYS))
def test_decide_and_resume_refuse_to_overwrite_the_model_file(
    tmp_path: Path, way: str, option: str
) -> None:
    extra, model = WAYS[way]
    script = write_script(tmp_path / "rel.yaml", CRASH_ANSWERS)
    kept = script.read_bytes()
    write_jsonl(tmp_path / "in.jsonl", ROWS)
    write_policy(tmp_path / "pol.yaml", {"budget": {"max_calls": 100000}, **extra})
    args = ("in.jsonl", "--policy", "pol.yaml", "--journal", "j.sqlite", "--json", *model)
    res = cli("decide", *args, "--run-id", "D", option, "rel.yaml", cwd=tmp_path, env=ENV)
    assert res.code == 2, res.err
    assert "rel.yaml" in res.err, res.err
    assert script.read_bytes() == kept
    part = cli("decide", *args, "--run-id", "P", "--deadline", "0.05", cwd=tmp_path, env=ENV)
    assert part.code == 1, part.err
    res = cli("runs", "resume", "P", "--journal", "j.sqlite", option, "rel.yaml",
              cwd=tmp_path, env=ENV)  # fmt: skip
    assert res.code == 2, res.err
    assert "rel.yaml" in res.err, res.err
    assert script.read_bytes() == kept
