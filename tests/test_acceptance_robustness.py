"""Learned acceptance on hostile input: feature values, acceptance files, copies, writes.

* A feature value that is not finite or beyond ``FEATURE_BOUND`` (a user feature's
  ``NaN``, ``inf``, ``1e308``) is one error naming the panel and the feature at
  calibration (exit 2), and escalates that one case at decision time while the others
  are decided; nothing non-finite reaches a verdict or the journal.
* An acceptance file is read once by the strict loader (a byte order mark is skipped)
  and checked field by field: a re-hashed but inconsistent file is refused at load,
  naming the file and the field, before any case is decided.
* ``calibrate-acceptance`` counts each case once (a repeated id or a copy is dropped,
  with a warning), and the cross-fit keeps cases the caller marks as one in one fold.
* ``--out`` is written atomically: a failed write leaves the previous file whole.
"""

from __future__ import annotations

import copy
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cli_helpers import cli
from dissensus.errors import ConfigError
from dissensus.types import Panel

REPO = Path(__file__).resolve().parent.parent
PANELS = REPO / "examples" / "llmbar-swap.jsonl"
N = 60
SPEC = "test_acceptance_robustness:knob"

KNOB: dict[str, Any] = {"panel": None, "value": 0.0}
"""What :func:`knob` returns on the panel named ``panel`` (a finite value elsewhere)."""


def knob(panel: Panel) -> dict[str, Any]:
    """A user feature the tests steer: ``KNOB['value']`` on one panel."""
    if panel.id == KNOB["panel"]:
        return {"x": KNOB["value"]}
    return {"x": len(panel.outputs[0].reasoning) / 1000}


@pytest.fixture(autouse=True)
def _reset_knob() -> Any:
    KNOB.update(panel=None, value=0.0)
    yield
    KNOB.update(panel=None, value=0.0)


