"""``calibrate-acceptance`` on the inputs it reads: gold labels, strata, the split rule's
figures, its options and standard input.

* ``meta.gold`` is read as a label, as a decision is (``2.0`` -> ``"2"``, ``true`` ->
  ``"true"``); a gold that is not a label (a list, an object, an empty or blank string)
  is a reject naming ``meta.gold`` while the other lines calibrate, and so is a gold
  that is none of the case's options (a case without options keeps any gold).
* A stratum with too few calibration cases for a threshold ever to be tested in it is
  an error naming it (exit 2), and a reason listing strata is bounded.
* Stratum values are read as labels too: a null is the missing stratum, a list or an
  object is a reject naming the field; files written before keep their strata.
* ``--family-rule split`` reports the half its threshold was tested on.
* ``--run`` without ``--journal``, an empty ``--strata`` and ``--out -`` are usage
  errors; ``-`` reads the labelled panels from standard input.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cli_helpers import cli

REPO = Path(__file__).resolve().parent.parent
PANELS = REPO / "examples" / "llmbar-swap.jsonl"


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("inputs")
    (path / "p.yaml").write_text("reading:\n  similarity: tfidf\n")
    return path


def _lines() -> list[dict[str, Any]]:
    return [json.loads(x) for x in PANELS.read_text().splitlines()]


def _write(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def _calibrate(
    root: Path, src: Path | str, out: Path, *extra: str, stdin: bytes | None = None
) -> Any:
    return cli(
        "calibrate-acceptance", src, "--policy", root / "p.yaml", "--out", out,
        "--target-precision", "0.8", "--json", *extra, stdin=stdin,
    )  # fmt: skip


@pytest.fixture(scope="module")
def plain(root: Path) -> dict[str, Any]:
    """The summary of the example panels as written (string labels)."""
    res = _calibrate(root, PANELS, root / "plain.json")
    assert res.code == 0, res.err
    summary: dict[str, Any] = json.loads(res.out)
    assert summary["threshold"] is not None and summary["calibration_accepted"] > 0
    return summary


# --- gold -----------------------------------------------------------------------------


def _as_floats(record: dict[str, Any]) -> dict[str, Any]:
    record["meta"]["gold"] = float(record["meta"]["gold"])
    for out in record["outputs"]:
        if out["decision"] is not None:
            out["decision"] = float(out["decision"])
        reask = out.get("reask")
        if reask and reask.get("decision") is not None:
            reask["decision"] = float(reask["decision"])
    return record


def test_a_numeric_gold_is_matched_as_its_decision_is(root: Path, plain: dict[str, Any]) -> None:
    """Gold and decisions written as 2.0: both read "2" (the gold was "2.0", so every case
    was wrong and acceptance accepted nothing, exit 0)."""
    src = _write(root / "floats.jsonl", [_as_floats(r) for r in _lines()])
    res = _calibrate(root, src, root / "floats.json")
    assert res.code == 0, res.err
    got = json.loads(res.out)
    for key in ("threshold", "calibration_n", "calibration_accepted", "calibration_correct"):
        assert got[key] == plain[key], key


def test_a_boolean_gold_reads_as_a_boolean_decision_does(root: Path) -> None:
    records = _lines()
    for r in records:
        yes = r["meta"]["gold"] == "1"
        r["meta"]["gold"] = yes
        # Options "1" and "2" would make a gold true or false a reject: a free answer.
        del r["meta"]["options"]
        for out in r["outputs"]:
            if out["decision"] is not None:
                out["decision"] = out["decision"] == "1"
            if out.get("reask") and out["reask"].get("decision") is not None:
                out["reask"]["decision"] = "true" if out["reask"]["decision"] == "1" else "false"
    res = _calibrate(root, _write(root / "bools.jsonl", records), root / "bools.json")
    assert res.code == 0, res.err
    assert json.loads(res.out)["calibration_accepted"] > 0


BAD_GOLDS = [{"x": "2"}, ["2"], "", {}, [], "   ", "\t\n"]


def test_a_gold_that_is_not_a_label_is_a_reject_naming_the_field(root: Path) -> None:
    records = _lines()
    for k, gold in enumerate(BAD_GOLDS):
        records[k]["meta"]["gold"] = gold
    out = root / "badgold.json"
    res = _calibrate(root, _write(root / "badgold.jsonl", records), out)
    assert res.code == 3, res.err
    rejected = [x for x in res.err.splitlines() if x.startswith("rejected ")]
    assert len(rejected) == len(BAD_GOLDS), res.err
    for k, line in enumerate(rejected, start=1):
        assert line.startswith(f"rejected {root / 'badgold.jsonl'}:{k}: field 'meta.gold': "), line
    summary = json.loads(res.out)
    assert summary["rejected"] == len(BAD_GOLDS)
    assert summary["fitted_n"] == 150 - len(BAD_GOLDS)


@given(
    st.one_of(
        st.integers(-(10**20), 10**20),
        st.floats(allow_nan=False, allow_infinity=False),
        st.booleans(),
        st.text(min_size=1, max_size=5).filter(str.strip),
    )
)
def test_gold_is_normalised_exactly_as_a_decision(value: object) -> None:
    """A gold is read as a decision is: what one takes, the other takes alike; what a
    decision refuses (a control character), a gold refuses too."""
    from pydantic import ValidationError

    from dissensus.types import AgentOutput, gold_label

    try:
        decision = AgentOutput(agent="a", decision=value, reasoning="").decision
    except ValidationError:
        with pytest.raises(ValueError, match="control character"):
            gold_label({"gold": value})
        return
    assert gold_label({"gold": value}) == decision


def test_gold_label_reads_missing_and_refuses_what_is_not_a_label() -> None:
    from dissensus.types import gold_label

    assert gold_label({}) is None and gold_label({"gold": None}) is None
    assert gold_label({"gold": 2.0}) == "2" and gold_label({"gold": True}) == "true"
    for bad in BAD_GOLDS:
        with pytest.raises(ValueError):
            gold_label({"gold": bad})


@given(st.text(alphabet=" \t\n\r\u00a0\u2003\u3000", min_size=1, max_size=8))
def test_a_blank_gold_is_refused_as_the_empty_one_is(blank: str) -> None:
    """A gold of whitespace only names no decision; it was taken as the label ``"   "``."""
    from dissensus.types import gold_label

    with pytest.raises(ValueError, match="the gold decision is blank"):
        gold_label({"gold": blank})
    around = f" {blank}x"  # text around it: a label, unless it holds a control character
    if any(c < " " or "\x7f" <= c <= "\x9f" for c in blank):
        with pytest.raises(ValueError, match="control character"):
            gold_label({"gold": around})
    else:
        assert gold_label({"gold": around}) == around


def test_guard_calibration_refuses_an_empty_gold(tmp_path: Path) -> None:
    votes = [
        {"agent": a, "answer": "y", "evidence_source": "parametric", "evidence_present": True}
        for a in ("a", "b")
    ]
    src = tmp_path / "votes.jsonl"
    src.write_text(
        json.dumps({"id": "1", "votes": votes, "gold": ""})
        + "\n"
        + json.dumps({"id": "2", "votes": votes, "gold": "y"})
        + "\n"
    )
    res = cli("calibrate", src, "--out", tmp_path / "cal.json")
    assert "field 'gold'" in res.err and res.code in (2, 3), res.err


# --- strata ---------------------------------------------------------------------------


def test_a_tiny_stratum_is_refused_naming_it(root: Path) -> None:
    """One case in stratum "rare": no threshold could ever be tested there, so the
    calibration accepted nothing (exit 0), and the model scoring the common cases had
    been fitted on the single rare one."""
    records = _lines()
    for k, r in enumerate(records):
        r["meta"]["tiny"] = "rare" if k == 0 else "common"
    out = root / "tiny.json"
    res = _calibrate(root, _write(root / "tiny.jsonl", records), out, "--strata", "tiny")
    assert res.code == 2, res.out
    assert len(res.err.strip().splitlines()) == 1, res.err
    assert "'rare' (1 case)" in res.err and "'common'" not in res.err
    assert "merge" in res.err and "--strata" in res.err
    assert not out.exists()


def test_many_single_case_strata_are_named_in_a_bounded_line(root: Path) -> None:
    out = root / "ids.json"
    res = _calibrate(root, PANELS, out, "--strata", "index")
    assert res.code == 2, res.out
    (line,) = res.err.strip().splitlines()
    assert len(line) < 400 and " more" in line, line
    assert not out.exists()


def test_a_reason_naming_failed_strata_is_bounded() -> None:
    from dissensus.acceptance import select_threshold

    strata = [f"s{i:03d}" for i in range(200) for _ in range(40)]
    choice = select_threshold(
        [0.5] * len(strata), [False] * len(strata), target=0.9, delta=0.1,
        min_accepted=30, strata=strata,
    )  # fmt: skip
    assert choice.threshold is None
    assert len(choice.reason) < 300 and "and 195 more" in choice.reason, choice.reason


def test_stratum_values_are_read_as_labels() -> None:
    from dissensus.acceptance import stratum_of
    from dissensus.acceptance.calibrate import MISSING_STRATUM

    assert stratum_of({}, "s") == stratum_of({"s": None}, "s") == MISSING_STRATUM
    assert stratum_of({"s": 1}, "s") == stratum_of({"s": "1"}, "s") == "1"
    assert stratum_of({"s": 1.0}, "s") == "1" and stratum_of({"s": True}, "s") == "true"
    assert stratum_of({"s": "Natural"}, "s") == "Natural"
    assert stratum_of({"s": 1}, None) is None


def test_a_stratum_that_is_not_a_label_is_a_reject_naming_the_field(root: Path) -> None:
    """A list or an object was a stratum of its own (its str()); a null was "None", apart
    from the cases without the field ("(none)")."""
    from dissensus.acceptance import load_acceptance

    records = _lines()
    records[0]["meta"]["subset"] = {"x": 1}
    records[1]["meta"]["subset"] = ["Natural"]
    natural = [r for r in records[2:] if r["meta"]["subset"] == "Natural"]
    for k, r in enumerate(natural):  # half null, half without the field: one stratum
        if k % 2:
            r["meta"]["subset"] = None
        else:
            del r["meta"]["subset"]
    out = root / "badstrata.json"
    res = _calibrate(root, _write(root / "badstrata.jsonl", records), out, "--strata", "subset")
    rejected = [x for x in res.err.splitlines() if x.startswith("rejected ")]
    assert [x.split(": field ")[1][:15] for x in rejected] == ["'meta.subset': "] * 2, res.err
    assert res.code == 3, res.err
    names = {s.stratum for s in load_acceptance(out).strata}
    assert names == {"(none)", "Adversarial/Neighbor", "Adversarial/GPTInst"}


def test_files_written_before_keep_their_strata() -> None:
    """Strata were named by ``str()``: True -> "True", 1.0 -> "1.0", null -> "None". A file
    naming them still sends each case to the fold model that never saw its stratum."""
    from dissensus.acceptance import AcceptanceFile, model_for, stratum_of
    from dissensus.acceptance.fit import LogisticModel

    model = LogisticModel(features=[], mean=[], scale=[], coef=[], intercept=0.0)
    acc = AcceptanceFile(
        features=[], libraries={}, models=[model] * 5, threshold=None, threshold_reason="-",
        target_precision=0.9, delta=0.1, min_accepted=30, calibration_n=0,
        strata_field="s", fold_of_stratum={"True": 0, "False": 1, "1.0": 2, "None": 3, "7": 4},
    )  # fmt: skip
    for value, fold in [(True, 0), (False, 1), (1.0, 2), (1, 2), (None, 3), (7, 4), ("7", 4)]:
        assert model_for(acc, [], stratum_of({"s": value}, "s"), key="k") == fold, value


# --- the split rule -------------------------------------------------------------------


def test_the_split_rule_reports_the_half_its_threshold_was_tested_on(root: Path) -> None:
    from dissensus.acceptance import load_acceptance

    out = root / "split.json"
    res = _calibrate(root, PANELS, out, "--family-rule", "split")
    assert res.code == 0, res.err
    acc = load_acceptance(out)
    # 124 cases reach acceptance under the policy: 62 chose the family, 62 tested it.
    assert (acc.calibration_n, acc.selection_n, acc.fitted_n) == (62, 62, 150)
    assert acc.shift_reference is not None and len(acc.shift_reference.rows) == 124
    assert acc.calibration_accepted <= acc.calibration_n
    assert "the 62 calibration cases" in acc.guarantee()
    table = cli("calibrate-acceptance", PANELS, "--policy", root / "p.yaml", "--out", out,
                "--target-precision", "0.8", "--family-rule", "split")  # fmt: skip
    assert table.code == 0, table.err
    row = next(x for x in table.out.splitlines() if x.startswith("│ all "))
    assert row.split("│")[2].strip() == "62", table.out
    assert "62 of the 124" in table.out and "chose the score family" in table.out, table.out


def test_the_bonferroni_rule_reports_every_judged_case(root: Path, plain: dict[str, Any]) -> None:
    assert plain["calibration_n"] == 124 and plain.get("selection_n") is None


# --- options and standard input -------------------------------------------------------


def test_run_without_a_journal_is_a_usage_error(root: Path) -> None:
    res = _calibrate(root, PANELS, root / "run.json", "--run", "abc")
    assert res.code == 2 and res.out == ""
    (line,) = res.err.strip().splitlines()
    assert "--run" in line and "--journal" in line, line
    assert not (root / "run.json").exists()


def test_an_empty_strata_field_is_a_usage_error(root: Path) -> None:
    res = _calibrate(root, PANELS, root / "empty.json", "--strata", "")
    assert res.code == 2 and res.out == ""
    (line,) = res.err.strip().splitlines()
    assert "--strata" in line, line
    assert not (root / "empty.json").exists()


def test_out_dash_is_a_usage_error_not_a_file_named_dash(tmp_path: Path) -> None:
    """``--out -`` reads as standard output elsewhere; here standard output carries the
    report, so it is refused rather than written as a file called ``-``."""
    (tmp_path / "p.yaml").write_text("reading:\n  similarity: tfidf\n")
    res = cli(
        "calibrate-acceptance", PANELS, "--policy", "p.yaml", "--out", "-", cwd=tmp_path
    )  # fmt: skip
    assert res.code == 2 and res.out == "", res.out
    assert "--out" in res.err and "./-" in res.err, res.err
    assert not (tmp_path / "-").exists()


def test_labelled_panels_are_read_from_standard_input(root: Path, plain: dict[str, Any]) -> None:
    records = _lines()
    del records[3]["meta"]["gold"]
    data = "".join(json.dumps(r) + "\n" for r in records).encode()
    res = _calibrate(root, "-", root / "stdin.json", stdin=data)
    assert res.code == 3, res.err
    assert "rejected -:4: field 'meta.gold'" in res.err, res.err
    got = json.loads(res.out)
    assert got["fitted_n"] == 149 and got["threshold"] is not None


def test_a_code_similarity_backend_follows_the_policys_allow_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ``module:function`` similarity backend runs the user's code: the policy's
    ``allow_code: true`` allows it (as for decide), its absence refuses it (exit 2, naming
    the setting); calibration used to ignore the policy and need the environment."""
    monkeypatch.delenv("DISSENSUS_ALLOW_CODE", raising=False)
    for allowed, code in ((True, 0), (False, 2)):
        policy = tmp_path / f"p-{allowed}.yaml"
        policy.write_text(
            "reading:\n  similarity: 'slow_embed:counting'\n  theta_s: 0.5\n"
            + ("allow_code: true\n" if allowed else "")
        )
        res = cli(
            "calibrate-acceptance", PANELS, "--policy", policy, "--out", tmp_path / "a.json",
            "--target-precision", "0.8", "--json",
        )  # fmt: skip
        assert res.code == code, res.err
        if allowed:
            written = json.loads((tmp_path / "a.json").read_text())
            assert written["settings"]["similarity"] == "slow_embed:counting"
        else:
            assert "allow_code" in res.err and "Traceback" not in res.err, res.err


