"""Learned acceptance in ``dissensus decide``: records quote the file, the guarantee, refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli_helpers import cli
from dissensus.cli import main
from dissensus.states import get_backend
from dissensus.types import Panel

REPO = Path(__file__).resolve().parent.parent
PANELS = REPO / "examples" / "llmbar-swap.jsonl"


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from dissensus.acceptance import FeatureSettings, calibrate, save_acceptance
    from dissensus.acceptance.prepare import prepare_cases

    root = tmp_path_factory.mktemp("acc")
    panels = [Panel.model_validate_json(line) for line in PANELS.read_text().splitlines()]
    settings = FeatureSettings(similarity="tfidf")
    cases = prepare_cases(panels, settings=settings, backend=get_backend("tfidf"))
    golds = [str(p.meta["gold"]) for p in panels]
    save_acceptance(
        calibrate(cases, golds, target=0.8, delta=0.2, min_accepted=20, settings=settings),
        root / "A.json",
    )
    save_acceptance(
        calibrate(cases, golds, target=0.99, delta=0.01, min_accepted=140, settings=settings),
        root / "none.json",
    )
    # The first 40 panels: enough for the refusals and the no-follow-up path, in a third of the time.
    (root / "few.jsonl").write_text("".join(PANELS.read_text().splitlines(keepends=True)[:40]))
    (root / "p.yaml").write_text(
        "reading:\n  similarity: tfidf\nrouting:\n  convergent_disagreement_without_values: seek_context\n"
    )
    (root / "nofollow.yaml").write_text(
        "reading:\n  similarity: tfidf\nseek_context:\n  followup: none\n"
    )
    return root


def _decide(
    root: Path, policy: str, acc: str, capsys: pytest.CaptureFixture[str], *extra: str
) -> tuple[int, list[dict[str, object]]]:
    journal = root / f"{policy}-{acc}.sqlite"
    journal.unlink(missing_ok=True)
    code = main(
        [
            "decide",
            str(root / "few.jsonl"),
            "--policy",
            str(root / policy),
            "--acceptance",
            str(root / acc),
            "--journal",
            str(journal),
            "--json",
            *extra,
        ]
    )
    out = capsys.readouterr().out
    return code, [json.loads(line) for line in out.splitlines() if line.startswith("{")]


@pytest.fixture(scope="module")
def learned_run(workdir: Path) -> tuple[int, list[dict[str, object]], str]:
    """One decide under A.json: exit code, the records (``-o``) and the summary (stdout)."""
    out = workdir / "learned.jsonl"
    res = cli(
        "decide", PANELS, "--policy", workdir / "p.yaml", "--acceptance", workdir / "A.json",
        "--journal", workdir / "learned.sqlite", "-o", out,
    )  # fmt: skip
    records = [json.loads(line) for line in out.read_text().splitlines()]
    return res.code, records, res.out


def test_records_quote_the_file(
    workdir: Path, learned_run: tuple[int, list[dict[str, object]], str]
) -> None:
    sha = json.loads((workdir / "A.json").read_text())["sha256"]
    code, records, _ = learned_run
    assert code == 0 and len(records) == 150
    auto = [r for r in records if r["basis"] == "learned"]
    assert auto, "the file accepts some cases"
    for r in records:
        acc = r["acceptance"]
        assert acc is not None and acc["file_sha256"] == sha  # type: ignore[index]
        assert set(acc) == {
            "family",
            "score",
            "threshold",
            "target_precision",
            "delta",
            "calibration_n",
            "file_sha256",
        }  # type: ignore[arg-type]
    for r in auto:
        assert r["auto"] and r["acceptance"]["score"] >= r["acceptance"]["threshold"]  # type: ignore[index,operator]


def test_no_threshold_accepts_nothing_with_the_reason(
    workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, records = _decide(workdir, "p.yaml", "none.json", capsys)
    assert code == 0
    assert not any(r["basis"] == "learned" for r in records)
    judged = [r for r in records if r["acceptance"] is not None]
    assert judged and all("accepts nothing" in str(r["reason"]) for r in judged)


def test_scored_without_a_followup(workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, records = _decide(workdir, "nofollow.yaml", "A.json", capsys)
    assert code == 0
    assert any("accept:learned" in r["path"] or "accept:refused" in r["path"] for r in records)  # type: ignore[operator]


def test_summary_states_the_guarantee(
    learned_run: tuple[int, list[dict[str, object]], str],
) -> None:
    code, _, summary = learned_run
    assert code == 0
    out = " ".join(summary.split())
    assert (
        "precision >= 0.80 with probability >= 0.80 if these panels are exchangeable with the 150 calibration cases"
        in out
    )


def test_tampered_or_mismatched_file_is_refused(
    workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = json.loads((workdir / "A.json").read_text())
    data["threshold"] = 0.01
    bad = workdir / "bad.json"
    bad.write_text(json.dumps(data))
    assert (
        main(
            [
                "decide",
                str(PANELS),
                "--policy",
                str(workdir / "p.yaml"),
                "--acceptance",
                str(bad),
                "--journal",
                str(workdir / "b.sqlite"),
            ]
        )
        == 2
    )
    assert "sha256" in capsys.readouterr().err
    other = workdir / "minilm.yaml"
    other.write_text("reading:\n  similarity: minilm\n")
    code = main(
        [
            "decide",
            str(PANELS),
            "--policy",
            str(other),
            "--acceptance",
            str(workdir / "A.json"),
            "--journal",
            str(workdir / "c.sqlite"),
        ]
    )
    assert code == 2


def test_features_never_read_gold() -> None:
    from dissensus.acceptance.features import candidate_rows, feature_inputs

    line = PANELS.read_text().splitlines()[0]
    panel = Panel.model_validate_json(line)
    data = json.loads(line)
    data["meta"]["gold"] = "2" if data["meta"]["gold"] == "1" else "1"
    flipped = Panel.model_validate(data)
    assert candidate_rows(feature_inputs(panel)) == candidate_rows(feature_inputs(flipped))