def _panels() -> list[Panel]:
    return [Panel.model_validate_json(x) for x in PANELS.read_text().splitlines()[:N]]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``A.json`` calibrated with the user feature :func:`knob` on the first 60 panels."""
    from dissensus.acceptance import FeatureSettings, calibrate, save_acceptance
    from dissensus.acceptance.prepare import prepare_cases
    from dissensus.states import get_backend

    root = tmp_path_factory.mktemp("robust")
    panels = _panels()
    settings_ = FeatureSettings(similarity="tfidf", user=[SPEC])
    cases = prepare_cases(panels, settings=settings_, backend=get_backend("tfidf"))
    golds = [str(p.meta["gold"]) for p in panels]
    save_acceptance(
        calibrate(cases, golds, target=0.8, delta=0.2, min_accepted=10, settings=settings_),
        root / "A.json",
    )
    (root / "few.jsonl").write_text("".join(PANELS.read_text().splitlines(keepends=True)[:N]))
    (root / "p.yaml").write_text(
        "reading:\n  similarity: tfidf\nseek_context:\n  followup: none\nallow_code: true\n"
    )
    return root


@pytest.fixture(scope="module")
def judged(workdir: Path) -> dict[str, Any]:
    """Readings and guard decisions of the panels, and the ids that reach acceptance."""
    from dissensus.acceptance.prepare import GuardInputs, acceptance_guard
    from dissensus.states import get_backend, read_panels

    panels = _panels()
    backend = get_backend("tfidf")
    readings = read_panels(panels, backend)
    guards = [acceptance_guard(p, GuardInputs()) for p in panels]
    return {"panels": panels, "readings": readings, "guards": guards, "backend": backend}


def _learned(path: Path, backend: Any) -> Any:
    from dissensus.acceptance.prepare import LearnedAcceptance

    return LearnedAcceptance.load(path, similarity="tfidf", sim_backend=backend, allow_code=True)


def _finite_json(obj: Any) -> None:
    json.dumps(obj, allow_nan=False)


# --- D3: feature values ---------------------------------------------------------------

BAD_VALUES = [float("nan"), float("inf"), float("-inf"), 1e308, -1e308, 1.5e100]


@pytest.mark.parametrize("value", BAD_VALUES, ids=repr)
def test_calibration_refuses_a_bad_user_feature_value_in_one_line(
    workdir: Path, tmp_path: Path, value: float
) -> None:
    panel = _panels()[7].id
    KNOB.update(panel=panel, value=value)
    out = tmp_path / "A.json"
    res = cli(
        "calibrate-acceptance", workdir / "few.jsonl", "--policy", workdir / "p.yaml",
        "--feature", SPEC, "--out", out,
    )  # fmt: skip
    assert res.code == 2, res.err
    assert len(res.err.strip().splitlines()) == 1 and "Traceback" not in res.err
    assert SPEC in res.err and repr(panel) in res.err and "'x'" in res.err
    assert not out.exists()


NOT_NUMBERS = ["1", "0.5", "nan", "", True, False, None, [1.0], {"v": 1.0}]


@pytest.mark.parametrize("value", NOT_NUMBERS, ids=repr)
def test_calibration_refuses_a_user_feature_value_that_is_no_number(
    workdir: Path, tmp_path: Path, value: Any
) -> None:
    """A string or a boolean was read by ``float()`` ("1" -> 1.0, True -> 1.0) in silence."""
    panel = _panels()[7].id
    KNOB.update(panel=panel, value=value)
    out = tmp_path / "A.json"
    res = cli(
        "calibrate-acceptance", workdir / "few.jsonl", "--policy", workdir / "p.yaml",
        "--feature", SPEC, "--out", out,
    )  # fmt: skip
    assert res.code == 2, res.err
    assert len(res.err.strip().splitlines()) == 1 and "Traceback" not in res.err
    assert SPEC in res.err and repr(panel) in res.err and "'x'" in res.err
    assert "not a number" in res.err, res.err
    assert not out.exists()


def _usable(value: object) -> bool:
    """Whether acceptance can use ``value`` as a feature value."""
    from dissensus.acceptance.features import FEATURE_BOUND

    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        number = float(value)
    except OverflowError:
        return False
    return math.isfinite(number) and abs(number) <= FEATURE_BOUND


@settings(max_examples=60)
@given(
    st.one_of(
        st.floats(),
        st.sampled_from([1e100, -1e100, 1.0000001e100, 1e101, 1e150, 1e308, -1e308]),
        st.integers(),
        st.sampled_from([10**100, 10**101, -(10**400)]),
        st.booleans(),
        st.text(max_size=4),
        st.none(),
    )
)
def test_any_user_feature_value_gives_a_finite_verdict_or_one_naming_the_feature(
    workdir: Path, judged: dict[str, Any], value: object
) -> None:
    """The guarantee at decision time: whatever a user feature returns on one panel, the
    verdict and the shift-check vector are finite (JSON without NaN), and a value
    acceptance cannot use (not finite, too large, or no number: a boolean, a string)
    escalates that case with the feature named."""
    learned = _learned(workdir / "A.json", judged["backend"])
    panel, reading, guard = judged["panels"][3], judged["readings"][3], judged["guards"][3]
    KNOB.update(panel=panel.id, value=value)
    verdict, vector = learned.judge_case(panel, reading=reading, guard=guard, second={})
    _finite_json(verdict.model_dump(mode="json"))
    _finite_json(vector)
    assert 0.0 <= verdict.score <= 1.0
    if _usable(value):
        assert isinstance(value, int | float)
        assert vector is not None and vector["user.x"] == float(value)
        assert "not judged" not in verdict.reason
    else:
        assert vector is None and not verdict.accepted and verdict.decision is None
        assert verdict.reason.startswith("not judged by learned acceptance")
        assert SPEC in verdict.reason and repr(panel.id) in verdict.reason


def test_library_calibration_refuses_non_finite_or_huge_rows() -> None:
    from dissensus.acceptance import Candidate, calibrate

    for bad in (float("nan"), float("inf"), 1e308):
        cases = [
            [
                Candidate(label="a", features={"f": float(i % 3), "g": bad if i == 5 else 1.0}),
                Candidate(label="b", features={"f": 1.0, "g": 0.0}),
            ]
            for i in range(40)
        ]
        with pytest.raises(ConfigError, match="case 5: feature g"):
            calibrate(cases, ["a"] * 40, target=0.8, delta=0.2, min_accepted=5)


def test_a_model_never_scores_nan() -> None:
    import numpy as np

    from dissensus.acceptance import LogisticModel

    model = LogisticModel(
        features=["a", "b"], mean=[0.0, 0.0], scale=[1e-300, 1e-300], coef=[1.0, -1.0], intercept=0
    )
    # (1e100 / 1e-300) overflows to inf in both columns: inf - inf is undefined.
    p = model.predict_matrix(np.array([[1e100, 1e100], [0.0, 0.0]]))
    assert np.isfinite(p).all() and p[0] < 1e-20


def _records(out: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def test_decide_escalates_the_one_case_and_decides_the_others(workdir: Path) -> None:
    from dissensus.pipeline.durable import case_step
    from dissensus.store.journal import Journal

    def decide(journal: Path) -> list[dict[str, Any]]:
        res = cli(
            "decide", workdir / "few.jsonl", "--policy", workdir / "p.yaml",
            "--acceptance", workdir / "A.json", "--journal", journal, "--json", "--run-id", "r",
        )  # fmt: skip
        assert res.code == 0, res.err
        return _records(res.out)

    before = decide(workdir / "ok.sqlite")
    assert len(before) == N
    judged = [r for r in before if r["acceptance"] is not None]
    assert judged, "some cases reach acceptance"
    target = judged[0]
    KNOB.update(panel=target["id"], value=float("nan"))
    after = decide(workdir / "nan.sqlite")
    assert len(after) == N
    for old, new in zip(before, after, strict=True):
        if old["id"] == target["id"]:
            assert new["action"] == "escalate" and not new["auto"]
            assert "not judged by learned acceptance" in new["reason"] and SPEC in new["reason"]
            assert new["acceptance"]["score"] == 0.0
        else:
            assert (new["action"], new["decision"], new["reason"]) == (
                old["action"],
                old["decision"],
                old["reason"],
            )
    with Journal(str(workdir / "nan.sqlite")) as jr:
        step = case_step(jr, "r", str(target["line"]), "acceptance")
    assert step is not None and step["vector"] is None


# --- D4: atomic --out -----------------------------------------------------------------

_FAILING_WRITE = """
import resource, sys
from dissensus.acceptance import load_acceptance, save_acceptance
from dissensus.io.atomic import OutputWriteError
acc = load_acceptance(sys.argv[1])
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
try:
    save_acceptance(acc.model_copy(update={"description": "refitted"}), sys.argv[1])
except OutputWriteError as exc:
    print(exc, exc.exit_code)
    sys.exit(3)
