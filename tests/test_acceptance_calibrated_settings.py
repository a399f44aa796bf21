"""An acceptance file records the reading thresholds and guard settings its features were
computed with (``settings.reading`` / ``settings.guard``), and a run whose policy reads or
guards otherwise is refused when its specification is built, naming the policy's field."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from cli_helpers import cli
from dissensus.errors import ConfigError
from dissensus.pipeline import RunSpec
from dissensus.pipeline.policy import policy_from_dict

REPO = Path(__file__).resolve().parent.parent
PANELS = REPO / "examples" / "llmbar-swap.jsonl"
FIRST = json.loads(PANELS.read_text(encoding="utf-8").splitlines()[0])


def _guard_file(path: Path, flip: int) -> Path:
    """A guard calibration (``dissensus calibrate``); ``flip`` more cases change it."""
    from dissensus.guard import fit_reliability
    from dissensus.types import Vote, VoteCase

    cases = [
        VoteCase(
            id=str(i),
            votes=[
                Vote(
                    agent=agent,
                    answer="1" if (i + k) % 4 else "2",
                    evidence_source=f"kb:{k}",
                    evidence_present=True,
                )
                for k, agent in enumerate(("a1", "a2", "a3"))
            ],
            gold="1",
        )
        for i in range(24 + flip)
    ]
    path.write_text(fit_reliability(cases).model_dump_json(), encoding="utf-8")
    return path


def _policy(path: Path, **sections: dict[str, Any]) -> Path:
    data: dict[str, Any] = {"reading": {"similarity": "tfidf"}}
    for name, section in sections.items():
        data[name] = {**data.get(name, {}), **section}
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``A.json`` calibrated by the CLI under ``p03.yaml`` (tfidf, theta_s 0.3);
    ``G.json`` under ``guarded.yaml`` (tfidf's default theta_s, guard calibration
    ``g1.json``, an option changed)."""
    root = tmp_path_factory.mktemp("accset")
    _guard_file(root / "g1.json", 0)
    _guard_file(root / "g2.json", 1)
    _policy(root / "p03.yaml", reading={"theta_s": 0.3})
    guarded = {"calibration": "g1.json", "options": {"max_fallback_agreement": 0.9}}
    _policy(root / "guarded.yaml", guard=guarded)
    for policy, out in (("p03.yaml", "A.json"), ("guarded.yaml", "G.json")):
        res = cli(
            "calibrate-acceptance", PANELS, "--policy", root / policy, "--out", root / out,
            "--target-precision", "0.8", "--json",
        )  # fmt: skip
        assert res.code == 0, res.err
    return root


def _refused(source: Any, field: str, **kwargs: Any) -> ConfigError:
    with pytest.raises(ConfigError) as err:
        RunSpec.from_policy(source, **kwargs)
    assert err.value.field == field, str(err.value)
    return err.value


def test_calibrate_acceptance_records_the_reading_and_guard_it_computed_with(world: Path) -> None:
    from dissensus.acceptance import canonical_hash, load_acceptance
    from dissensus.guard import GuardThresholds
    from dissensus.pipeline.spec import file_sha256

    acc = load_acceptance(world / "A.json")  # the sha256 covers the records
    assert acc.settings.reading is not None and acc.settings.guard is not None
    assert (acc.settings.reading.theta_s, acc.settings.reading.theta_a) == (0.3, 0.8)
    assert acc.settings.guard.enabled and acc.settings.guard.calibration_sha256 is None
    assert acc.settings.guard.options == GuardThresholds().model_dump(mode="json")
    guarded = load_acceptance(world / "G.json").settings
    assert guarded.reading is not None and guarded.reading.theta_s == 0.39  # tfidf's default
    assert guarded.guard is not None
    assert guarded.guard.calibration_sha256 == file_sha256(world / "g1.json")
    assert guarded.guard.options["max_fallback_agreement"] == 0.9
    data = json.loads((world / "A.json").read_text(encoding="utf-8"))
    assert data["sha256"] == canonical_hash(data)
    # An edited record no longer matches the file's sha256.
    data["settings"]["reading"]["theta_s"] = 0.5
    edited = world / "edited.json"
    edited.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(ConfigError, match="does not match its sha256"):
        load_acceptance(edited)


