"""Blind audits of automatic commits, and the monitor suspending a stratum from them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dissensus.acceptance.monitor import confseq_available
from dissensus.cli import main
from dissensus.pipeline.audit import audit_item, open_audits
from dissensus.pipeline.confirm import confirm
from dissensus.pipeline.records import CaseRecord
from dissensus.pipeline.review import final_records
from dissensus.store.journal import Journal

REPO = Path(__file__).resolve().parent.parent
SRC = REPO / "examples" / "llmbar-swap.jsonl"

NEEDS_CONFSEQ = pytest.mark.skipif(
    not confseq_available(),
    reason="confseq is not installed (pip install 'dissensus[monitor]'; it builds against "
    "libboost-dev, see the Makefile)",
)


def _decide(root: Path, lines: slice, run_id: str, policy: Path, accept: Path) -> Path:
    cases = root / f"{run_id}.jsonl"
    cases.write_text("".join(SRC.read_text().splitlines(keepends=True)[lines]))
    journal = root / "j.sqlite"
    code = main(
        [
            "decide",
            str(cases),
            "--policy",
            str(policy),
            "--acceptance",
            str(accept),
            "--journal",
            str(journal),
            "--run-id",
            run_id,
        ]
    )
    assert code == 0
    return journal


@pytest.fixture(scope="module")
def audited(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path, list[CaseRecord]]:
    """A run under learned acceptance that audits every automatic commit."""
    root = tmp_path_factory.mktemp("audits")
    policy = root / "p.yaml"
    policy.write_text("reading:\n  similarity: tfidf\nacceptance:\n  audit_rate: 1.0\n")
    accept = root / "A.json"
    args = ["calibrate-acceptance", str(SRC), "--policy", str(policy), "--out", str(accept)]
    assert main([*args, "--target-precision", "0.8"]) == 0
    journal = _decide(root, slice(0, 40), "r1", policy, accept)
    with Journal(str(journal)) as jr:
        records = final_records(jr, "r1")
    return root, policy, accept, records


def test_every_automatic_commit_opens_a_blind_audit_at_rate_one(
    audited: tuple[Path, Path, Path, list[CaseRecord]],
) -> None:
    root, _, _, records = audited
    auto = [r for r in records if r.auto]
    assert auto, "the fixture must commit some cases automatically"
    with Journal(str(root / "j.sqlite")) as jr:
        for r in records:
            item = audit_item(jr, "r1", r.line)
            assert (item is not None) == r.auto
            if item is not None:
                assert item.audit and item.suggestion is None and item.acceptance is None
                assert item.reading.decision is None and item.guard is None
        assert {i.line for i in open_audits(jr, "r1")} == {r.line for r in auto}


def test_review_show_of_an_audit_hides_the_committed_answer(
    audited: tuple[Path, Path, Path, list[CaseRecord]], capsys: pytest.CaptureFixture[str]
) -> None:
    root, _, _, records = audited
    r = next(r for r in records if r.auto)
    capsys.readouterr()
    code = main(["review", "show", f"r1.{r.line}", "--journal", str(root / "j.sqlite"), "--json"])
    assert code == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["audit"] is True and shown["audited"] is False
    assert shown["suggestion"] is None and shown["acceptance"] is None
    assert shown["reading"]["decision"] is None
    assert "decision" not in shown
    # The text view names the command that answers an audit, and only that one.
    code = main(["review", "show", f"r1.{r.line}", "--journal", str(root / "j.sqlite")])
    assert code == 0
    text = capsys.readouterr().out
    assert "dissensus review confirm" in text and "review resolve" not in text


@NEEDS_CONFSEQ
def test_wrong_audits_suspend_later_automatic_commits(
    audited: tuple[Path, Path, Path, list[CaseRecord]], capsys: pytest.CaptureFixture[str]
) -> None:
    root, policy, accept, records = audited
    journal = root / "j.sqlite"
    with Journal(str(journal)) as jr:
        for r in records:
            if r.auto and r.decision is not None:
                other = "B" if r.decision != "B" else "A"
                confirm(jr, f"r1.{r.line}", decision=other, note="audit: the other output is right")
    capsys.readouterr()
    _decide(root, slice(40, 80), "r2", policy, accept)
    # The summary says the suspension instead of the guarantee (it printed the guarantee
    # with nothing decided automatically, and no word of the suspension).
    summary = " ".join(capsys.readouterr().out.split())
    assert "Learned acceptance is suspended: audited precision below 0.80 after" in summary, summary
    assert "automatic decisions should be right" not in summary
    assert main(["runs", "show", "r2", "--journal", str(journal), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)["acceptance"]
    assert shown["held"] is None and [s["stratum"] for s in shown["suspended"]] == ["all"]
    assert shown["suspended"][0]["reason"].startswith("acceptance suspended: audited precision")
    assert main(["runs", "show", "r2", "--journal", str(journal)]) == 0
    assert "Learned acceptance is suspended" in " ".join(capsys.readouterr().out.split())
    # The run decided before the audits were answered met no suspension.
    assert main(["runs", "show", "r1", "--journal", str(journal), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["acceptance"] == {
        "suspended": [],
        "held": None,
        "held_on_resume": False,
        "held_within_run": None,
    }
    with Journal(str(journal)) as jr:
        later = final_records(jr, "r2")
        suspended = list(jr.events("r2", type="acceptance.suspended"))
    escalated = [
        r for r in later if "acceptance suspended: audited precision below 0.80 after" in r.reason
    ]
    assert escalated and not any(r.auto and r.basis in ("learned", "guard") for r in later)
    assert len(suspended) == 1 and suspended[0].payload["suspended"] is True
    capsys.readouterr()
    assert main(["acceptance", "status", "--journal", str(journal), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["strata"]
    assert [r["suspended"] for r in rows] == [True]
    assert rows[0]["audits"] == sum(1 for r in records if r.auto) and rows[0]["correct"] == 0
    assert rows[0]["upper"] < 0.8 and rows[0]["reason"].startswith("acceptance suspended")
    assert main(["acceptance", "status", "--journal", str(journal)]) == 0
    assert "suspended" in capsys.readouterr().out


@NEEDS_CONFSEQ
def test_audits_answered_late_never_lift_a_suspension(
    audited: tuple[Path, Path, Path, list[CaseRecord]], tmp_path: Path
) -> None:
    """Outcomes count in the order audits were answered: answering the earliest-opened
    audits last (all right) after the latest-opened ones (wrong) suspended the stratum
    must not lift the suspension, which only a new acceptance file does."""
    from dissensus.pipeline.audit import monitor_status

    _, policy, accept, _ = audited
    journal = _decide(tmp_path, slice(0, 40), "r1", policy, accept)
    with Journal(str(journal)) as jr:
        records = [r for r in final_records(jr, "r1") if r.auto and r.decision is not None]
        wrong = 0
        for r in reversed(records):  # the latest-opened audits first, all wrong
            confirm(jr, f"r1.{r.line}", decision="B" if r.decision != "B" else "A", note="wrong")
            wrong += 1
            if monitor_status(jr)[0].suspended:
                break
        assert monitor_status(jr)[0].suspended, "the fixture must suspend the stratum"
        for r in records[: len(records) - wrong]:  # then the earliest-opened ones, all right
            confirm(jr, f"r1.{r.line}", decision=r.decision, note="right")
        (row,) = monitor_status(jr)
        assert row.audits == len(records) and row.suspended, row
    _decide(tmp_path, slice(40, 80), "r2", policy, accept)
    with Journal(str(journal)) as jr:
        later = final_records(jr, "r2")
    assert not any(r.auto and r.basis == "learned" for r in later)


@pytest.mark.anyio
async def test_the_service_shows_a_blind_audit_and_confirms_it(tmp_path: Path) -> None:
    from pipeline_cases import panel, write_policy
    from serve_helpers import auth, client_for, settings

    policy = write_policy(tmp_path / "audit-policy.yaml", {"acceptance": {"audit_rate": 1.0}})
    async with client_for(settings(tmp_path, policy=str(policy))) as client:
        run = (
            await client.post(
                "/v1/decide",
                json=[panel("a", ["1", "1"], swap=["1", "1"])],
                headers=auth("sub"),
            )
        ).json()
        (record,) = run["records"]
        assert record["auto"]
        ref = f"{run['run_id']}.{record['line']}"
        shown = await client.get(f"/v1/audits/{ref}", headers=auth("rev"))
        assert shown.status_code == 200
        body = shown.json()
        assert body["status"] == "open" and body["item"]["audit"] is True
        assert body["item"]["suggestion"] is None and body["item"]["reading"]["decision"] is None
        unseen = await client.post(
            f"/v1/cases/{ref}/confirm", json={"note": "checked blind"}, headers=auth("rev")
        )
        assert unseen.status_code == 400 and "blind audit" in unseen.text
        confirmed = await client.post(
            f"/v1/cases/{ref}/confirm",
            json={"note": "checked blind", "decision": "1"},
            headers=auth("rev"),
        )
        assert confirmed.status_code == 200
        again = (await client.get(f"/v1/audits/{ref}", headers=auth("rev"))).json()
        assert again["status"] == "audited"
        missing = await client.get(f"/v1/audits/{run['run_id']}.99", headers=auth("rev"))
        assert missing.status_code == 404