"""


@pytest.mark.skipif(sys.platform == "win32", reason="RLIMIT_FSIZE")
def test_a_failed_write_keeps_the_previous_file(workdir: Path, tmp_path: Path) -> None:
    import dissensus

    path = tmp_path / "ACCEPT.json"
    path.write_bytes((workdir / "A.json").read_bytes())
    before = path.read_bytes()
    assert len(before) > 4096
    src = str(Path(dissensus.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    res = subprocess.run(
        [sys.executable, "-c", _FAILING_WRITE, str(path)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert res.returncode == 3, res.stderr
    assert f"cannot write the output file {path}: File too large (EFBIG) 1" in res.stdout
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ACCEPT.json"]


# --- D5: a byte order mark ------------------------------------------------------------


def test_a_file_with_a_byte_order_mark_is_read_once_the_same_way(
    workdir: Path, tmp_path: Path
) -> None:
    from dissensus.acceptance import load_acceptance
    from dissensus.pipeline.learned import load_learned_data

    raw = (workdir / "A.json").read_bytes()
    bom = tmp_path / "bom.json"
    bom.write_bytes(b"\xef\xbb\xbf" + raw)
    assert load_acceptance(bom).sha256 == load_acceptance(workdir / "A.json").sha256
    data = load_learned_data(str(bom), None, policy_file=None, field="--acceptance")
    assert data == json.loads(raw)
    res = cli(
        "decide", workdir / "few.jsonl", "--policy", workdir / "p.yaml", "--acceptance", bom,
        "--journal", tmp_path / "j.sqlite", "--json",
    )  # fmt: skip
    assert res.code == 0, res.err
    assert len(_records(res.out)) == N


# --- D7: inconsistent but re-hashed files ---------------------------------------------


def _rehashed(data: dict[str, Any], path: Path) -> Path:
    from dissensus.acceptance import canonical_hash

    data = json.loads(json.dumps(data))
    data["sha256"] = canonical_hash(data)
    path.write_text(json.dumps(data, indent=1))
    return path


def _short_coef(d: dict[str, Any]) -> None:
    for m in d["models"]:
        m["coef"] = m["coef"][:-1]


def _ragged(d: dict[str, Any]) -> None:
    d["shift_reference"]["rows"][0] = d["shift_reference"]["rows"][0][:-1]


def _zero_scale(d: dict[str, Any]) -> None:
    for m in d["models"]:
        m["scale"] = [0.0] * len(m["scale"])


def _too_few_accepted(d: dict[str, Any]) -> None:
    few = d["min_accepted"] - 1
    d.update(threshold=0.5, error_upper=0.0, calibration_accepted=few, calibration_correct=few)


def _missing_fold(d: dict[str, Any]) -> None:
    d.update(strata_field="subset", fold_of_stratum={"x": 9})


def _no_reference(version: str) -> Any:
    """A tamper: no ``shift_reference`` field, in a file recording dissensus ``version``."""

    def tamper(d: dict[str, Any]) -> None:
        del d["shift_reference"]
        d["libraries"]["dissensus"] = version

    return tamper


TAMPERED = [
    pytest.param("models.0", _short_coef, id="coef-shorter-than-features"),
    pytest.param("family", lambda d: d.update(family="bogus"), id="unknown-family"),
    pytest.param("fold_of_stratum.x", _missing_fold, id="missing-fold"),
    pytest.param("shift_reference.rows.0", _ragged, id="ragged-shift-reference"),
    pytest.param("models.0", _zero_scale, id="zero-scale"),
    pytest.param("delta", lambda d: d.update(delta=-1), id="negative-delta"),
    pytest.param("target_precision", lambda d: d.update(target_precision=7), id="target-7"),
    pytest.param(
        "calibration_accepted",
        lambda d: d.update(calibration_correct=d["calibration_n"] + 1),
        id="more-correct-than-cases",
    ),
    pytest.param("threshold", lambda d: d.update(threshold=1.5), id="threshold-above-1"),
    # Numbers are numbers: a quoted number or a boolean was read as its conversion.
    pytest.param("threshold", lambda d: d.update(threshold="0.5"), id="quoted-threshold"),
    pytest.param("delta", lambda d: d.update(delta=True), id="boolean-delta"),
    pytest.param("calibration_n", lambda d: d.update(calibration_n="60"), id="quoted-count"),
    pytest.param(
        "models.0.intercept", lambda d: d["models"][0].update(intercept="1"), id="quoted-coef"
    ),
    # The shift reference holds one row per calibration case: with none, the check said
    # it kept 0 cases while the guarantee cited 60; with 300 copies of one row, every
    # run of the calibration distribution looked shifted.
    pytest.param(
        "shift_reference.rows", lambda d: d["shift_reference"].update(rows=[]), id="no-rows"
    ),
    pytest.param(
        "shift_reference.rows",
        lambda d: d["shift_reference"].update(rows=[d["shift_reference"]["rows"][0]] * 300),
        id="copied-rows",
    ),
    # As many rows as cases, all one row: every run of fresh cases looked shifted.
    pytest.param(
        "shift_reference.rows",
        lambda d: d["shift_reference"].update(
            rows=[d["shift_reference"]["rows"][0]] * len(d["shift_reference"]["rows"])
        ),
        id="rows-all-one-row",
    ),
    # A null reference turned the shift check off, and nothing said so.
    pytest.param("shift_reference", lambda d: d.update(shift_reference=None), id="null-reference"),
    # So did a deleted one, in a file whose version writes it: it read as a file written
    # before the check.
    pytest.param("shift_reference", _no_reference("0.3.0"), id="no-reference-0.3.0"),
    pytest.param("shift_reference", _no_reference("1.0.0rc1"), id="no-reference-1.0.0rc1"),
    pytest.param("selection_n", lambda d: d.update(selection_n=3), id="selection-without-split"),
    # A threshold whose own figures fail the test that would have chosen it.
    pytest.param(
        "error_upper", lambda d: d.update(threshold=0.5, error_upper=0.9), id="bound-fails"
    ),
    pytest.param("calibration_accepted", _too_few_accepted, id="fewer-than-min-accepted"),
    # A claim the file's own counts refute: its bound is recomputed from them, and its
    # threshold is the one its reason and its family's figures state. Each was accepted,
    # and the monitor then aimed at the edited target.
    pytest.param(
        "error_upper",
        lambda d: d.update(target_precision=0.99, error_upper=0.005),
        id="target-and-bound-claimed-higher",
    ),
    pytest.param("error_upper", lambda d: d.update(error_upper=d["error_upper"] / 2), id="bound"),
    pytest.param("threshold", lambda d: d.update(threshold=0.0), id="threshold-0"),
    pytest.param("target_precision", lambda d: d.update(target_precision=0.75), id="target"),
    pytest.param("families", lambda d: d.update(delta=0.01), id="delta-claimed-smaller"),
    pytest.param(
        "error_upper",
        lambda d: d.update(calibration_accepted=d["calibration_accepted"] + 1),
        id="one-more-accepted",
    ),
]


@pytest.mark.parametrize(("field", "tamper"), TAMPERED)
def test_an_inconsistent_rehashed_file_is_refused_before_any_case(
    workdir: Path, tmp_path: Path, field: str, tamper: Any
) -> None:
    from dissensus.acceptance import load_acceptance

    data = json.loads((workdir / "A.json").read_text())
    tamper(data)
    path = _rehashed(data, tmp_path / "T.json")
    with pytest.raises(ConfigError) as info:
        load_acceptance(path)
    assert info.value.file == str(path) and info.value.field == field
    journal = tmp_path / "j.sqlite"
    res = cli(
        "decide", workdir / "few.jsonl", "--policy", workdir / "p.yaml", "--acceptance", path,
        "--journal", journal, "--json",
    )  # fmt: skip
    assert res.code == 2 and res.out == ""
    assert len(res.err.strip().splitlines()) == 1 and "Traceback" not in res.err
    assert str(path) in res.err and repr(field) in res.err
    listed = cli("runs", "list", "--journal", journal, "--json")
    assert listed.out.strip() == ""


def test_a_file_written_before_the_shift_check_says_its_check_is_off(
    workdir: Path, tmp_path: Path
) -> None:
    """A file without the shift_reference field (written before the check) still decides,
    and the run says on one line that it is not shift-checked (the check was off in
    silence)."""
    from dissensus.acceptance import load_acceptance

    data = json.loads((workdir / "A.json").read_text())
    del data["shift_reference"]
    data["libraries"]["dissensus"] = "0.1.0"  # the version that wrote files before the check
    path = _rehashed(data, tmp_path / "old.json")
    assert load_acceptance(path).shift_reference is None
    args = ["decide", workdir / "few.jsonl", "--policy", workdir / "p.yaml", "--acceptance", path]
    res = cli(*args, "--journal", tmp_path / "j.sqlite")
    assert res.code == 0, res.err
    said = [x for x in res.out.splitlines() if "shift check is off" in x]
    assert len(said) == 1 and "written before the shift check" in said[0], res.out
    res = cli(*args, "--journal", tmp_path / "j2.sqlite", "--json")
    assert res.code == 0, res.err
    assert len(_records(res.out)) == N
    assert res.err.count("warning: The shift check is off for this run") == 1, res.err
    # A file that keeps its reference says nothing of the kind.
    res = cli(*args[:-1], workdir / "A.json", "--journal", tmp_path / "j3.sqlite")
    assert res.code == 0 and "shift check is off" not in res.out + res.err


@pytest.mark.parametrize("version", [None, "unknown", "0.1.0", "0.1.0.dev2"])
def test_a_file_without_reference_loads_when_its_version_may_predate_the_check(
    workdir: Path, tmp_path: Path, version: str | None
) -> None:
    """Only 0.1.0 wrote files before the shift check; a file recording no version (or
    ``unknown``) cannot be told from one of those, and loads as they do."""
    from dissensus.acceptance import load_acceptance

    data = json.loads((workdir / "A.json").read_text())
    del data["shift_reference"]
    if version is None:
        del data["libraries"]["dissensus"]
    else:
        data["libraries"]["dissensus"] = version
    assert load_acceptance(_rehashed(data, tmp_path / "old.json")).shift_reference is None


def test_a_missing_reference_is_refused_naming_the_version(workdir: Path, tmp_path: Path) -> None:
    from dissensus.acceptance import load_acceptance

    data = json.loads((workdir / "A.json").read_text())
    _no_reference("0.3.0")(data)
    path = _rehashed(data, tmp_path / "T.json")
    with pytest.raises(ConfigError) as info:
        load_acceptance(path)
    said = str(info.value)
    assert str(path) in said and "shift_reference" in said and "dissensus 0.3.0" in said, said
    assert "written before the check" in said, said


def test_a_boolean_delta_is_refused_as_not_a_number(workdir: Path, tmp_path: Path) -> None:
    """It was read as 1.0 and refused as "should be less than 1"."""
    from dissensus.acceptance import load_acceptance

    data = json.loads((workdir / "A.json").read_text())
    data["delta"] = True
    with pytest.raises(ConfigError) as info:
        load_acceptance(_rehashed(data, tmp_path / "T.json"))
    assert info.value.field == "delta" and "valid number" in str(info.value), str(info.value)


def test_files_written_before_still_load() -> None:
    from dissensus.acceptance import load_acceptance

    acc = load_acceptance(REPO / "examples" / "llmbar-accept.json")
    assert acc.shift_reference is not None
    assert len(acc.shift_reference.rows) == acc.calibration_n and acc.selection_n is None


def test_a_run_s_copy_of_the_file_is_read_as_it_was_written(workdir: Path) -> None:
    """A run started by an earlier version, whose checks were looser, still resumes: the
    copy it journalled is read by conversion, its shift reference's size unchecked."""
    from dissensus.acceptance import canonical_hash, validate_acceptance
    from dissensus.pipeline.learned import make_learned

    data = json.loads((workdir / "A.json").read_text())
    data["min_accepted"] = "10"
    data["shift_reference"]["rows"] = data["shift_reference"]["rows"][:20]
    data["sha256"] = canonical_hash(data)
    with pytest.raises(ConfigError):
        validate_acceptance(data)
    acc = validate_acceptance(data, journalled=True)
    assert acc.min_accepted == 10
    assert (
        make_learned(data, similarity="tfidf", backend=None, allow_code=True).file.min_accepted
        == 10
    )


_LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 10**6),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([-1.0, 0.0, 0.5, 1.0, 2.0, 1e-320, 1e101, 1e308, -1e308]),
    st.text(max_size=4),
    st.just([]),
    st.just({}),
)


_FOCUS = [
    *["models"] * 8,
    *["shift_reference"] * 3,
    *["family", "threshold", "delta", "target_precision", "fold_of_stratum"] * 2,
    *["calibration_correct", "calibration_accepted", "strata_field", "families"],
]
"""Fields drawn more often than the rest (what scoring and the shift check read)."""


def _corrupt(data: dict[str, Any], draw: st.DataObject) -> str:
    """Replace one value of ``data`` (a random path from the root) and say where."""
    node: Any = data
    key: Any = draw.draw(st.sampled_from([*data, *_FOCUS]))
    path = [str(key)]
    while True:
        child = node[key]
        inner = (
            list(child)
            if isinstance(child, dict)
            else list(range(len(child)))
            if isinstance(child, list)
            else []
        )
        if inner and draw.draw(st.integers(0, 2)) > 0:
            node, key = child, draw.draw(st.sampled_from(inner))
            path.append(str(key))
            continue
        how = draw.draw(st.sampled_from(["value", "value", "shorter", "longer", "entry"]))
        if how == "shorter" and isinstance(child, list) and child:
            node[key] = child[:-1]
        elif how == "longer" and isinstance(child, list) and child:
            node[key] = [*child, copy.deepcopy(child[-1])]
        elif how == "entry" and isinstance(child, dict):
            node[key] = {**child, draw.draw(st.text(max_size=3)): draw.draw(_LEAVES)}
        else:
            node[key] = draw.draw(_LEAVES)
        return ".".join(path)