def test_deciding_with_another_theta_s_is_refused_naming_the_field(world: Path) -> None:
    from dissensus.pipeline import decide

    p05 = _policy(world / "p05.yaml", reading={"theta_s": 0.5})
    res = cli(
        "decide", PANELS, "--policy", p05, "--acceptance", world / "A.json",
        "--journal", world / "refused.sqlite",
    )  # fmt: skip
    assert res.code == 2
    assert f"{p05}: field 'reading.theta_s': the acceptance file was calibrated with " in res.err
    assert "theta_s 0.3, this policy reads with 0.5: its features would not mean the same; " in (
        " ".join(res.err.split())
    )
    assert "calibrate-acceptance --policy" in " ".join(res.err.split())
    assert not (world / "refused.sqlite").exists()  # refused before any run
    # The library's decide, with the file named by the policy.
    data = {"reading": {"similarity": "tfidf", "theta_s": 0.5}}
    data["acceptance"] = {"model": str(world / "A.json")}
    with pytest.raises(ConfigError, match=r"calibrated with theta_s 0\.3") as err:
        decide(FIRST, data)
    assert err.value.field == "reading.theta_s"
    # The omitted theta_s reads with tfidf's default (0.39): refused too, saying so.
    omitted = {"reading": {"similarity": "tfidf"}}
    refused = _refused(omitted, "reading.theta_s", acceptance=world / "A.json")
    assert "0.39 (the default of tfidf)" in str(refused)
    theta_a = {"reading": {"similarity": "tfidf", "theta_s": 0.3, "theta_a": 0.6}}
    _refused(theta_a, "reading.theta_a", acceptance=world / "A.json")


def test_the_same_settings_decide(world: Path) -> None:
    from dissensus.pipeline import decide

    res = cli(
        "decide", PANELS, "--policy", world / "p03.yaml", "--acceptance", world / "A.json",
        "--journal", world / "same.sqlite", "-o", world / "same.jsonl",
    )  # fmt: skip
    assert res.code == 0, res.err
    records = [json.loads(x) for x in (world / "same.jsonl").read_text().splitlines()]
    assert len(records) == 150 and any(r["acceptance"] for r in records)
    data = {"reading": {"similarity": "tfidf", "theta_s": 0.3}}
    data["acceptance"] = {"model": str(world / "A.json")}
    assert decide(FIRST, data).state
    # The default written out and the default omitted are one setting.
    for reading in ({"similarity": "tfidf"}, {"similarity": "tfidf", "theta_s": 0.39}):
        written = _policy(world / "written.yaml", reading=reading, guard={
            "calibration": "g1.json", "options": {"max_fallback_agreement": 0.9}})  # fmt: skip
        assert RunSpec.from_policy(written, acceptance=world / "G.json").acceptance is not None


def test_other_guard_settings_are_refused(world: Path) -> None:
    acc = world / "G.json"
    same = {"calibration": "g1.json", "options": {"max_fallback_agreement": 0.9}}
    option = _policy(world / "o.yaml", guard={**same, "options": {"max_fallback_agreement": 0.8}})
    err = _refused(option, "guard.options.max_fallback_agreement", acceptance=acc)
    assert "guard option max_fallback_agreement 0.9, this policy's guard uses 0.8" in str(err)
    assert str(option) in str(err)
    omitted = _policy(world / "om.yaml", guard={"calibration": "g1.json"})  # the default 0.85
    _refused(omitted, "guard.options.max_fallback_agreement", acceptance=acc)
    other = _policy(world / "g.yaml", guard={**same, "calibration": "g2.json"})
    _refused(other, "guard.calibration", acceptance=acc)
    none = _policy(world / "n.yaml", guard={**same, "calibration": None})
    _refused(none, "guard.calibration", acceptance=acc)
    off = _policy(world / "off.yaml", guard={**same, "enabled": False})
    _refused(off, "guard.enabled", acceptance=acc)
    # A file calibrated without a guard calibration refuses a policy naming one.
    named = _policy(
        world / "named.yaml", reading={"theta_s": 0.3}, guard={"calibration": "g1.json"}
    )
    _refused(named, "guard.calibration", acceptance=world / "A.json")
    # The same bytes elsewhere are the same guard calibration.
    (world / "elsewhere").mkdir(exist_ok=True)
    shutil.copy(world / "g1.json", world / "elsewhere" / "g1.json")
    moved = {**same, "calibration": str(world / "elsewhere" / "g1.json")}
    assert RunSpec.from_policy(_policy(world / "m.yaml", guard=moved), acceptance=acc).acceptance


