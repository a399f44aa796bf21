"""Policy files: documented defaults, errors that name the field, the shipped LLMBar policy."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from cli_helpers import run_cli
from dissensus.errors import ConfigError
from dissensus.pipeline import Policy, decide, load_calibration, load_policy, policy_from_dict
from dissensus.signals import MarkerLexicon
from dissensus.types import Panel


def test_an_empty_policy_is_the_documented_defaults(tmp_path: Path) -> None:
    (tmp_path / "p.yaml").write_text("", encoding="utf-8")
    policy, base = load_policy(tmp_path / "p.yaml")
    assert policy == Policy()
    assert base == tmp_path.resolve()
    assert policy.reading.theta_a == 0.8 and policy.reading.similarity == "minilm"
    assert policy.routing.convergent_disagreement_without_values == "escalate"
    assert policy.acceptance.target_precision == 0.9 and policy.acceptance.calibration is None
    assert policy.seek_context.followup == "reask" and policy.seek_context.max_followups == 1
    assert policy.concurrency == 4


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"acceptance": {"target_precision": 1.5}}, "acceptance.target_precision"),
        ({"seek_context": {"followup": "pray"}}, "seek_context.followup"),
        ({"reading": {"theta_a": 0}}, "reading.theta_a"),
        ({"concurrency": 0}, "concurrency"),
        ({"guard": {"enabeld": True}}, "guard.enabeld"),
        ({"acceptance": {"markers": {"concession": "however"}}}, "acceptance.markers.concession"),
        ({"guard": {"options": {"min_sources": "many"}}}, "guard.options.min_sources"),
        # Out of range: refused, no longer raised to 2 / read as "never" in silence.
        ({"guard": {"options": {"min_sources": -5}}}, "guard.options.min_sources"),
        ({"guard": {"options": {"min_sources": 1}}}, "guard.options.min_sources"),
        (
            {"guard": {"options": {"max_fallback_agreement": 7}}},
            "guard.options.max_fallback_agreement",
        ),
        ({"guard": {"options": {"prior_reliability": 1.0}}}, "guard.options.prior_reliability"),
        ({"guard": {"options": {"prior_rho_other": -0.1}}}, "guard.options.prior_rho_other"),
        ({"reading": {"similarity": "bogus"}}, "reading.similarity"),
        (
            {"routing": {"rules": [{"id": "r", "condition": "meta.x ==", "action": "escalate"}]}},
            "routing.rules.0.condition",
        ),
        # Values keep their type inside the open-ended parts too: converted, not refused.
        ({"guard": {"options": {"min_sources": "2"}}}, "guard.options.min_sources"),
        ({"guard": {"options": {"decompose": 1}}}, "guard.options.decompose"),
        (
            {
                "routing": {
                    "rules": [
                        {"id": "r", "condition": "true", "action": "escalate", "priority": "3"}
                    ]
                }
            },
            "routing.rules.0.priority",
        ),
        (
            {
                "routing": {
                    "rules": [
                        {"id": "r", "condition": "true", "action": "escalate", "priority": True}
                    ]
                }
            },
            "routing.rules.0.priority",
        ),
        # An empty name is no file: it switched the file off unseen.
        ({"acceptance": {"model": ""}}, "acceptance.model"),
        ({"acceptance": {"calibration": " "}}, "acceptance.calibration"),
        ({"guard": {"calibration": ""}}, "guard.calibration"),
        ({"seek_context": {"model": ""}}, "seek_context.model"),
    ],
)
def test_a_bad_policy_names_the_field(data: dict[str, object], field: str) -> None:
    with pytest.raises(ConfigError) as err:
        policy_from_dict(data, file="p.yaml")
    assert err.value.field == field
    assert "p.yaml" in str(err.value)


def test_bad_yaml_and_non_mapping_are_config_errors(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("reading: [", encoding="utf-8")
    (tmp_path / "b.yaml").write_text("- 1\n", encoding="utf-8")
    for name in ("a.yaml", "b.yaml", "missing.yaml"):
        with pytest.raises(ConfigError):
            load_policy(tmp_path / name)


def test_cli_exits_2_and_names_the_field(tmp_path: Path) -> None:
    (tmp_path / "p.yaml").write_text("acceptance:\n  min_support: -1\n", encoding="utf-8")
    (tmp_path / "in.jsonl").write_text("", encoding="utf-8")
    proc = run_cli(
        "decide",
        tmp_path / "in.jsonl",
        "--policy",
        tmp_path / "p.yaml",
        "--journal",
        tmp_path / "j.sqlite",
    )
    assert proc.returncode == 2
    assert "acceptance.min_support" in proc.stderr and "Traceback" not in proc.stderr


def test_shipped_llmbar_policy_and_calibration_load(repo_root: Path) -> None:
    from dissensus.acceptance import load_acceptance

    policy, base = load_policy(repo_root / "examples" / "llmbar-policy.yaml")
    assert policy.acceptance.model and policy.acceptance.calibration is None
    assert base is not None
    acc = load_acceptance(base / policy.acceptance.model)
    assert acc.settings.similarity == policy.reading.similarity
    assert acc.settings.markers is None and acc.calibration_n == 326
    assert not any(f.startswith("cand.margin") for f in acc.features)
    # The trust-region file stays loadable with the lexicon it was built with.
    lexicon = MarkerLexicon(
        concession=("however", "both", "also", "more detailed", "more comprehensive"),
        grounding=("instruction", "instructions"),
    )
    cal = load_calibration(repo_root / "examples" / "llmbar-reliability.json", lexicon)
    assert {"GPT-4", "ChatGPT", "PaLM2"} <= set(cal.agents)
    assert all(s.startswith("llmbar/") for s in cal.built_from)
    with pytest.raises(ConfigError) as err:
        load_calibration(
            repo_root / "examples" / "llmbar-reliability.json", MarkerLexicon(concession=("maybe",))
        )
    assert err.value.field == "lexicon"


def test_gold_labels_never_change_a_decision(repo_root: Path) -> None:
    """The labelled field of converted panels is not read at decision time."""
    policy, base = load_policy(repo_root / "examples" / "llmbar-policy.yaml")
    # tfidf for speed: the shipped acceptance file was calibrated with MiniLM, so it is left
    # out here (tests/test_acceptance_pipeline.py checks that its features never read gold).
    policy = policy.model_copy(
        update={
            "reading": policy.reading.model_copy(update={"similarity": "tfidf"}),
            "acceptance": policy.acceptance.model_copy(update={"model": None}),
        }
    )
    lines = (
        (repo_root / "examples" / "llmbar-swap.jsonl").read_text(encoding="utf-8").splitlines()[:12]
    )
    for line in lines:
        data = json.loads(line)
        flipped = json.loads(line)
        flipped["meta"]["gold"] = "2" if data["meta"].get("gold") == "1" else "1"
        a = decide(Panel.model_validate(data), policy, policy_dir=base)
        b = decide(Panel.model_validate(flipped), policy, policy_dir=base)
        assert a.model_dump(exclude={"review_id"}) == b.model_dump(exclude={"review_id"})


def test_a_calibration_file_without_a_format_is_refused(tmp_path: Path) -> None:
    (tmp_path / "cal.json").write_text("{}", encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        load_calibration(tmp_path / "cal.json", MarkerLexicon())
    assert err.value.field == "format"


def test_concord_settings_have_no_unused_keys() -> None:
    with pytest.raises(ConfigError) as err:
        policy_from_dict({"concord": {"model": "scripted:x.yaml"}})
    assert err.value.field == "concord.model"


def test_model_files_in_a_policy_are_relative_to_the_policy_file(tmp_path: Path) -> None:
    sub = tmp_path / "conf"
    sub.mkdir()
    (sub / "p.yaml").write_text(
        "seek_context: {model: 'scripted:answers.yaml'}\n", encoding="utf-8"
    )
    policy, base = load_policy(sub / "p.yaml")
    assert base == sub.resolve()
    assert policy.seek_context.model == f"scripted:{sub.resolve() / 'answers.yaml'}"
    (sub / "r.yaml").write_text(
        "seek_context: {model: 'record:calls.jsonl:replay:old.jsonl'}\n", encoding="utf-8"
    )
    policy, _ = load_policy(sub / "r.yaml")
    assert (
        policy.seek_context.model
        == f"record:{sub.resolve() / 'calls.jsonl'}:replay:{sub.resolve() / 'old.jsonl'}"
    )
    (sub / "o.yaml").write_text("seek_context: {model: 'openai:gpt-4o-mini'}\n", encoding="utf-8")
    assert load_policy(sub / "o.yaml")[0].seek_context.model == "openai:gpt-4o-mini"


def test_an_unknown_similarity_override_starts_no_run(tmp_path: Path) -> None:
    from dissensus.pipeline import start_run
    from dissensus.store import Journal

    (tmp_path / "in.jsonl").write_text("", encoding="utf-8")
    with Journal(tmp_path / "j.sqlite") as journal:
        with pytest.raises(ConfigError) as err:
            start_run(journal, str(tmp_path / "in.jsonl"), Policy(), similarity="bogus")
        assert err.value.field == "similarity"
        assert journal.runs() == []


def test_cd_without_values_switches_on_the_builtin_rule_only_for_the_default_cd_action() -> None:
    on = policy_from_dict({"routing": {"convergent_disagreement_without_values": "seek_context"}})
    assert on.routing.rules_document()["builtins"] == ["cd-without-values"]
    assert policy_from_dict({}).routing.rules_document()["builtins"] == []
    other = policy_from_dict(
        {
            "routing": {
                "convergent_disagreement_without_values": "seek_context",
                "defaults": {"CD": "concord"},
            }
        }
    )
    assert other.routing.rules_document()["builtins"] == []


def test_per_agent_models_are_relative_to_the_policy(tmp_path: Path) -> None:
    sub = tmp_path / "pol"
    sub.mkdir()
    (sub / "p.yaml").write_text(
        "seek_context: {models: {a1: 'scripted:a1.yaml', a2: 'openai:gpt-4o'}}\n", encoding="utf-8"
    )
    policy, _ = load_policy(sub / "p.yaml")
    assert policy.seek_context.models == {
        "a1": f"scripted:{sub.resolve() / 'a1.yaml'}",
        "a2": "openai:gpt-4o",
    }


def test_default_marker_lexicon_is_empty_and_llmbar_policy_uses_no_word_lists(
    repo_root: Path,
) -> None:
    assert MarkerLexicon() == MarkerLexicon(concession=(), grounding=())
    policy, _ = load_policy(repo_root / "examples" / "llmbar-policy.yaml")
    # Learned acceptance decides; the trust regions' lexicon is kept by evaluation/pipeline_llmbar.py.
    assert policy.acceptance.model and policy.acceptance.markers == MarkerLexicon()


def test_deadline_must_be_positive() -> None:
    with pytest.raises(ConfigError) as info:
        policy_from_dict({"deadline_s": 0})
    assert info.value.field == "deadline_s"


def test_a_rules_document_checked_once_is_still_refused_when_it_changes() -> None:
    """Valid rules documents are remembered by their JSON; an invalid one is checked (and
    refused) every time, whatever was checked before."""
    rule = {"id": "r1", "condition": 'meta.category == "legal"', "action": "escalate"}
    good = {"routing": {"rules": [rule]}}
    policy_from_dict(good)
    policy_from_dict(good)
    bad = {"routing": {"rules": [{**rule, "condition": 'meta.category == "legal'}]}}
    for _ in range(2):
        with pytest.raises(ConfigError, match="routing"):
            policy_from_dict(bad)


@pytest.mark.parametrize("value", ["false", "yes", 0, 1, None])
@pytest.mark.parametrize(
    "field", ["guard.enabled", "concord.enabled", "seek_context.use_recorded", "allow_code"]
)
def test_a_switch_is_true_or_false_only(field: str, value: object) -> None:
    """``allow_code: "false"`` must not be read as a switch either way: it is an error."""
    *sections, name = field.split(".")
    data: dict[str, Any] = {name: value}
    for section in reversed(sections):
        data = {section: data}
    with pytest.raises(ConfigError, match=f"field '{field}'"):
        policy_from_dict(data)


def test_shift_permutations_is_deprecated_ignored_and_leaves_the_journalled_spec_as_it_was(
    tmp_path: Path,
) -> None:
    import warnings

    from dissensus.pipeline import RunSpec

    (tmp_path / "p.yaml").write_text("acceptance: {shift_permutations: 39}\n", encoding="utf-8")
    with pytest.warns(FutureWarning, match=r"acceptance.shift_permutations \(in .*p.yaml\)"):
        old, _ = load_policy(tmp_path / "p.yaml")
    assert old.acceptance.shift_permutations == 39  # read, and used by nothing
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        plain = policy_from_dict({"acceptance": {"shift_alpha": 0.05}})
        # A dump of a policy (which holds the key) validates again without a warning.
        assert policy_from_dict(old.model_dump(mode="json")) == old
        # A policy without it journals the spec it journalled before (the key, at 200) ...
        started = RunSpec.from_policy(plain).started_fields()
        assert started["policy"]["acceptance"]["shift_permutations"] == 200
        # ... and an earlier run's spec, with it, reads without a warning.
        assert RunSpec.from_started(started).policy == plain


def test_the_cli_says_a_deprecated_setting_in_one_warning_line(tmp_path: Path) -> None:
    from cli_helpers import cli

    policy = tmp_path / "p.yaml"
    policy.write_text(
        "reading: {similarity: tfidf}\nacceptance: {shift_permutations: 39}\n", encoding="utf-8"
    )
    panels = tmp_path / "in.jsonl"
    panels.write_text(
        '{"id": "a", "outputs": [{"agent": "x", "decision": "1", "reasoning": "r"},'
        ' {"agent": "y", "decision": "1", "reasoning": "r"}]}\n',
        encoding="utf-8",
    )
    res = cli("decide", panels, "--policy", policy, "--journal", tmp_path / "j.sqlite")
    assert res.code == 0, res.err
    said = [line for line in res.err.splitlines() if "shift_permutations" in line]
    assert len(said) == 1 and said[0].startswith("warning: policy setting "), res.err
    assert "Warning" not in res.err and ".py:" not in res.err


def test_a_run_journalled_with_a_guard_setting_now_refused_still_resumes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``min_sources: 1`` was read as 2 before new policies were range-checked: a run
    journalled with it must still resume (it raised a validation traceback at its first
    guarded case, on every resume)."""
    import asyncio

    from dissensus.guard import decision
    from dissensus.pipeline import execute_run, start_run
    from dissensus.store import Journal
    from pipeline_cases import panel, write_jsonl

    inp = write_jsonl(tmp_path / "in.jsonl", [panel(f"p{i}", ["1", "1", "1"]) for i in range(3)])
    policy = tmp_path / "p.yaml"
    policy.write_text("reading: {similarity: tfidf}\nguard: {options: {min_sources: 1}}\n")
    with pytest.raises(ConfigError, match="min_sources"):
        policy_from_dict({"guard": {"options": {"min_sources": 1}}})
    with monkeypatch.context() as old:  # the checks of before
        old.setattr(decision, "CheckedGuardThresholds", decision.GuardThresholds)
        with Journal(tmp_path / "j.sqlite") as journal:
            run_id = start_run(journal, str(inp), policy).run_id

    async def drain(journal: Journal) -> list[object]:
        return [r async for r in execute_run(journal, run_id)]

    with Journal(tmp_path / "j.sqlite") as journal:
        records = asyncio.run(drain(journal))
    assert len(records) == 3