@settings(max_examples=60)
@given(st.data())
def test_a_corrupted_rehashed_file_is_refused_or_decides_cleanly(
    workdir: Path, judged: dict[str, Any], tmp_path_factory: pytest.TempPathFactory, draw: Any
) -> None:
    """Any single-field corruption of a valid file, re-hashed: refused at load with a
    ConfigError, or every case is judged with finite figures and the shift check runs."""
    from dissensus.acceptance.shift import shift_check_vectors
    from dissensus.pipeline.learned import guarantee_sentence
    from dissensus.types import AcceptanceFigures

    data = json.loads((workdir / "A.json").read_text())
    where = _corrupt(data, draw)
    path = _rehashed(data, tmp_path_factory.mktemp("c") / "C.json")
    try:
        learned = _learned(path, judged["backend"])
    except ConfigError:
        return
    vectors = []
    for panel, reading, guard in list(
        zip(judged["panels"], judged["readings"], judged["guards"], strict=True)
    )[:12]:
        verdict, vector = learned.judge_case(panel, reading=reading, guard=guard, second={})
        _finite_json([verdict.model_dump(mode="json"), vector])
        assert 0.0 <= verdict.score <= 1.0, where
        figures = AcceptanceFigures.model_validate(
            verdict.model_dump(include=set(AcceptanceFigures.model_fields))
        )
        guarantee_sentence(figures)
        if vector is not None:
            vectors.append(vector)
    learned.file.guarantee()
    if learned.file.shift_reference is not None:
        check = shift_check_vectors(learned.file.shift_reference, vectors)
        _finite_json(check.model_dump(mode="json"))


# --- D6: each case counts once --------------------------------------------------------


def _calibrate(workdir: Path, src: Path, out: Path, *extra: str | Path) -> Any:
    return cli(
        "calibrate-acceptance", src, "--policy", workdir / "p.yaml", "--out", out,
        "--target-precision", "0.8", "--delta", "0.2", "--min-accepted", "10", "--json", *extra,
    )  # fmt: skip