def test_a_file_without_the_records_is_accepted_as_before(tmp_path: Path) -> None:
    from dissensus.acceptance import FeatureSettings, calibrate, save_acceptance
    from dissensus.acceptance.prepare import prepare_cases
    from dissensus.states import get_backend
    from dissensus.types import Panel

    panels = [Panel.model_validate_json(x) for x in PANELS.read_text().splitlines()]
    fs = FeatureSettings(similarity="tfidf")
    cases = prepare_cases(panels, settings=fs, backend=get_backend("tfidf"))
    golds = [str(p.meta["gold"]) for p in panels]
    acc = calibrate(cases, golds, target=0.8, delta=0.2, min_accepted=20, settings=fs)
    saved = save_acceptance(acc, tmp_path / "old.json")
    data = json.loads((tmp_path / "old.json").read_text(encoding="utf-8"))
    assert set(data["settings"]) == {"similarity", "reasoning", "markers", "user"}
    assert saved.settings.reading is None and saved.settings.guard is None
    other = {
        "reading": {"similarity": "tfidf", "theta_s": 0.1, "theta_a": 0.6},
        "guard": {"enabled": False, "options": {"max_fallback_agreement": 0.5}},
    }
    assert RunSpec.from_policy(other, acceptance=tmp_path / "old.json").acceptance is not None
    # The bundled example (written before the records) with another theta_s.
    example = policy_from_dict({"reading": {"theta_s": 0.2}})
    spec = RunSpec.from_policy(example, acceptance=REPO / "examples" / "llmbar-accept.json")
    assert spec.acceptance is not None


def test_a_recorded_guard_option_out_of_range_is_refused_naming_it(tmp_path: Path) -> None:
    from dissensus.acceptance import canonical_hash, load_acceptance

    shutil.copy(REPO / "examples" / "llmbar-accept.json", tmp_path / "a.json")
    data = json.loads((tmp_path / "a.json").read_text(encoding="utf-8"))
    data["settings"]["guard"] = {"enabled": True, "options": {"max_fallback_agreement": 2}}
    data["sha256"] = canonical_hash(data)
    (tmp_path / "a.json").write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        load_acceptance(tmp_path / "a.json")
    assert err.value.field == "settings.guard.options.max_fallback_agreement"
    data["settings"]["guard"] = {"enabled": True, "options": {}, "calibration_sha256": "x"}
    data["settings"]["reading"] = {"theta_s": 0.5, "theta_a": 0.8}
    data["sha256"] = canonical_hash(data)
    (tmp_path / "a.json").write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        load_acceptance(tmp_path / "a.json")
    assert err.value.field == "settings.guard.calibration_sha256"


