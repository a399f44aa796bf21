"""`dissensus calibrate` and `dissensus vote` through a subprocess, error paths included."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from cli_helpers import run_cli


def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, stdin=stdin)


def _vote(
    agent: str, answer: str, source: str = "parametric", present: bool = False, **extra: object
) -> dict[str, object]:
    return {
        "agent": agent,
        "answer": answer,
        "evidence_source": source,
        "evidence_present": present,
        **extra,
    }


def _labelled_lines() -> list[str]:
    lines = []
    for i in range(40):
        gold = "yes" if i % 2 else "no"
        wrong = "no" if gold == "yes" else "yes"
        present = i % 4 == 0
        votes = [
            _vote("a", gold, "wiki" if present else "parametric", present, family="F1"),
            _vote(
                "b",
                gold if i % 5 else wrong,
                "news" if present else "parametric",
                present,
                family="F2",
            ),
            _vote(
                "c",
                wrong if i % 3 == 0 else gold,
                "web" if present else "parametric",
                present,
                confidence=0.8,
            ),
        ]
        lines.append(json.dumps({"id": f"q{i}", "votes": votes, "gold": gold}))
    return lines


@pytest.fixture()
def labelled(tmp_path: Path) -> Path:
    path = tmp_path / "labelled.jsonl"
    path.write_text("\n".join(_labelled_lines()) + "\n")
    return path


def test_calibrate_then_vote_json(labelled: Path, tmp_path: Path) -> None:
    cal = tmp_path / "cal.json"
    res = run("calibrate", str(labelled), "--out", str(cal))
    assert res.returncode == 0, res.stderr
    assert "beta*" in res.stdout and "absent" in res.stdout and "n_eff" in res.stdout
    report = json.loads(cal.read_text())
    assert report["cases"] == 40 and {s["stratum"] for s in report["strata"]} == {
        "present",
        "mixed",
        "absent",
        "all",
    }
    assert len(report["agents"]) == 3 and report["n_eff"] > 1

    res = run("vote", str(labelled), "--calibration", str(cal), "--json")
    assert res.returncode == 0, res.stderr
    rows = [json.loads(line) for line in res.stdout.splitlines()]
    assert [r["id"] for r in rows] == [f"q{i}" for i in range(40)]
    for r in rows:
        assert {
            "id",
            "answer",
            "confidence",
            "mode",
            "weighted",
            "refusal",
            "n_eff",
            "probabilities",
            "reason",
        } <= set(r)
        assert abs(sum(r["probabilities"].values()) - 1) < 1e-9
        assert r["mode"] in ("consensus", "bounded", "majority", "verifier")
    # Cases where three sources had evidence are checked on all three invariants.
    assert any(r["invariants"][0]["holds"] for r in rows)


def test_vote_human_table_and_strict(labelled: Path) -> None:
    res = run("vote", str(labelled))
    assert res.returncode == 0, res.stderr
    assert "invariant" in res.stdout and "modes:" in res.stdout
    strict = run("vote", str(labelled), "--strict")
    assert strict.returncode == 1
    assert strict.stderr.startswith("error: case 'q0'") and "invariant 3" in strict.stderr
    assert "Traceback" not in strict.stderr


def test_bad_records_rejected_with_line_and_field(tmp_path: Path) -> None:
    good = json.dumps({"id": "ok", "votes": [_vote("a", "x"), _vote("b", "y")]})
    lines = [
        good,
        json.dumps({"id": "empty", "votes": []}),
        json.dumps({"id": "one", "votes": [_vote("a", "x")]}),
        '{"id": "nan", "votes": [{"agent": "a", "answer": "x", "evidence_source": "s", "evidence_present": true, "confidence": NaN}, '
        '{"agent": "b", "answer": "x", "evidence_source": "s", "evidence_present": true}]}',
        json.dumps({"id": "range", "votes": [_vote("a", "x", confidence=1.5), _vote("b", "x")]}),
        json.dumps({"id": "missing", "votes": [{"agent": "a", "answer": "x"}, _vote("b", "x")]}),
        "{not json",
    ]
    path = tmp_path / "votes.jsonl"
    path.write_text("\n".join(lines) + "\n")
    rejects = tmp_path / "rejects.jsonl"
    res = run("vote", str(path), "--json", "--rejects", str(rejects))
    assert res.returncode == 3
    assert [json.loads(x)["id"] for x in res.stdout.splitlines()] == ["ok"]
    found = [json.loads(x) for x in rejects.read_text().splitlines()]
    assert [(r["line"], r["field"]) for r in found] == [
        (2, "votes"),
        (3, "votes"),
        (4, "votes.0.confidence"),
        (5, "votes.0.confidence"),
        (6, "votes.0.evidence_source"),
        (7, "<json>"),
    ]
    assert f"{path}:2: field 'votes'" in res.stderr


def test_calibrate_requires_gold(tmp_path: Path) -> None:
    path = tmp_path / "nogold.jsonl"
    path.write_text(json.dumps({"id": "1", "votes": [_vote("a", "x"), _vote("b", "x")]}) + "\n")
    res = run("calibrate", str(path))
    assert res.returncode == 2
    assert "field 'gold'" in res.stderr and "no valid labelled case" in res.stderr


def test_usage_errors(tmp_path: Path, labelled: Path) -> None:
    assert run("vote", str(tmp_path / "missing.jsonl")).returncode == 2
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    res = run("vote", str(labelled), "--calibration", str(bad))
    assert res.returncode == 2 and "bad.json" in res.stderr and "field" in res.stderr


@pytest.mark.parametrize("field", ["beta_star", "beta_star_accuracy"])
def test_a_negative_beta_star_in_a_calibration_file_is_refused(
    labelled: Path, tmp_path: Path, field: str
) -> None:
    """``beta_star: -3`` was used: invariant 3 said "beta* = 0" beside the figure -3.0."""
    cal = tmp_path / "cal.json"
    assert run("calibrate", str(labelled), "--out", str(cal)).returncode == 0
    doc = json.loads(cal.read_text())
    doc[field] = -3
    cal.write_text(json.dumps(doc))
    res = run("vote", str(labelled), "--calibration", str(cal), "--json")
    assert (res.returncode, res.stdout) == (2, "")
    (line,) = res.stderr.splitlines()
    assert str(cal) in line and f"'{field}'" in line
    assert "greater than or equal to 0" in line


def test_unwritable_files_and_bad_numbers_are_usage_errors(tmp_path: Path, labelled: Path) -> None:
    nowhere = str(tmp_path / "no" / "such" / "dir" / "x.json")
    binary = tmp_path / "binary.json"
    binary.write_bytes(b'{"cases": "\xff"}')
    cases = [
        (("calibrate", str(labelled), "--out", nowhere), "cannot write the calibration file"),
        (("calibrate", str(labelled), "--rejects", nowhere), "cannot write the rejects file"),
        (("vote", str(labelled), "--rejects", nowhere), "cannot write the rejects file"),
        (("vote", str(labelled), "--calibration", str(binary)), "not UTF-8 text"),
        (("vote", str(labelled), "--beta", "inf"), "finite"),
        (("calibrate", str(labelled), "--beta-ref", "inf"), "finite"),
        (("calibrate", str(labelled), "--tolerance", "inf"), "finite"),
    ]
    for args, needle in cases:
        res = run(*args)
        assert res.returncode == 2, (args, res.stderr)
        assert needle in res.stderr, (args, res.stderr)
        assert "Traceback" not in res.stderr


def test_duplicate_voter_rejected_on_field_votes(tmp_path: Path) -> None:
    path = tmp_path / "dup.jsonl"
    path.write_text(
        json.dumps({"id": "d", "votes": [_vote("a", "x"), _vote("a", "y")]})
        + "\n"
        + json.dumps({"id": "ok", "votes": [_vote("a", "x"), _vote("b", "y")]})
        + "\n"
    )
    res = run("vote", str(path), "--json")
    assert res.returncode == 3
    assert f"{path}:1: field 'votes': duplicate agent id 'a'" in res.stderr
    assert [json.loads(x)["id"] for x in res.stdout.splitlines()] == ["ok"]


def test_vote_reads_stdin() -> None:
    line = json.dumps({"id": 7, "votes": [_vote("a", "x"), _vote("b", "x"), _vote("c", "y")]})
    res = run("vote", "-", "--json", stdin=line + "\n")
    assert res.returncode == 0, res.stderr
    row = json.loads(res.stdout)
    assert row["id"] == "7" and row["answer"] == "x" and row["mode"] == "majority"
    assert row["refusal"]["invariant"] == 1


def test_calibrate_with_a_large_beta_reference_is_finite_and_quiet(
    labelled: Path, tmp_path: Path
) -> None:
    """``--beta-ref 1000`` overflowed exp: RuntimeWarnings on stderr, NaN figures."""
    import os
    import sys

    src = str(Path(__file__).resolve().parent.parent / "src")
    env = {**os.environ, "PYTHONPATH": src, "PYTHONWARNINGS": "default"}
    for beta in ("1000", "1e300"):
        res = subprocess.run(
            [
                sys.executable,
                "-m",
                "dissensus",
                "calibrate",
                labelled,
                "--beta-ref",
                beta,
                "--json",
            ],
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )
        assert res.returncode == 0, res.stderr
        assert "Warning" not in res.stderr, res.stderr
        assert "NaN" not in res.stdout and "Infinity" not in res.stdout
        fit = json.loads(res.stdout)
        for stratum in fit["strata"]:
            figures = stratum["consensus"]
            if figures["cases"]:
                assert 0.0 <= figures["mean_confidence"] <= 1.0
                assert 0.0 <= figures["ece"] <= 1.0


def test_vote_records_carry_their_input_line_as_decide_records_do(tmp_path: Path) -> None:
    """Cases of one id are told apart by their line (docs/cli.md): ``vote --json`` had no
    ``line``. It is the 1-based line of the input, under decide's name, after the id;
    blank and rejected lines are counted. The rest of the record is the decision's."""
    case = {"id": "q", "votes": [_vote("a", "x"), _vote("b", "x"), _vote("c", "y")]}
    other = {"id": "r", "votes": [_vote("a", "y"), _vote("b", "y")]}
    lines = [json.dumps(case), "", "{not json", json.dumps(other), json.dumps(case)]
    path = tmp_path / "votes.jsonl"
    path.write_text("\n".join(lines) + "\n")
    res = run("vote", str(path), "--json")
    assert res.returncode == 3, res.stderr
    rows = [json.loads(line) for line in res.stdout.splitlines()]
    assert [(r["id"], r["line"]) for r in rows] == [("q", 1), ("r", 4), ("q", 5)]
    assert all(list(r)[:2] == ["id", "line"] for r in rows)
    from dissensus.guard import guard_case
    from dissensus.types import VoteCase

    alone = guard_case(VoteCase.model_validate(case)).model_dump(mode="json")
    assert {k: v for k, v in rows[0].items() if k != "line"} == alone
    piped = run("vote", "-", "--json", stdin="\n".join(lines) + "\n")
    assert [r["line"] for r in map(json.loads, piped.stdout.splitlines())] == [1, 4, 5]


