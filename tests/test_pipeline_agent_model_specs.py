"""Every model spec a policy holds is checked before a run is created.

``seek_context.models`` maps agents to model specs (each agent's own re-ask). A bad one
(``bogus``, a scripted or replay file that is missing or invalid, ``openai:`` with no key
and no base URL) used to pass the checks: the run was created and journalled, and every
follow-up then failed (exit 1). Like the run's own model spec, it is a configuration
error: one line naming the agent's field and the spec, exit 2, no run in the journal.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from cli_helpers import cli
from dissensus.errors import ConfigError
from dissensus.pipeline import RunSpec
from dissensus.store import Journal
from pipeline_cases import panel, write_jsonl, write_policy, write_script

BAD_SPECS = {
    "bogus": "bogus",
    "missing-script": "scripted:nope.yaml",
    "bad-replay": "replay:bad.jsonl",
    "openai-without-key": "openai:x",
}


@pytest.mark.parametrize("name", sorted(BAD_SPECS))
def test_a_bad_agent_model_spec_is_exit_2_and_no_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("DISSENSUS_MODEL", raising=False)
    (tmp_path / "bad.jsonl").write_text("{not a recording\n", encoding="utf-8")
    good = f"scripted:{write_script(tmp_path / 'a1.yaml', {'a1': '1'})}"
    spec = BAD_SPECS[name]
    pol = write_policy(
        tmp_path / "p.yaml",
        {"seek_context": {"use_recorded": False, "models": {"a1": good, "GPT-4": spec}}},
    )
    inp = write_jsonl(tmp_path / "in.jsonl", [panel("x", ["2", "1", "2"])])
    journal = tmp_path / "j.sqlite"
    out = cli("decide", str(inp), "--policy", str(pol), "--journal", str(journal))
    assert out.code == 2, (out.out, out.err)
    assert out.err.startswith("error: ") and out.err.count("\n") == 1, out.err
    # the spec as given (a file in it resolved against the policy's folder)
    assert "seek_context.models.GPT-4" in out.err and spec.split(":")[-1] in out.err, out.err
    if journal.exists():
        with Journal(journal) as j:
            assert list(j.runs()) == []
    with pytest.raises(ConfigError) as err:
        RunSpec.from_policy(pol)
    assert err.value.field == "seek_context.models.GPT-4"


def test_good_agent_model_specs_pass_relative_to_the_policy(tmp_path: Path) -> None:
    write_script(tmp_path / "a1.yaml", {"a1": "1"})
    pol = write_policy(
        tmp_path / "p.yaml", {"seek_context": {"models": {"a1": "scripted:a1.yaml"}}}
    )
    spec = RunSpec.from_policy(pol)
    assert spec.policy.seek_context.models["a1"] == f"scripted:{tmp_path / 'a1.yaml'}"


@pytest.mark.parametrize("name", ["bogus", "missing-script", "bad-replay"])
def test_a_bad_panel_member_spec_is_refused_by_every_door(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """The policy is one for every door: ``decide`` (which asks no member) refuses a
    ``panel.members`` model spec that ``serve`` could not open, naming the file and the
    member's field (``serve`` named ``model`` and no file; ``decide`` ran)."""
    (tmp_path / "bad.jsonl").write_text("{not a recording\n", encoding="utf-8")
    good = f"scripted:{write_script(tmp_path / 'a1.yaml', {'a1': '1'})}"
    members = [{"name": "a", "model": good}, {"name": "b", "model": BAD_SPECS[name]}]
    pol = write_policy(tmp_path / "p.yaml", {"panel": {"answer": "number", "members": members}})
    inp = write_jsonl(tmp_path / "in.jsonl", [panel("x", ["2", "1", "2"])])
    journal = tmp_path / "j.sqlite"
    out = cli("decide", str(inp), "--policy", str(pol), "--journal", str(journal))
    assert out.code == 2, (out.out, out.err)
    assert out.err.startswith(f"error: {pol}: field 'panel.members.1.model': "), out.err
    assert not journal.exists() or not list(Journal(journal).runs())