def test_two_disabled_guards_compare_equal_whatever_their_options() -> None:
    from dissensus.acceptance import FeatureSettings
    from dissensus.acceptance.prepare import calibrated_settings, check_calibrated_settings

    off = policy_from_dict({"guard": {"enabled": False, "calibration": "g.json"}})
    reading, guard = calibrated_settings(off, guard_calibration_sha256="0" * 64)
    recorded = FeatureSettings(reading=reading, guard=guard)
    other = policy_from_dict({"guard": {"enabled": False, "options": {"min_sources": 3}}})
    check_calibrated_settings(recorded, other, guard_calibration_sha256=None)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    backend=st.sampled_from(["tfidf", "minilm", "all-MiniLM-L6-v2", "static"]),
    calibrated=st.one_of(st.none(), st.sampled_from([0.3, 0.39, 0.5, 0.86, 0.87])),
    deciding=st.one_of(st.none(), st.sampled_from([0.3, 0.39, 0.5, 0.86, 0.87])),
)
def test_a_policy_is_refused_exactly_when_its_effective_theta_s_differs(
    backend: str, calibrated: float | None, deciding: float | None
) -> None:
    """The guarantee: the check refuses a policy iff the thresholds it reads with (the
    backend's default where it gives none) differ from calibration's."""
    from dissensus.acceptance import FeatureSettings
    from dissensus.acceptance.prepare import calibrated_settings, check_calibrated_settings
    from dissensus.states.reading import Thresholds

    def policy(theta: float | None) -> Any:
        return policy_from_dict({"reading": {"similarity": backend, "theta_s": theta}})

    reading, guard = calibrated_settings(policy(calibrated))
    recorded = FeatureSettings(similarity=backend, reading=reading, guard=guard)
    then = Thresholds.for_similarity(backend, calibrated).theta_s
    now = Thresholds.for_similarity(backend, deciding).theta_s
    if then == now:
        check_calibrated_settings(recorded, policy(deciding), guard_calibration_sha256=None)
    else:
        with pytest.raises(ConfigError) as err:
            check_calibrated_settings(recorded, policy(deciding), guard_calibration_sha256=None)
        assert err.value.field == "reading.theta_s"


def test_thresholds_for_a_similarity_name_are_its_backends() -> None:
    from dissensus.states.encoder import MINILM_NAME
    from dissensus.states.reading import DEFAULT_THETA_S, Thresholds
    from dissensus.states.static import STATIC_NAME

    for name, model in (
        ("minilm", MINILM_NAME),
        ("sentence-transformers/all-MiniLM-L6-v2", MINILM_NAME),
        ("static", STATIC_NAME),
        ("TFIDF", "tfidf"),
    ):
        assert Thresholds.for_similarity(name).theta_s == DEFAULT_THETA_S[model]
    with pytest.raises(ConfigError, match="no default theta_s"):
        Thresholds.for_similarity("json:dumps")


def test_the_service_and_the_chat_door_refuse_it_too(world: Path) -> None:
    """``dissensus serve --policy`` and the chat door build their specification as every
    door does: another theta_s is refused before they answer anything."""
    from dissensus.panels.door import PanelChat
    from dissensus.serve import ServeSettings
    from dissensus.serve.service import Service
    from dissensus.store.journal import Journal
    from serve_helpers import write_tokens

    policy = _policy(
        world / "served.yaml", reading={"theta_s": 0.5}, acceptance={"model": "A.json"}
    )
    served = ServeSettings(
        journal=str(world / "served.sqlite"),
        policy=str(policy),
        tokens=str(write_tokens(world / "tokens.txt")),
    )
    with Journal(":memory:") as journal:
        with pytest.raises(ConfigError) as err:
            Service(served, journal)
        assert err.value.field == "reading.theta_s"
        chat = policy_from_dict(
            {
                "reading": {"similarity": "tfidf", "theta_s": 0.5},
                "acceptance": {"model": str(world / "A.json")},
            }
        )
        with pytest.raises(ConfigError) as err:
            PanelChat(chat, journal=journal)
        assert err.value.field == "reading.theta_s"


