"""``calibrate-acceptance --markers``: the margin score under the policy's own marker
lexicon is a feature, recorded in the file, and ``decide`` computes it the same way."""

from __future__ import annotations

from pathlib import Path

import pytest

from dissensus.acceptance import load_acceptance
from dissensus.cli import main

REPO = Path(__file__).resolve().parent.parent
LEXICON = {"concession": ["however", "both"], "grounding": ["instruction"]}


def _policy(tmp_path: Path) -> Path:
    path = tmp_path / "policy.yaml"
    path.write_text(
        "reading:\n  similarity: tfidf\nacceptance:\n  markers:\n"
        "    concession: [however, both]\n    grounding: [instruction]\n",
        encoding="utf-8",
    )
    return path


@pytest.mark.parametrize("markers", [True, False])
def test_markers_add_the_policys_margin_score(tmp_path: Path, markers: bool) -> None:
    out = tmp_path / "ACCEPT.json"
    policy = _policy(tmp_path)
    argv = ["calibrate-acceptance", str(REPO / "examples" / "llmbar-swap.jsonl"),
            "--policy", str(policy), "--out", str(out), "--target-precision", "0.8"]  # fmt: skip
    assert main([*argv, "--markers" if markers else "--no-markers"]) == 0
    acc = load_acceptance(out)
    assert acc.settings.markers == (LEXICON if markers else None)
    assert any("margin" in f for f in acc.features) is markers
    # decide under the same policy reads the file and computes the same features.
    code = main(["decide", str(REPO / "examples" / "llmbar-swap.jsonl"), "--policy", str(policy),
                 "--acceptance", str(out), "--journal", str(tmp_path / "j.sqlite")])  # fmt: skip
    assert code in (0, 3)


def test_a_policy_key_that_does_not_exist_is_still_refused(tmp_path: Path) -> None:
    policy = tmp_path / "p.yaml"
    policy.write_text("acceptance:\n  lexicon: {concession: [x]}\n", encoding="utf-8")
    argv = ["calibrate-acceptance", str(REPO / "examples" / "llmbar-swap.jsonl"),
            "--policy", str(policy), "--out", str(tmp_path / "a.json")]  # fmt: skip
    assert main(argv) == 2