def test_a_repeated_panel_counts_once(workdir: Path, tmp_path: Path) -> None:
    from dissensus.acceptance import load_acceptance

    lines = (workdir / "few.jsonl").read_text().splitlines(keepends=True)
    once = _calibrate(workdir, workdir / "few.jsonl", tmp_path / "once.json")
    assert once.code == 0, once.err
    tripled = tmp_path / "tripled.jsonl"
    tripled.write_text("".join(lines * 3))
    res = _calibrate(workdir, tripled, tmp_path / "three.json")
    assert res.code == 0, res.err
    summary = json.loads(res.out)
    assert summary["fitted_n"] == N and summary["duplicates"] == 2 * N
    warnings = [x for x in res.err.splitlines() if x.startswith("warning: panel id")]
    assert len(warnings) == N  # one per repeated id
    a, b = load_acceptance(tmp_path / "once.json"), load_acceptance(tmp_path / "three.json")
    assert (a.threshold, a.models, a.calibration_accepted) == (
        b.threshold,
        b.models,
        b.calibration_accepted,
    )
    assert f"{2 * N} repeated panel(s) dropped" in b.built_from[0]


def test_a_copy_under_another_id_counts_once(workdir: Path, tmp_path: Path) -> None:
    lines = (workdir / "few.jsonl").read_text().splitlines()
    copy_ = json.loads(lines[4])
    first = copy_["id"]
    copy_["id"] = "copy"
    src = tmp_path / "copied.jsonl"
    src.write_text("\n".join([*lines, json.dumps(copy_)]) + "\n")
    res = _calibrate(workdir, src, tmp_path / "A.json")
    assert res.code == 0, res.err
    assert json.loads(res.out)["fitted_n"] == N
    assert "'copy'" in res.err and repr(first) in res.err


def test_a_copy_differing_only_in_a_meta_key_nothing_reads_counts_once(
    workdir: Path, tmp_path: Path
) -> None:
    """Every panel again under a new id with one more meta key: each judged near copy is
    fitted on but counted once among the calibration cases (eight near copies of each
    case counted eight times in the guarantee's bound)."""
    lines = (workdir / "few.jsonl").read_text().splitlines()
    base = json.loads(_calibrate(workdir, workdir / "few.jsonl", tmp_path / "A.json").out)
    near = []
    for k, line in enumerate(lines):
        data = json.loads(line)
        near.append(json.dumps({**data, "id": f"near-{k}", "meta": {**data["meta"], "batch": k}}))
    src = tmp_path / "near.jsonl"
    src.write_text("\n".join([*lines, *near]) + "\n")
    res = _calibrate(workdir, src, tmp_path / "B.json")
    assert res.code == 0, res.err
    summary = json.loads(res.out)
    assert summary["duplicates"] == 0 and summary["fitted_n"] == 2 * N
    assert summary["calibration_n"] == base["calibration_n"] == summary["near_copies"]
    assert res.err.count("in everything acceptance reads") == summary["near_copies"]


@pytest.mark.parametrize(("copies", "key"), [(1, "batch"), (3, "source_tag")])
def test_near_copies_by_a_meta_key_nothing_reads_share_the_original_s_fold(
    workdir: Path, tmp_path: Path, copies: int, key: str
) -> None:
    """Every panel ``copies`` more times under new ids, differing only in a meta key
    nothing reads: each near copy falls in its original's cross-fit fold, so the file's
    threshold, counts and bound are those of a calibration told which cases are one. In
    another fold, the original was scored by a model fitted on its copy: every judged
    case accepted, the bound measured on scores out of fold in name only."""
    from dissensus.acceptance import calibrate, load_acceptance
    from dissensus.cli.acceptance import _policy_inputs
    from dissensus.cli.acceptance_cases import gather, judged_once

    lines = (workdir / "few.jsonl").read_text().splitlines()
    near = []
    for i in range(copies):
        for k, line in enumerate(lines):
            data = json.loads(line)
            meta = {**data["meta"], key: f"{key}-{i}"}
            near.append(json.dumps({**data, "id": f"near-{i}-{k}", "meta": meta}))
    src = tmp_path / "near.jsonl"
    src.write_text("\n".join([*lines, *near]) + "\n")
    out = tmp_path / "B.json"
    res = _calibrate(workdir, src, out)
    assert res.code == 0, res.err
    summary = json.loads(res.out)
    assert summary["fitted_n"] == (copies + 1) * N and summary["duplicates"] == 0
    assert summary["near_copies"] == copies * summary["calibration_n"]

    # The same cases calibrated with each near copy marked as its original's case.
    inputs = _policy_inputs(
        str(workdir / "p.yaml"), out=str(out), rejects=None, reasoning=False, markers=False,
        feature=None,
    )  # fmt: skip
    got = gather(inputs, labelled=str(src), journal=None, run=None, strata=None, rejects=None)
    judged, _ = judged_once(got.read, got.judged, None, whole_meta=False)
    told = calibrate(
        got.cases, got.golds, target=0.8, delta=0.2, min_accepted=10, judged=judged,
        keys=[str(k % N) for k in range(len(got.cases))],
    )  # fmt: skip
    written = load_acceptance(out)
    figures = ("threshold", "calibration_n", "calibration_accepted", "calibration_correct")
    assert {f: getattr(written, f) for f in figures} == {f: getattr(told, f) for f in figures}
    assert written.error_upper == told.error_upper
    assert written.calibration_accepted < summary["calibration_n"]
    assert got.keys == got.keys[:N] * (copies + 1)


