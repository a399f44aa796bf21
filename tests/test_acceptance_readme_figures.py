"""README's ZeroEval GSM8K acceptance figures are the CLI's, under the policy it names.

Real data (``../shared/data/zeroeval-gsm``, read here, never copied into the repository):
the converter's panels, the first 659 calibrating and the last 660 decided at target
0.95, as evaluation/README.md lists the commands. README quoted 0.959 at 0.926 without
the routing it takes (``convergent_disagreement_without_values: seek_context``); under the
default routing ``decide`` commits 0.986 at 0.647.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli_helpers import cli
from dissensus.convert.zeroeval import iter_zeroeval_panels

pytest.importorskip("sklearn")

REPO = Path(__file__).resolve().parent.parent
CD = "convergent_disagreement_without_values: seek_context"


def _figures(root: Path, policy: str, name: str) -> tuple[float, float]:
    """Precision and coverage of ``decide``'s automatic records under ``policy``."""
    (root / f"{name}.yaml").write_text(policy)
    out = root / f"A-{name}.json"
    done = cli(
        "calibrate-acceptance", root / "cal.jsonl", "--policy", root / f"{name}.yaml",
        "--target-precision", "0.95", "--out", out, "--json",
    )  # fmt: skip
    assert done.code == 0, done.err
    done = cli(
        "decide", root / "test.jsonl", "--policy", root / f"{name}.yaml", "--acceptance", out,
        "--journal", root / f"j-{name}.sqlite", "--json",
    )  # fmt: skip
    assert done.code == 0, done.err
    records = [json.loads(x) for x in done.out.splitlines() if x.strip()]
    gold = {
        json.loads(x)["id"]: json.loads(x)["meta"]["gold"]
        for x in (root / "test.jsonl").read_text().splitlines()
    }
    auto = [r for r in records if r["auto"]]
    right = sum(str(r["decision"]) == str(gold[r["id"]]) for r in auto)
    return right / len(auto), len(auto) / len(records)


def test_readme_s_gsm8k_figure_names_the_routing_it_takes(
    shared_data: Path, tmp_path: Path
) -> None:
    source = shared_data / "zeroeval-gsm"
    if not source.is_dir():
        pytest.skip(f"no ZeroEval data at {source}")
    lines = [p.model_dump_json() for p in iter_zeroeval_panels(source)]
    assert len(lines) == 1319
    (tmp_path / "cal.jsonl").write_text("\n".join(lines[:659]) + "\n")
    (tmp_path / "test.jsonl").write_text("\n".join(lines[-660:]) + "\n")
    tfidf = "reading:\n  similarity: tfidf\n"
    seek = _figures(tmp_path, tfidf + "routing:\n  " + CD + "\n", "cd")
    default = _figures(tmp_path, tfidf, "default")
    said = {"seek": (0.959, 0.926), "default": (0.986, 0.647)}
    assert seek == pytest.approx(said["seek"], abs=5e-4)
    assert default == pytest.approx(said["default"], abs=5e-4)
    readme = " ".join((REPO / "README.md").read_text().split())
    at = readme.index("it commits at precision 0.959 and coverage 0.926")
    sentence = readme[at : at + 600]
    assert f"`routing.{CD}`" in sentence, sentence
    assert "`decide` commits 0.986 at coverage 0.647" in sentence, sentence
    evaluation = " ".join((REPO / "evaluation" / "README.md").read_text().split())
    assert f"| `{CD}` | 659 | 611 | 0.959 | 0.926 |" in evaluation
    assert "| default routing (CD escalates) | 441 of 659 | 427 | 0.986 | 0.647 |" in evaluation
