"""``calibrate-acceptance`` on a file with no usable labelled case names the file and
how many of its lines were rejected (it said only "no labelled cases to calibrate on")."""

from __future__ import annotations

import json
from pathlib import Path

from cli_helpers import cli

PANELS = Path(__file__).resolve().parent.parent / "examples" / "llmbar-swap.jsonl"


def test_an_empty_file_is_named(tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("", encoding="utf-8")
    res = cli("calibrate-acceptance", empty, "--out", tmp_path / "A.json")
    assert res.code == 2
    said = " ".join(res.err.split())
    assert f"error: no labelled cases to calibrate on in {empty} (0 labelled panels)" in said
    assert not (tmp_path / "A.json").exists()


def test_a_file_whose_every_line_is_rejected_says_so(tmp_path: Path) -> None:
    lines = PANELS.read_text(encoding="utf-8").splitlines()[:5]
    bad = []
    for line in lines:
        panel = json.loads(line)
        panel["meta"]["gold"] = "7"  # none of the options
        bad.append(json.dumps(panel))
    labelled = tmp_path / "bad.jsonl"
    labelled.write_text("\n".join(bad) + "\n", encoding="utf-8")
    res = cli("calibrate-acceptance", labelled, "--out", tmp_path / "A.json")
    assert res.code == 2
    assert res.err.count("field 'meta.gold': '7' is none of the case's options") == 5
    assert (
        f"error: no labelled cases to calibrate on in {labelled} (0 labelled panels); "
        "5 line(s) rejected, each named above"
    ) in " ".join(res.err.split())