def test_the_fold_key_is_what_acceptance_reads_but_the_gold() -> None:
    """A meta key nothing reads, or the gold, leaves a panel's fold key as it is; what
    acceptance reads (an output, the options, the stratum; with user features any meta
    key) changes it. It is the digest near copies are counted once by."""
    from dissensus.cli.acceptance_cases import _read_digest, panel_key

    for panel in _panels()[:5]:
        data = panel.model_dump(mode="json")

        def twin(meta: dict[str, Any], outputs: Any = None, data: Any = data) -> Panel:
            return Panel.model_validate(
                {**data, "id": "twin", "meta": meta, "outputs": outputs or data["outputs"]}
            )

        key = panel_key(panel)
        batch = twin({**data["meta"], "batch": 3, "source": "elsewhere"})
        assert panel_key(batch) == key
        assert (
            panel_key(twin({**data["meta"], "gold": "1" if panel.meta["gold"] == "2" else "2"}))
            == key
        )
        assert panel_key(batch, None, True) != panel_key(panel, None, True)
        assert panel_key(batch, "stratum") == panel_key(panel, "stratum")
        assert panel_key(twin({**data["meta"], "stratum": "b"}), "stratum") != panel_key(
            panel, "stratum"
        )
        options = {**data["meta"]["options"], "1": data["meta"]["options"]["1"] + " more"}
        assert panel_key(twin({**data["meta"], "options": options})) != key
        outputs = [{**o, "decision": "1"} for o in data["outputs"]]
        if any(o.decision != "1" for o in panel.outputs):
            assert panel_key(twin(data["meta"], outputs)) != key
        for strata in (None, "stratum"):
            for whole in (False, True):
                assert _read_digest(panel, strata, whole, gold=False) == panel_key(
                    panel, strata, whole
                )


def _respaced(text: str, k: int) -> str:
    """``text`` with its whitespace changed the ``k``-th way (a trailing space, a doubled
    space, a tab and a newline for a space)."""
    ways = [text + " ", text.replace(" ", "  ", 1), "\t" + text.replace(" ", "\n", 2)]
    return ways[k % len(ways)]


def test_a_copy_differing_only_in_whitespace_counts_once(workdir: Path, tmp_path: Path) -> None:
    """Every panel again under a new id, each reasoning with its whitespace changed:
    dropped as copies (they were new cases, and the bound counted each case twice). With a
    meta key nothing reads added too, each judged one is a near copy, counted once."""
    lines = (workdir / "few.jsonl").read_text().splitlines()
    base = json.loads(_calibrate(workdir, workdir / "few.jsonl", tmp_path / "A.json").out)
    respaced, near = [], []
    for k, line in enumerate(lines):
        data = json.loads(line)
        outputs = [
            {**o, "reasoning": _respaced(o["reasoning"], k + j)}
            for j, o in enumerate(data["outputs"])
        ]
        respaced.append(json.dumps({**data, "id": f"ws-{k}", "outputs": outputs}))
        meta = {**data["meta"], "batch": k}
        near.append(json.dumps({**data, "id": f"near-{k}", "outputs": outputs, "meta": meta}))
    src = tmp_path / "respaced.jsonl"
    src.write_text("\n".join([*lines, *respaced]) + "\n")
    res = _calibrate(workdir, src, tmp_path / "B.json")
    assert res.code == 0, res.err
    summary = json.loads(res.out)
    assert summary["duplicates"] == N and summary["fitted_n"] == N
    assert summary["calibration_n"] == base["calibration_n"]
    assert res.err.count("is a copy of panel") == N
    src.write_text("\n".join([*lines, *near]) + "\n")
    res = _calibrate(workdir, src, tmp_path / "C.json")
    assert res.code == 0, res.err
    summary = json.loads(res.out)
    assert summary["duplicates"] == 0 and summary["fitted_n"] == 2 * N
    assert summary["calibration_n"] == base["calibration_n"] == summary["near_copies"]


def test_copies_in_whitespace_share_a_cross_fit_fold() -> None:
    from dissensus.cli.acceptance import panel_key

    for k, panel in enumerate(_panels()[:10]):
        data = panel.model_dump(mode="json")
        outputs = [{**o, "reasoning": _respaced(o["reasoning"], k)} for o in data["outputs"]]
        twin = Panel.model_validate({**data, "id": "twin", "outputs": outputs})
        assert twin.outputs != panel.outputs and panel_key(twin) == panel_key(panel)


def test_a_twin_the_routing_rules_escalate_by_a_meta_key_is_no_copy(
    workdir: Path, tmp_path: Path
) -> None:
    """A rule reading meta.risk escalates the high-risk twin of each case: only the
    low-risk one is judged, so it is calibrated on, not dropped as a copy of its twin."""
    lines = (workdir / "few.jsonl").read_text().splitlines()
    base = json.loads(_calibrate(workdir, workdir / "few.jsonl", tmp_path / "A.json").out)
    twins = []
    for k, line in enumerate(lines):
        data = json.loads(line)
        for risk in ("high", "low"):
            meta = {**data["meta"], "risk": risk}
            twins.append(json.dumps({**data, "id": f"{risk}-{k}", "meta": meta}))
    src = tmp_path / "twins.jsonl"
    src.write_text("\n".join(twins) + "\n")
    policy = tmp_path / "risk.yaml"
    policy.write_text(
        (workdir / "p.yaml").read_text()
        + "routing:\n  rules:\n    - id: risky\n      priority: 10\n"
        + '      condition: meta.risk == "high"\n      action: escalate\n'
    )
    res = cli(
        "calibrate-acceptance", src, "--policy", policy, "--out", tmp_path / "B.json",
        "--target-precision", "0.8", "--delta", "0.2", "--min-accepted", "10", "--json",
    )  # fmt: skip
    assert res.code == 0, res.err
    summary = json.loads(res.out)
    assert summary["near_copies"] == 0 and summary["duplicates"] == 0
    assert summary["calibration_n"] == base["calibration_n"] and summary["fitted_n"] == 2 * N