def test_a_guard_calibration_object_is_refused_beside_a_file_recording_its_guard(
    world: Path,
) -> None:
    """``decide(guard_calibration=...)`` passes an object the recorded sha256 cannot be
    compared with: refused, naming the argument; a file without the records takes it."""
    from dissensus.guard import ReliabilityFit
    from dissensus.pipeline import decide

    fit = ReliabilityFit.model_validate_json((world / "g1.json").read_text(encoding="utf-8"))
    data = {"reading": {"similarity": "tfidf", "theta_s": 0.3}}
    data["acceptance"] = {"model": str(world / "A.json")}
    with pytest.raises(ConfigError, match="name the file in the policy") as err:
        decide(FIRST, data, guard_calibration=fit)
    assert err.value.field == "guard_calibration"
    data = {"reading": {"similarity": "minilm"}}
    data["acceptance"] = {"model": str(REPO / "examples" / "llmbar-accept.json")}
    assert decide(FIRST, data, guard_calibration=fit).state


def test_deciding_without_the_second_answers_calibration_had_is_refused(world: Path) -> None:
    """A file calibrated on panels with re-asks (the re-ask and order-stability features)
    was used by a run with no follow-up, or with ``use_recorded: false`` and no model:
    every case scored as if no agent had been re-asked, and commits went on under the
    file's stated guarantee. The file now records whether its cases had second answers
    (``settings.reask``) and a run that would not have them is refused, naming the field;
    so is one that would have them beside a file calibrated without."""
    from dissensus.acceptance import canonical_hash, load_acceptance
    from dissensus.pipeline import decide

    assert load_acceptance(world / "A.json").settings.reask is True
    same = {"reading": {"similarity": "tfidf", "theta_s": 0.3}}
    for sc, field in (
        ({"followup": "none"}, "seek_context.followup"),
        ({"followup": "dci"}, "seek_context.followup"),
        ({"max_followups": 0}, "seek_context.max_followups"),
        ({"use_recorded": False}, "seek_context.use_recorded"),
    ):
        refused = _refused(
            {**same, "seek_context": sc}, field, acceptance=world / "A.json", environ={}
        )
        assert "calibrated with second answers" in str(refused)
    data = {**same, "seek_context": {"followup": "none"}}
    with pytest.raises(ConfigError, match="calibrated with second answers") as err:
        decide(FIRST, {**data, "acceptance": {"model": str(world / "A.json")}})
    assert err.value.field == "seek_context.followup"
    none = _policy(world / "none.yaml", reading={"theta_s": 0.3}, seek_context={"followup": "none"})
    res = cli(
        "decide", PANELS, "--policy", none, "--acceptance", world / "A.json",
        "--journal", world / "noreask.sqlite",
    )  # fmt: skip
    assert res.code == 2
    assert f"{none}: field 'seek_context.followup': the acceptance file was calibrated " in res.err
    assert not (world / "noreask.sqlite").exists()  # refused before any run
    # Calibrated without re-asks, decided with them: refused the other way round.
    out = world / "N.json"
    res = cli("calibrate-acceptance", PANELS, "--policy", none, "--out", out,
              "--target-precision", "0.8", "--json")  # fmt: skip
    assert res.code == 0, res.err
    assert load_acceptance(out).settings.reask is False
    assert RunSpec.from_policy(none, acceptance=out).acceptance is not None
    refused = _refused(same, "seek_context.followup", acceptance=out, environ={})
    assert "calibrated without second answers" in str(refused)
    # A file that does not record it (written before it was) is not compared.
    old = json.loads((world / "A.json").read_text(encoding="utf-8"))
    del old["settings"]["reask"]
    old["sha256"] = canonical_hash(old)
    (world / "unrecorded.json").write_text(json.dumps(old), encoding="utf-8")
    unrecorded = world / "unrecorded.json"
    assert RunSpec.from_policy(data, acceptance=unrecorded, environ={}).acceptance is not None