@pytest.mark.parametrize("value", ["0.9", True, "yes", "7"])
@pytest.mark.parametrize(
    "field",
    [
        "concord.floor",
        "acceptance.target_precision",
        "concurrency",
        "deadline_s",
        "budget.max_calls",
        "seek_context.max_followups",
    ],
)
def test_a_number_is_a_number(field: str, value: object) -> None:
    """A quoted number or a YAML ``yes`` where a number belongs is an error naming the
    field, never read as its conversion (``true`` was read as 1, ``"0.9"`` as 0.9)."""
    *sections, name = field.split(".")
    data: dict[str, Any] = {name: value}
    for section in reversed(sections):
        data = {section: data}
    with pytest.raises(ConfigError, match=f"field '{field}'"):
        policy_from_dict(data)


def test_an_integral_float_is_an_integer_and_a_file_says_the_field(tmp_path: Path) -> None:
    assert policy_from_dict({"concurrency": 4.0, "budget": {"max_calls": 10}}).concurrency == 4
    path = tmp_path / "p.yaml"
    path.write_text("concord:\n  floor: on\n")
    with pytest.raises(ConfigError, match=r"p\.yaml.*field 'concord\.floor'.*not a switch"):
        load_policy(path)


def test_a_run_journalled_with_a_quoted_number_still_resumes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A journalled policy is read as it was written: a run started before numbers were
    strict (``concurrency: "2"``) resumes."""
    import asyncio

    from dissensus.pipeline import execute_run, policy, start_run
    from dissensus.store import Journal
    from pipeline_cases import panel, write_jsonl

    inp = write_jsonl(tmp_path / "in.jsonl", [panel(f"p{i}", ["1", "1", "1"]) for i in range(3)])
    path = tmp_path / "p.yaml"
    path.write_text('reading: {similarity: tfidf}\nconcurrency: "2"\n')
    with pytest.raises(ConfigError, match="concurrency"):
        load_policy(path)
    with monkeypatch.context() as old:  # the checks of before
        old.setattr(policy, "_check_strict", lambda data, file: None)
        with Journal(tmp_path / "j.sqlite") as journal:
            run_id = start_run(journal, str(inp), path).run_id

    async def drain(journal: Journal) -> list[object]:
        return [r async for r in execute_run(journal, run_id)]

    with Journal(tmp_path / "j.sqlite") as journal:
        records = asyncio.run(drain(journal))
    assert len(records) == 3


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("http://user:pw@127.0.0.1:8000/v1", "user-info"),
        ("http://user@127.0.0.1:8000/v1", "user-info"),
        ("https://h.example/v1?api-key=QSECRET", "'api-key'"),
        ("https://h.example/v1?x=1&access_token=t", "'access_token'"),
        ("https://h.example/v1?sig=abc", "'sig'"),
        ("ftp://h.example/v1", "not an http(s) URL"),
        ("http:///v1", "not an http(s) URL"),
        ("http://h.example:port/v1", "not a URL"),
    ],
)
def test_a_member_base_url_with_credentials_is_refused_naming_the_field(
    url: str, says: str
) -> None:
    """The policy is journalled with every run (and exported to any caller who may read
    a run): a member's URL must not carry a key; api_key_env names where the key is."""
    member = {"name": "a", "model": "openai:m", "base_url": url}
    data = {"panel": {"members": [member, {"name": "b", "model": "openai:m"}]}}
    with pytest.raises(ConfigError, match=re.escape(says)) as caught:
        policy_from_dict(data, file="p.yaml")
    assert caught.value.field == "panel.members.0.base_url"
    assert "QSECRET" not in str(caught.value) and "pw@" not in str(caught.value)