@pytest.mark.parametrize("gold", ["3", 3, "tie"])
def test_a_gold_outside_the_case_s_options_is_a_reject_naming_the_field(
    root: Path, plain: dict[str, Any], gold: object
) -> None:
    """A gold that is none of the case's options was calibrated on, every answer counted
    wrong; it is rejected like a gold that is no label, the good lines calibrated as
    without it. A panel without options (a free answer) keeps its gold."""
    records = _lines()
    records[2]["meta"]["gold"] = gold
    src = _write(root / "outside.jsonl", records)
    rejects = root / "outside-rejects.jsonl"
    res = _calibrate(root, src, root / "outside.json", "--rejects", str(rejects))
    assert res.code == 3, res.err
    said = f"rejected {src}:3: field 'meta.gold': '{gold}' is none of the case's options"
    assert said in res.err, res.err
    (reject,) = [json.loads(x) for x in rejects.read_text().splitlines()]
    assert (reject["line"], reject["field"]) == (3, "meta.gold")
    summary = json.loads(res.out)
    assert summary["rejected"] == 1 and summary["fitted_n"] == 149
    without = _write(root / "without.jsonl", records[:2] + records[3:])
    alone = json.loads(_calibrate(root, without, root / "without.json").out)
    for key in ("threshold", "calibration_n", "calibration_accepted", "calibration_correct"):
        assert summary[key] == alone[key], key
    # Without options, the same gold is calibrated on.
    free = _lines()
    for r in free:
        del r["meta"]["options"]
    free[2]["meta"]["gold"] = gold
    res = _calibrate(root, _write(root / "free.jsonl", free), root / "free.json")
    assert res.code == 0, res.err
    assert json.loads(res.out)["rejected"] == 0