def test_calibration_reads_recorded_reasks_only_where_decide_would_have_them(
    tmp_path: Path,
) -> None:
    """``calibrate-acceptance`` read every panel's recorded re-asks whatever the policy;
    ``decide`` has second answers only from a re-ask follow-up that uses them (or a
    model): with ``use_recorded: false`` and no model, the file's features had re-asks
    its decisions never do, and the run's own shift check flagged the very panels it was
    calibrated on (AUC 1.00). Calibration now follows the policy."""
    swap = Path(__file__).resolve().parent.parent / "examples" / "llmbar-swap.jsonl"
    flags: dict[str, float] = {}
    specs: dict[str, Any] = {}
    for name, sc in (
        ("recorded", {}),
        ("unused", {"use_recorded": False}),
        ("none", {"followup": "none"}),
    ):
        pol = _policy(
            tmp_path / f"{name}.yaml",
            reading={"similarity": "tfidf"},
            seek_context=sc,
        )
        out = tmp_path / f"{name}.json"
        res = cli("calibrate-acceptance", swap, "--policy", pol, "--target-precision", "0.6",
                  "--min-accepted", "10", "--out", out)  # fmt: skip
        assert res.code == 0, res.err
        data = json.loads(out.read_text(encoding="utf-8"))
        ref = data["shift_reference"]
        column = ref["features"].index("panel.has_reask")
        flags[name] = max(row[column] for row in ref["rows"])
        specs[name] = policy_from_dict(yaml.safe_load(pol.read_text(encoding="utf-8")))
    assert flags == {"recorded": 1.0, "unused": 0.0, "none": 0.0}
    from dissensus.pipeline.gates import second_answers_under

    assert {n: second_answers_under(s, {}) for n, s in specs.items()} == {
        "recorded": True,
        "unused": False,
        "none": False,
    }
    unused = policy_from_dict({"seek_context": {"use_recorded": False}})
    assert second_answers_under(unused, {"DISSENSUS_MODEL": "scripted:x.yaml"})


# -- calibrate-acceptance --journal: the runs' own readings and guard decisions ---------------


def _resolved_run(journal: Path, policy: Path, run_id: str, *, resolve: bool = True) -> None:
    """Run ``run_id`` of ``journal``: the panels decided under ``policy`` (without follow-ups,
    every case to review), every review resolved with the panel's gold when ``resolve``."""
    from dissensus.pipeline.review import list_items
    from dissensus.pipeline.review import resolve as resolve_item
    from dissensus.store.journal import Journal

    res = cli(
        "decide", PANELS, "--policy", policy, "--journal", journal, "--run-id", run_id,
        "-o", journal.with_suffix(f".{run_id}.jsonl"),
    )  # fmt: skip
    assert res.code == 0, res.err
    if not resolve:
        return
    golds = [json.loads(x)["meta"]["gold"] for x in PANELS.read_text().splitlines()]
    with Journal(str(journal)) as jr:
        for status in list_items(jr, run_id=run_id):
            item = status.item
            resolve_item(jr, item.review_id, decision=str(golds[item.line - 1]), note="gold")


def _calibrate(journal: Path, policy: Path, out: Path, *more: Any) -> Any:
    return cli(
        "calibrate-acceptance", "--journal", journal, "--policy", policy, "--out", out,
        "--target-precision", "0.8", *more,
    )  # fmt: skip


@pytest.fixture(scope="module")
def runs(world: Path) -> Path:
    """``runs.sqlite``: run ``r03`` decided under ``j03.yaml`` (theta_s 0.3) and ``r05``
    under ``j05.yaml`` (theta_s 0.5), every review resolved; ``r05-open`` under
    ``j05.yaml`` with no review resolved."""
    _policy(world / "j03.yaml", reading={"theta_s": 0.3}, seek_context={"followup": "none"})
    _policy(world / "j05.yaml", reading={"theta_s": 0.5}, seek_context={"followup": "none"})
    journal = world / "runs.sqlite"
    _resolved_run(journal, world / "j03.yaml", "r03")
    _resolved_run(journal, world / "j05.yaml", "r05")
    _resolved_run(journal, world / "j05.yaml", "r05-open", resolve=False)
    return journal