def test_a_member_base_url_without_credentials_is_kept() -> None:
    url = "https://h.example:8443/openai/v1?api-version=2024-10-21"
    member = {"name": "a", "model": "openai:m", "base_url": url, "api_key_env": "A_KEY"}
    policy = policy_from_dict({"panel": {"members": [member, {"name": "b", "model": "openai:m"}]}})
    assert policy.panel.members[0].base_url == url
    assert policy.panel.members[0].api_key_env == "A_KEY"


def test_a_journalled_policy_is_read_as_it_was_written(tmp_path: Path) -> None:
    """The new refusals (a quoted priority, an empty file name) are a file's checks: a
    policy journalled with a run before them still reads, so its run resumes."""
    from dissensus.pipeline import Policy
    from dissensus.states import RuleSet

    rule = {"id": "r", "condition": "true", "action": "escalate", "priority": "3"}
    old = Policy.model_validate({"acceptance": {"model": ""}, "routing": {"rules": [rule]}})
    assert old.acceptance.model == ""
    assert RuleSet.from_dict(old.routing.rules_document()) is not None
    rules = tmp_path / "rules.yaml"
    rules.write_text("rules:\n  - {id: r, condition: 'true', action: escalate, priority: '3'}\n")
    with pytest.raises(ConfigError) as err:  # a rules file is a file: refused
        RuleSet.load(rules)
    assert err.value.field == "rules.0.priority"


def test_an_empty_section_is_its_defaults(tmp_path: Path) -> None:
    """``guard:`` with only a comment under it is YAML's null: the section's defaults, as
    a section left out (it was an error naming the internal class ``GuardSettings``)."""
    path = tmp_path / "p.yaml"
    path.write_text("guard:\n  # enabled: false\nbudget:\nconcurrency: 2\n", encoding="utf-8")
    policy, _ = load_policy(path)
    assert policy == Policy(concurrency=2)
    with pytest.raises(ConfigError) as err:
        policy_from_dict({"concurrency": None})  # a setting, not a section: still an error
    assert err.value.field == "concurrency"


@pytest.mark.parametrize("key", ["calibration", "model"])
def test_an_acceptance_path_that_is_a_folder_says_so(tmp_path: Path, key: str) -> None:
    from dissensus.pipeline import RunSpec

    (tmp_path / "folder").mkdir()
    path = tmp_path / "p.yaml"
    path.write_text(f"acceptance:\n  {key}: folder\n", encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        RunSpec.from_policy(path)
    assert err.value.field == f"acceptance.{key}"
    assert "is not a regular file (a directory)" in str(err.value), err.value
    assert "not found" not in str(err.value)
