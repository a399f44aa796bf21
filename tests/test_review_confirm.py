"""``review confirm``: audits of automatic decisions, and the labels calibration reads from them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from dissensus.acceptance import apply_acceptance, load_acceptance
from dissensus.acceptance.prepare import candidates_for, panel_case_key
from dissensus.cli import main
from dissensus.errors import InputError
from dissensus.pipeline.confirm import AlreadyConfirmed, confirm
from dissensus.pipeline.labels import labelled_from_journal
from dissensus.pipeline.records import CaseRecord
from dissensus.pipeline.review import final_records
from dissensus.states import get_backend
from dissensus.store.errors import ClaimConflict, JournalBusy
from dissensus.store.journal import Journal
from store_backends import pg_schema, pg_url

REPO = Path(__file__).resolve().parent.parent
SRC = REPO / "examples" / "llmbar-swap.jsonl"


@pytest.fixture(scope="module")
def decided(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, list[CaseRecord]]:
    """A run decided with learned acceptance (tfidf), some cases committed automatically."""
    root = tmp_path_factory.mktemp("confirm")
    policy = root / "p.yaml"
    policy.write_text("reading:\n  similarity: tfidf\n")
    accept = root / "A.json"
    assert (
        main(
            [
                "calibrate-acceptance",
                str(SRC),
                "--policy",
                str(policy),
                "--out",
                str(accept),
                "--target-precision",
                "0.8",
            ]
        )
        == 0
    )
    journal = root / "j.sqlite"
    head = root / "head.jsonl"
    head.write_text("".join(SRC.read_text().splitlines(keepends=True)[:40]))
    code = main(
        [
            "decide",
            str(head),
            "--policy",
            str(policy),
            "--acceptance",
            str(accept),
            "--journal",
            str(journal),
            "--run-id",
            "r1",
        ]
    )
    assert code == 0
    with Journal(str(journal)) as jr:
        records = final_records(jr, "r1")
    return journal, accept, records


def _learned(records: list[CaseRecord]) -> list[CaseRecord]:
    return [r for r in records if r.auto and r.basis == "learned"]


def test_audits_are_labelled_cases_with_the_features_of_decision_time(
    decided: tuple[Path, Path, list[CaseRecord]], tmp_path: Path
) -> None:
    journal, accept, records = decided
    learned = _learned(records)
    assert len(learned) >= 3, "the fixture must commit some cases by learned acceptance"
    work = tmp_path / "j.sqlite"
    work.write_bytes(journal.read_bytes())
    golds = {
        i + 1: json.loads(line)["meta"]["gold"]
        for i, line in enumerate(SRC.read_text().splitlines())
    }
    with Journal(str(work)) as jr:
        first, second = learned[0], learned[1]
        ok = confirm(jr, f"r1.{first.line}", note="checked against the source")
        assert ok.agrees and ok.decision == first.decision
        other = "1" if second.decision == "2" else "2"
        fixed = confirm(jr, f"r1.{second.line}", note="output 1 ignores the ask", decision=other)
        assert not fixed.agrees and fixed.committed == second.decision
        with pytest.raises(AlreadyConfirmed, match="already audited"):
            confirm(jr, f"r1.{first.line}", note="again")
        # A correction supersedes the automatic record; a confirmation leaves it alone.
        after = {r.line: r for r in final_records(jr, "r1")}
        assert after[second.line].decision == other and after[second.line].action == "human"
        assert after[second.line].resolution is not None
        assert after[first.line] == first
        found = labelled_from_journal(jr, ["r1"])
    assert found.confirmed == 2 and len(found.cases) == 2
    assert {c.gold for c in found.cases} == {first.decision, other}
    # The audited cases are scored exactly as the pipeline scored them when it decided.
    acc = load_acceptance(accept)
    backend = get_backend("tfidf")
    for case in found.cases:
        line = int(case.review_id.rsplit(".", 1)[1])
        rows = candidates_for(
            case.panel,
            reading=case.reading,
            guard=case.guard,
            second=case.second,
            settings=acc.settings,
            sim_backend=backend,
        )
        verdict = apply_acceptance(acc, rows, key=panel_case_key(case.panel))
        rec = next(r for r in records if r.line == line)
        assert rec.acceptance is not None
        assert verdict.score == pytest.approx(rec.acceptance.score, abs=1e-6)
        assert golds[line] in {"1", "2"}


def test_an_audit_refused_as_busy_is_not_saved(
    decided: tuple[Path, Path, list[CaseRecord]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An audit that fails as the auditor's claim is dropped leaves nothing journalled."""
    journal, _, records = decided
    work = tmp_path / "j.sqlite"
    work.write_bytes(journal.read_bytes())
    ref = f"r1.{_learned(records)[0].line}"
    with Journal(str(work)) as jr:

        def busy(*args: object, **kwargs: object) -> bool:
            raise JournalBusy("the journal is busy")

        monkeypatch.setattr(jr, "release_claim", busy)
        with pytest.raises(JournalBusy):
            confirm(jr, ref, note="checked", reviewer="kim")
        monkeypatch.undo()
        assert jr.get("r1", f"confirm/{_learned(records)[0].line}") is None
        assert confirm(jr, ref, note="checked", reviewer="kim").agrees
        assert jr.verify("r1").ok