def test_calibrating_on_runs_read_otherwise_than_the_policy_is_refused(
    world: Path, runs: Path
) -> None:
    """The cases' readings are the runs' own (theta_s 0.5) and the file recorded
    ``--policy``'s (0.3): a run deciding with it under 0.3 was accepted, its features
    meaning another reading. Refused now, naming the run and the field, nothing written."""
    out, rejects = world / "J.json", world / "J.rejects.jsonl"
    res = _calibrate(runs, world / "j03.yaml", out, "--rejects", rejects)
    assert res.code == 2, res.err
    assert (
        "run 'r05': field 'reading.theta_s': the run read with 0.5, --policy reads with 0.3; "
        "calibrate with the policy the runs used"
    ) in " ".join(res.err.split())
    assert not out.exists() and not rejects.exists()
    # Only the runs calibrated on are compared: r03 alone, with its own policy.
    res = _calibrate(runs, world / "j03.yaml", out, "--run", "r03", "--json")
    assert res.code == 0, res.err
    from dissensus.acceptance import load_acceptance

    reading = load_acceptance(out).settings.reading
    assert reading is not None and reading.theta_s == 0.3
    # r05 with its own policy; r05-open (another policy, no case) is not compared.
    res = _calibrate(runs, world / "j05.yaml", out, "--run", "r05", "--run", "r05-open")
    assert res.code == 0, res.err
    reading = load_acceptance(out).settings.reading
    assert reading is not None and reading.theta_s == 0.5


@pytest.mark.parametrize(
    ("run_guard", "policy_guard", "field", "said"),
    [
        (
            {"calibration": "g1.json"},
            {"calibration": "g2.json"},
            "guard.calibration",
            "the run's guard calibration was g1.json (sha256 ",
        ),
        (
            {},
            {"options": {"max_fallback_agreement": 0.9}},
            "guard.options.max_fallback_agreement",
            "the run's guard used 0.85, --policy's uses 0.9",
        ),
        (
            {"enabled": False},
            {},
            "guard.enabled",
            "the run's guard was disabled, --policy's is enabled",
        ),
    ],
)
def test_calibrating_on_runs_guarded_otherwise_than_the_policy_is_refused(
    tmp_path: Path,
    world: Path,
    run_guard: dict[str, Any],
    policy_guard: dict[str, Any],
    field: str,
    said: str,
) -> None:
    for name in ("g1.json", "g2.json"):
        shutil.copy(world / name, tmp_path / name)
    reading = {"theta_s": 0.3}
    followup = {"followup": "none"}
    ran = _policy(tmp_path / "ran.yaml", reading=reading, seek_context=followup, guard=run_guard)
    cal = _policy(tmp_path / "cal.yaml", reading=reading, seek_context=followup, guard=policy_guard)
    journal = tmp_path / "j.sqlite"
    _resolved_run(journal, ran, "r1")
    res = _calibrate(journal, cal, tmp_path / "A.json")
    assert res.code == 2, res.err
    err = " ".join(res.err.split())
    assert f"run 'r1': field '{field}': {said}" in err, err
    assert err.endswith("calibrate with the policy the runs used"), err
    assert not (tmp_path / "A.json").exists()


def test_a_run_without_a_recorded_policy_is_not_compared(
    tmp_path: Path, world: Path, runs: Path
) -> None:
    """A run whose ``run.started`` records no policy (an older journal) says nothing to
    compare: its cases are calibrated on as before."""
    from dissensus.acceptance import load_acceptance
    from dissensus.store import event_types as ev
    from dissensus.store.journal import Journal

    decided = tmp_path / "decided.sqlite"
    _resolved_run(decided, world / "j05.yaml", "r05")
    older = tmp_path / "older.sqlite"
    with Journal(str(decided)) as src, Journal(str(older)) as dst:
        events = list(src.events("r05"))
        first = events[0]
        assert first.type == ev.RUN_STARTED
        started = {"input": first.payload["input"]}
        dst.create_run("old", kind="decide", meta={}, first=(ev.RUN_STARTED, started, first.key))
        for event in events[1:]:
            dst.append("old", event.type, event.payload, key=event.key, case=event.case)
    res = _calibrate(older, world / "j03.yaml", tmp_path / "A.json")
    assert res.code == 0, res.err
    reading = load_acceptance(tmp_path / "A.json").settings.reading
    assert reading is not None and reading.theta_s == 0.3