def test_an_openai_member_needs_its_key_only_where_the_panel_opens(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An ``openai:`` member's key comes from the environment of the door that opens the
    panel: ``decide`` runs without it; opening the panel names the file and the field."""
    from dissensus.panels import PanelChat

    monkeypatch.delenv("NOPE_KEY", raising=False)
    members = [
        {"name": "a", "model": "openai:m", "api_key_env": "NOPE_KEY"},
        {"name": "b", "model": "openai:n", "base_url": "http://127.0.0.1:9/v1"},
    ]
    pol = write_policy(tmp_path / "p.yaml", {"panel": {"answer": "number", "members": members}})
    inp = write_jsonl(tmp_path / "in.jsonl", [panel("x", ["2", "2", "2"])])
    out = cli("decide", str(inp), "--policy", str(pol), "--journal", str(tmp_path / "j.sqlite"))
    assert out.code == 0, (out.out, out.err)
    with Journal(tmp_path / "k.sqlite") as journal, pytest.raises(ConfigError) as err:
        PanelChat(RunSpec.from_policy(pol), journal=journal)
    assert err.value.file == str(pol) and err.value.field == "panel.members.0.api_key_env"


def test_a_member_recording_outside_the_policy_folder_names_its_field(tmp_path: Path) -> None:
    script = write_script(tmp_path / "s.yaml", {})
    members = [
        {"name": "a", "model": f"record:../r.jsonl:scripted:{script.name}"},
        {"name": "b", "model": f"scripted:{script.name}"},
    ]
    pol = write_policy(tmp_path / "p.yaml", {"panel": {"answer": "number", "members": members}})
    with pytest.raises(ConfigError) as err:
        RunSpec.from_policy(pol)
    assert err.value.file == str(pol) and err.value.field == "panel.members.0.model"
    assert "leaves the policy's directory" in str(err.value)


def test_a_policy_given_as_data_checks_its_members_as_its_file_does(tmp_path: Path) -> None:
    """One policy is accepted or refused alike however it is passed: as a file, or as
    the mapping its YAML parses to (``decide(panel, data)``, the Inspect reducer's
    ``policy=``); only a :class:`Policy` built in code, which may come with its members
    open, leaves their specs unchecked."""
    import yaml

    from dissensus.pipeline import Policy, decide

    data = {
        "reading": {"similarity": "tfidf"},
        "panel": {
            "members": [
                {"name": "a", "model": "bogus-spec", "family": "x"},
                {"name": "b", "model": "scripted:nope.yaml", "family": "y"},
            ]
        },
    }
    pol = tmp_path / "p.yaml"
    pol.write_text(yaml.safe_dump(data), encoding="utf-8")
    with pytest.raises(ConfigError) as from_file:
        RunSpec.from_policy(pol)
    with pytest.raises(ConfigError) as from_data:
        RunSpec.from_policy(data)
    assert from_data.value.field == from_file.value.field == "panel.members.0.model"
    for refused in (from_file.value, from_data.value):
        assert "invalid model spec 'bogus-spec'" in str(refused)
    with pytest.raises(ConfigError):
        decide(panel("x", ["2", "2", "2"]), data)
    assert RunSpec.from_policy(Policy.model_validate(data)).policy.panel.members


@pytest.mark.parametrize("key", ["max_calls", "max_tokens"])
def test_a_budget_of_nothing_beside_a_model_is_refused_before_the_run(
    tmp_path: Path, key: str
) -> None:
    """``budget.max_calls: 0`` with a follow-up model created a run whose every follow-up
    failed (exit 1 after the whole run); it is a configuration error now, and
    ``seek_context.followup: none`` runs without model calls."""
    script = f"scripted:{write_script(tmp_path / 's.yaml', {})}"
    sc = {"use_recorded": False, "model": script}
    pol = write_policy(tmp_path / "p.yaml", {"budget": {key: 0}, "seek_context": sc})
    inp = write_jsonl(tmp_path / "in.jsonl", [panel("x", ["2", "1", "2"])])
    journal = tmp_path / "j.sqlite"
    out = cli("decide", str(inp), "--policy", str(pol), "--journal", str(journal))
    assert out.code == 2, (out.out, out.err)
    assert f"field 'budget.{key}'" in out.err and "followup: none" in out.err, out.err
    assert not journal.exists() or not list(Journal(journal).runs())
    off = write_policy(
        tmp_path / "q.yaml", {"budget": {key: 0}, "seek_context": {**sc, "followup": "none"}}
    )
    assert RunSpec.from_policy(off).policy.budget.model_dump()[key] == 0


def test_a_budget_of_nothing_beside_a_deliberate_route_is_refused_too(tmp_path: Path) -> None:
    """``followup: none`` does not stop a ``deliberate`` route from deliberating with the
    model: ``max_calls: 0`` beside it let the run start and every deliberation stop at
    once (``budget_exhausted``); it is refused, naming the route, before any run."""
    script = f"scripted:{write_script(tmp_path / 's.yaml', {})}"
    data = {
        "routing": {"defaults": {"DD": "deliberate"}},
        "seek_context": {"followup": "none", "model": script},
        "budget": {"max_calls": 0},
    }
    with pytest.raises(ConfigError) as caught:
        RunSpec.from_policy(write_policy(tmp_path / "p.yaml", data))
    assert caught.value.field == "budget.max_calls"
    assert "a deliberate route deliberates with the model" in str(caught.value)
    no_route = {**data, "routing": {}}
    assert RunSpec.from_policy(write_policy(tmp_path / "q.yaml", no_route)).policy