def test_only_automatic_decisions_can_be_confirmed(
    decided: tuple[Path, Path, list[CaseRecord]], tmp_path: Path
) -> None:
    journal, _, records = decided
    escalated = next(r for r in records if not r.auto)
    work = tmp_path / "j.sqlite"
    work.write_bytes(journal.read_bytes())
    with Journal(str(work)) as jr:
        with pytest.raises(InputError, match="review resolve"):
            confirm(jr, f"r1.{escalated.line}", note="x")
        with pytest.raises(InputError, match="no record"):
            confirm(jr, "r1.999", note="x")
        with pytest.raises(InputError, match="no run"):
            confirm(jr, "nosuch.1", note="x")
        with pytest.raises(InputError, match="case reference"):
            confirm(jr, "r1", note="x")
        with pytest.raises(InputError, match="note"):
            confirm(jr, f"r1.{_learned(records)[0].line}", note=" ")
        assert labelled_from_journal(jr, ["r1"]).confirmed == 0


def test_cli_confirm_then_calibrate_reads_the_audits(
    decided: tuple[Path, Path, list[CaseRecord]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    journal, _, records = decided
    work = tmp_path / "j.sqlite"
    work.write_bytes(journal.read_bytes())
    learned = _learned(records)
    for rec in learned:
        code = main(
            [
                "review",
                "confirm",
                f"r1.{rec.line}",
                "--note",
                "ok",
                "--decision",
                rec.decision or "",
                "--journal",
                str(work),
                "--json",
            ]
        )
        assert code == 0
        got = json.loads(capsys.readouterr().out)
        assert got["agrees"] is True and got["decision"] == rec.decision
    assert (
        main(["review", "confirm", f"r1.{learned[0].line}", "--note", "ok", "--journal", str(work)])
        != 0
    )
    assert "already audited" in capsys.readouterr().err
    policy = tmp_path / "p.yaml"
    policy.write_text("reading:\n  similarity: tfidf\n")
    out = tmp_path / "B.json"
    code = main(
        [
            "calibrate-acceptance",
            "--journal",
            str(work),
            "--policy",
            str(policy),
            "--out",
            str(out),
            "--min-accepted",
            "1",
        ]
    )
    assert code == 0
    acc = load_acceptance(out)
    assert acc.calibration_n == len(learned)
    assert f"{len(learned)} audited automatic decisions" in acc.built_from[0]


@pytest.fixture
def pg() -> Iterator[str]:
    with pg_schema(pg_url()) as url:
        yield url


def test_confirm_and_calibrate_on_postgresql(
    decided: tuple[Path, Path, list[CaseRecord]], pg: str, tmp_path: Path
) -> None:
    """The SQLite loop (the ``decided`` fixture's ``decide --acceptance --journal``, then
    :func:`test_cli_confirm_then_calibrate_reads_the_audits`) on PostgreSQL: decide,
    audit, calibrate from the journal URL."""
    journal_target = pg
    _, accept, records = decided
    policy = tmp_path / "p.yaml"
    policy.write_text("reading:\n  similarity: tfidf\n")
    head = tmp_path / "head.jsonl"
    head.write_text("".join(SRC.read_text().splitlines(keepends=True)[:40]))
    argv = ["--policy", str(policy), "--journal", journal_target]
    assert main(["decide", str(head), *argv, "--acceptance", str(accept), "--run-id", "r2"]) == 0
    learned = _learned(records)
    for rec in learned:
        assert main(["review", "confirm", f"r2.{rec.line}", "--note", "ok", *argv[2:]]) == 0
    out = tmp_path / "C.json"
    code = main(["calibrate-acceptance", *argv, "--out", str(out), "--min-accepted", "1"])
    assert code == 0
    assert load_acceptance(out).calibration_n == len(learned)


def test_an_unnamed_audit_is_refused_while_anyone_holds_a_claim(
    decided: tuple[Path, Path, list[CaseRecord]], tmp_path: Path
) -> None:
    journal, _, records = decided
    work = tmp_path / "j.sqlite"
    work.write_bytes(journal.read_bytes())
    ref = f"r1.{_learned(records)[0].line}"
    with Journal(str(work)) as jr:
        jr.claim(ref, "bob", 60, run_id="r1")
        with pytest.raises(ClaimConflict, match="claimed by bob"):
            confirm(jr, ref, note="looks right")
        assert jr.release_claim(ref, "bob")
        assert confirm(jr, ref, note="looks right").agrees


def test_an_answered_audit_seals_the_run_of_a_signing_journal(
    decided: tuple[Path, Path, list[CaseRecord]], tmp_path: Path
) -> None:
    """An audit that agrees appends no resolution: its ``review.confirmed`` seals the
    head itself, so the signed run stays signed."""
    from dissensus.signing import Signer
    from dissensus.store import SEAL_TYPE

    journal, _, records = decided
    work = tmp_path / "j.sqlite"
    work.write_bytes(journal.read_bytes())
    key = Signer.generate()
    first, second = _learned(records)[:2]
    with Journal(str(work), signer=key) as jr:
        confirm(jr, f"r1.{first.line}", note="looks right")
        assert [e.type for e in jr.events("r1")][-2:] == ["review.confirmed", SEAL_TYPE]
        other = "1" if second.decision == "2" else "2"
        confirm(jr, f"r1.{second.line}", note="the other one", decision=other)
        assert [e.type for e in jr.events("r1")][-1] == SEAL_TYPE
        report = jr.verify("r1", public_key=key.public_key)
    assert report.ok and report.signature == "signed", report.signature_detail


def test_a_blind_audit_is_not_confirmed_unseen(
    decided: tuple[Path, Path, list[CaseRecord]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A blind audit's label is the reviewer's own decision: ``review confirm`` without
    ``--decision`` is refused (exit 2, nothing journalled); with it, it is an audit."""
    from dissensus.pipeline.audit import open_audits

    journal, _, _ = decided
    work = tmp_path / "j.sqlite"
    work.write_bytes(journal.read_bytes())
    with Journal(str(work)) as jr:
        audits = list(open_audits(jr, "r1"))
    assert audits, "the fixture's run must open blind audits"
    ref = audits[0].review_id
    capsys.readouterr()
    code = main(["review", "confirm", ref, "--note", "ok", "--journal", str(work)])
    assert code == 2
    err = capsys.readouterr().err
    assert "blind audit" in err and "--decision" in err and "Traceback" not in err
    with Journal(str(work)) as jr:
        assert [e for e in jr.events("r1") if e.type == "review.confirmed"] == []
    code = main(
        ["review", "confirm", ref, "--note", "ok", "--decision", "1", "--journal", str(work)]
    )
    assert code == 0, capsys.readouterr().err


def test_a_blind_audit_id_given_to_the_escalation_commands_says_how_to_answer_it(
    decided: tuple[Path, Path, list[CaseRecord]], capsys: pytest.CaptureFixture[str]
) -> None:
    from dissensus.pipeline.audit import open_audits

    journal, _, _ = decided
    with Journal(str(journal)) as jr:
        ref = next(iter(open_audits(jr, "r1"))).review_id
    # (``review claim`` takes a blind audit as the service does: test_review_audit_claim_cli)
    for argv in (
        ["review", "resolve", ref, "--decision", "1", "--note", "n"],
        ["review", "undo", ref],
    ):
        capsys.readouterr()
        assert main([*argv, "--journal", str(journal)]) == 2
        err = capsys.readouterr().err
        assert "is a blind audit of an automatic decision" in err, (argv, err)
        assert f"review confirm {ref} --journal {journal} --decision D --note TEXT" in err


def test_an_audit_outside_the_options_is_flagged_and_left_out_of_calibration(
    decided: tuple[Path, Path, list[CaseRecord]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """As a resolution is: the reviewer rejected every option, so no candidate was right."""
    journal, _, records = decided
    work = tmp_path / "j.sqlite"
    work.write_bytes(journal.read_bytes())
    first, second = _learned(records)[:2]
    code = main(
        [
            "review",
            "confirm",
            f"r1.{first.line}",
            "--journal",
            str(work),
            "--decision",
            "neither",
            "--note",
            "both outputs miss the ask",
            "--reviewer",
            "kim",
        ]
    )
    assert code == 0
    assert "none of the case's options" in capsys.readouterr().err
    with Journal(str(work)) as jr:
        event = jr.get("r1", f"confirm/{first.line}")
        assert event is not None and event.payload["outside_options"] is True
        ok = confirm(jr, f"r1.{second.line}", note="checked", reviewer="kim")
        assert ok.outside_options is False
        found = labelled_from_journal(jr, ["r1"])
    assert found.outside_options == 1 and found.confirmed == 1
    assert [c.review_id for c in found.cases] == [f"r1.{second.line}"]