def test_a_guard_calibration_object_a_run_decided_with_compares_by_content(
    tmp_path: Path, world: Path
) -> None:
    """A run given its guard calibration as an object journals no file's sha256: it is the
    guard calibration of ``--policy`` when its content is, and another otherwise."""
    from dissensus.guard import ReliabilityFit
    from dissensus.pipeline import decide
    from dissensus.pipeline.review import resolve
    from dissensus.store.journal import Journal

    fit = ReliabilityFit.model_validate_json((world / "g1.json").read_text(encoding="utf-8"))
    data = {
        "reading": {"similarity": "tfidf", "theta_s": 0.5},
        "seek_context": {"followup": "none"},
    }
    journal = tmp_path / "j.sqlite"
    panels = [json.loads(x) for x in PANELS.read_text().splitlines()]
    with Journal(str(journal)) as jr:
        for k, panel in enumerate(panels):
            record = decide(panel, data, guard_calibration=fit, journal=jr, run_id=f"o{k}")
            if record.review_id is not None:
                resolve(jr, record.review_id, decision=str(panel["meta"]["gold"]), note="gold")
    shutil.copy(world / "g1.json", tmp_path / "g1.json")
    shutil.copy(world / "g2.json", tmp_path / "g2.json")
    reading = {"theta_s": 0.5}
    followup = {"followup": "none"}
    for name, code in (("g1.json", 0), ("g2.json", 2)):
        cal = _policy(
            tmp_path / "cal.yaml",
            reading=reading,
            seek_context=followup,
            guard={"calibration": name},
        )
        res = _calibrate(journal, cal, tmp_path / "A.json")
        assert res.code == code, res.err
    assert "field 'guard.calibration': the run's guard calibration was an object as journalled" in (
        " ".join(res.err.split())
    )
    plain = _policy(tmp_path / "plain.yaml", reading=reading, seek_context=followup)
    res = _calibrate(journal, plain, tmp_path / "B.json")
    assert res.code == 2 and "--policy's is none" in res.err, res.err


@settings(max_examples=40, deadline=None, derandomize=True)
@given(
    ran=st.one_of(st.none(), st.sampled_from([0.2, 0.3, 0.39, 0.5])),
    calibrating=st.one_of(st.none(), st.sampled_from([0.2, 0.3, 0.39, 0.5])),
)
def test_a_journalled_run_is_refused_exactly_when_its_effective_theta_s_differs(
    ran: float | None, calibrating: float | None
) -> None:
    """The guarantee: a run's cases are calibrated on iff the run read with the thresholds
    ``--policy`` reads with (tfidf's default 0.39 where a policy gives none)."""
    from dissensus.acceptance import FeatureSettings
    from dissensus.acceptance.prepare import GuardInputs, calibrated_settings
    from dissensus.cli.acceptance import _check_run
    from dissensus.states.reading import Thresholds
    from dissensus.store import event_types as ev
    from dissensus.store.journal import Journal

    def policy(theta: float | None) -> Any:
        return policy_from_dict({"reading": {"similarity": "tfidf", "theta_s": theta}})

    started = {
        "input": {"path": "-", "text": ""},
        **RunSpec.from_policy(policy(ran)).started_fields(),
    }
    reading, guard = calibrated_settings(policy(calibrating))
    recorded = FeatureSettings(similarity="tfidf", reading=reading, guard=guard)
    inputs = GuardInputs.from_policy(policy(calibrating))
    with Journal(":memory:") as jr:
        jr.create_run("r1", kind="decide", meta={}, first=(ev.RUN_STARTED, started, "run/started"))
        if Thresholds.for_similarity("tfidf", ran) == Thresholds.for_similarity(
            "tfidf", calibrating
        ):
            _check_run(jr, "r1", recorded, inputs)
        else:
            with pytest.raises(ConfigError) as err:
                _check_run(jr, "r1", recorded, inputs)
            assert err.value.field == "reading.theta_s" and err.value.file == "run 'r1'"