def test_the_journal_s_cases_already_in_the_file_count_once(workdir: Path, tmp_path: Path) -> None:
    from dissensus.pipeline.review import list_items, resolve
    from dissensus.store.journal import Journal

    journal = tmp_path / "j.sqlite"
    res = cli(
        "decide", workdir / "few.jsonl", "--policy", workdir / "p.yaml", "--journal", journal,
        "--run-id", "r1",
    )  # fmt: skip
    assert res.code == 0, res.err
    golds = {p.id: str(p.meta["gold"]) for p in _panels()}
    with Journal(str(journal)) as jr:
        items = [s.item for s in list_items(jr)][:5]
        for item in items:
            resolve(jr, item.review_id, decision=golds[item.id], note="gold")
    out = tmp_path / "A.json"
    res = _calibrate(workdir, workdir / "few.jsonl", out, "--journal", journal)
    assert res.code == 0, res.err
    summary = json.loads(res.out)
    assert summary["fitted_n"] == N and summary["duplicates"] == len(items) == 5
    assert sum("appears more than once (review" in x for x in res.err.splitlines()) == 5


@given(st.lists(st.integers(0, 7), min_size=2, max_size=40), st.integers(0, 3))
def test_cases_marked_as_one_share_a_fold(keys: list[int], seed: int) -> None:
    from dissensus.acceptance import Candidate, crossfit

    cases = [
        [
            Candidate(label="a", features={"f": float((i * 7) % 5), "g": float(k)}),
            Candidate(label="b", features={"f": 1.0, "g": 0.0}),
        ]
        for i, k in enumerate(keys)
    ]
    golds = ["a" if i % 3 else "b" for i in range(len(keys))]
    fitted = crossfit(cases, golds, keys=[str(k) for k in keys], seed=seed)
    if len(set(keys)) >= 2:
        fold = {}
        for k, f in zip(keys, fitted.fold_of_case, strict=True):
            assert fold.setdefault(k, f) == f
    # With every key distinct, the folds and scores are those without keys.
    plain = crossfit(cases, golds, seed=seed)
    distinct = crossfit(cases, golds, keys=[str(i) for i in range(len(keys))], seed=seed)
    assert distinct.fold_of_case == plain.fold_of_case and distinct.scores == plain.scores


# --- D8 -------------------------------------------------------------------------------


def test_the_bound_module_states_the_step_the_code_takes() -> None:
    from dissensus.acceptance import bound

    assert f"n / {bound.CountGrid().steps}" in (bound.__doc__ or "")
    assert "n / 20" not in (bound.__doc__ or "")


def test_a_calibration_too_small_to_test_any_threshold_says_so(tmp_path: Path) -> None:
    """Five labelled panels can never pass the test (38 accepted cases at 0.9 / 0.1): the
    file is written (it accepts nothing) and a warning says why, not just "no threshold"."""
    from dissensus.acceptance import load_acceptance

    src = REPO / "examples" / "llmbar-swap.jsonl"
    policy = tmp_path / "p.yaml"
    policy.write_text("reading:\n  similarity: tfidf\n")
    few = tmp_path / "few.jsonl"
    few.write_text("".join(src.read_text().splitlines(keepends=True)[:5]))
    res = cli("calibrate-acceptance", few, "--policy", policy, "--out", tmp_path / "A.json")
    assert res.code == 0 and (tmp_path / "A.json").exists()
    warning = " ".join(res.err.split())
    # 39: the learned family tests at its share of delta, 0.09 (38 would do at 0.1).
    assert "fewer than the 39 a threshold must accept to be tested" in warning
    refused = load_acceptance(tmp_path / "A.json")
    assert refused.threshold is None
    # The level is the learned family's share of delta (0.9 of 0.1), said as a share.
    assert "at level 0.09 (the share of delta this test spends)" in refused.threshold_reason
    enough = cli(
        "calibrate-acceptance", src, "--policy", policy, "--out", tmp_path / "B.json",
        "--target-precision", "0.8",
    )  # fmt: skip
    assert enough.code == 0 and "must accept to be tested" not in enough.err


def test_calibration_rejects_and_warnings_name_the_line_after_blank_lines(
    tmp_path: Path, repo_root: Path
) -> None:
    """Blank lines are skipped: counting the records put an unlabelled case two lines
    early, and its reject in the rejects file had no raw line."""
    lines = (repo_root / "examples" / "llmbar-cot.jsonl").read_text(encoding="utf-8").splitlines()
    unlabelled = json.loads(lines[40])
    unlabelled["id"] = "X"
    del unlabelled["meta"]["gold"]
    body = [*lines[:40], "", "", json.dumps(unlabelled), lines[5], *lines[41:60]]
    src = tmp_path / "blank.jsonl"
    src.write_text("\n".join(body) + "\n", encoding="utf-8")
    res = cli("calibrate-acceptance", src, "--out", tmp_path / "a.json",
              "--rejects", tmp_path / "r.jsonl")  # fmt: skip
    assert f"rejected {src}:43: field 'meta.gold'" in res.err, res.err
    assert "appears more than once (line 44)" in res.err, res.err
    (reject,) = [json.loads(x) for x in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert reject["line"] == 43 and json.loads(reject["raw"])["id"] == "X"