@pytest.mark.parametrize(
    ("verifier", "hint"),
    [("Agent-A", "(did you mean 'agent-a'?)"), ("agent-x", "(did you mean"), ("zzz", None)],
)
@pytest.mark.parametrize("as_json", [True, False])
def test_a_verifier_no_case_has_is_said_once(
    tmp_path: Path, verifier: str, hint: str | None, as_json: bool
) -> None:
    """A misspelt --verifier (an agent id no voter has) vetoed nothing, silently: one
    warning names it and the closest agent id; the decisions are unchanged."""
    path = tmp_path / "v.jsonl"
    lines = [
        json.dumps({"id": f"c{i}", "votes": [_vote("agent-a", "yes"), _vote("agent-b", "no")]})
        for i in range(3)
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    flags = ["--json"] if as_json else []
    res = run("vote", str(path), "--verifier", verifier, *flags)
    plain = run("vote", str(path), *flags)
    assert res.returncode == 0, res.stderr
    if as_json:
        got = [(d["answer"], d["mode"]) for d in map(json.loads, res.stdout.splitlines())]
        assert got == [(d["answer"], d["mode"]) for d in map(json.loads, plain.stdout.splitlines())]
    warnings = [line for line in res.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1, res.stderr
    assert f"--verifier '{verifier}' voted in none of the 3 case(s)" in warnings[0]
    if hint is None:
        assert "did you mean" not in warnings[0]
    else:
        assert hint in warnings[0]
    ok = run("vote", str(path), "--verifier", "agent-a", *flags)
    assert "warning" not in ok.stderr


def test_calibrate_counts_a_repeated_case_once(tmp_path: Path) -> None:
    """A labelled file holding a case twice (``cat a.jsonl a.jsonl``) calibrated on each
    copy: every accuracy and stratum size counted it twice, so --min-stratum-cases held
    on half the cases. The first is kept, one warning per repeated id."""
    lines = _labelled_lines()
    once = tmp_path / "once.jsonl"
    once.write_text("\n".join(lines) + "\n", encoding="utf-8")
    twice = tmp_path / "twice.jsonl"
    twice.write_text("\n".join(lines + lines[:5]) + "\n", encoding="utf-8")
    want = run("calibrate", str(once), "--json")
    got = run("calibrate", str(twice), "--json")
    assert got.returncode == want.returncode == 0, got.stderr
    assert json.loads(got.stdout) == json.loads(want.stdout)
    warnings = got.stderr.splitlines()
    assert len(warnings) == 5, got.stderr
    first = json.loads(lines[0])["id"]
    assert warnings[0] == (
        f"warning: case id '{first}' appears 2 times (first at line 1): "
        "calibrating on the first only"
    )
    assert want.stderr == ""


def test_answers_and_gold_are_read_without_surrounding_whitespace(tmp_path: Path) -> None:
    """``vote`` took a blank answer ``" "`` as an answer, and ``"1 "`` as an answer other
    than ``"1"`` (the one a gold ``"1"`` names), while ``calibrate`` took a blank gold as
    a label. Both are stripped; a blank answer, and a blank gold for ``calibrate``, is a
    reject naming file, line and field."""
    path = tmp_path / "votes.jsonl"
    cases = [
        {"id": "c1", "votes": [_vote("a", "1 "), _vote("b", " 1"), _vote("c", "2")]},
        {"id": "c2", "votes": [_vote("a", "1"), _vote("b", " "), _vote("c", "2")]},
        {"id": "c3", "votes": [_vote("a", "\u3000y"), _vote("b", "y"), _vote("c", "n")]},
    ]
    path.write_text("".join(json.dumps(c) + "\n" for c in cases), encoding="utf-8")
    res = run("vote", str(path), "--json")
    assert res.returncode == 3, res.stderr
    records = [json.loads(line) for line in res.stdout.splitlines()]
    assert [r["id"] for r in records] == ["c1", "c3"]
    assert records[0]["answer"] == "1" and set(records[0]["probabilities"]) == {"1", "2"}
    assert records[1]["answer"] == "y" and set(records[1]["probabilities"]) == {"y", "n"}
    assert res.stderr.splitlines() == [
        f"rejected {path}:2: field 'votes.1.answer': the answer is blank (' ': whitespace only)"
    ]

    lines = _labelled_lines()
    spaced = [json.loads(line) for line in lines]
    for case in spaced:
        case["gold"] = f" {case['gold']} "
        case["votes"][0]["answer"] += " "
    plain = tmp_path / "plain.jsonl"
    plain.write_text("\n".join(lines) + "\n", encoding="utf-8")
    padded = tmp_path / "padded.jsonl"
    padded.write_text("".join(json.dumps(c) + "\n" for c in spaced), encoding="utf-8")
    want = run("calibrate", str(plain), "--json")
    got = run("calibrate", str(padded), "--json")
    assert got.returncode == want.returncode == 0, got.stderr
    assert json.loads(got.stdout) == json.loads(want.stdout)

    blank = dict(spaced[0], gold=" ")
    padded.write_text("\n".join([*lines, json.dumps(blank)]) + "\n", encoding="utf-8")
    res = run("calibrate", str(padded), "--json")
    assert res.returncode == 3
    assert res.stderr.splitlines() == [
        f"rejected {padded}:41: field 'gold': the gold answer is blank (' ': whitespace only)"
    ]
    ignored = run("vote", str(padded), "--json")  # vote ignores the gold
    assert ignored.returncode == 0, ignored.stderr


def test_a_calibration_of_another_panel_is_said_once(tmp_path: Path, labelled: Path) -> None:
    """A calibration none of whose agents voted in a case (one fitted on another panel)
    gave those voters its pooled reliability and its labels, silently: one warning counts
    the cases and names the agents it measured; the exit code and decisions are kept."""
    cal = tmp_path / "cal.json"
    assert run("calibrate", str(labelled), "--out", str(cal)).returncode == 0
    path = tmp_path / "v.jsonl"
    lines = [
        json.dumps({"id": "other", "votes": [_vote("x", "1"), _vote("y", "2")]}),
        json.dumps({"id": "mine", "votes": [_vote("a", "yes"), _vote("z", "no")]}),
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    res = run("vote", str(path), "--calibration", str(cal), "--json")
    assert res.returncode == 0, res.stderr
    assert len(res.stdout.splitlines()) == 2
    warnings = [line for line in res.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1, res.stderr
    assert "1 of the 2 case(s) had no voter it measured" in warnings[0]
    assert "'a', 'b', 'c'" in warnings[0]
    path.write_text(lines[1] + "\n", encoding="utf-8")
    mine = run("vote", str(path), "--calibration", str(cal))
    assert mine.returncode == 0 and "warning" not in mine.stderr


@pytest.mark.parametrize("command", ["vote", "calibrate"])
def test_a_case_over_the_record_bounds_is_a_reject_naming_its_field(
    tmp_path: Path, command: str
) -> None:
    """vote and calibrate read their own subclass of a vote case, which skipped the bounds
    of dissensus.io.limits: 3,000 voters were decided (seconds of pairwise work each) and
    a 40,000-character source accepted. Both are now rejects naming the field; the good
    lines are still read."""
    good = {"id": "ok", "votes": [_vote("a", "x"), _vote("b", "y")], "gold": "x"}
    many = {"id": "many", "votes": [_vote(f"a{i}", "x") for i in range(257)], "gold": "x"}
    wide = {"id": "wide", "votes": [_vote("a", "x", "s" * 40_000), _vote("b", "x")], "gold": "x"}
    path = tmp_path / "v.jsonl"
    path.write_text("\n".join(json.dumps(c) for c in (good, many, wide)) + "\n")
    res = run(command, str(path), "--json")
    assert res.returncode == 3, res.stderr
    assert "v.jsonl:2: field 'votes': 257 voters; at most 256 per case" in res.stderr
    assert "v.jsonl:3: field 'votes.0.evidence_source'" in res.stderr
    if command == "vote":
        assert [json.loads(line)["id"] for line in res.stdout.splitlines()] == ["ok"]
