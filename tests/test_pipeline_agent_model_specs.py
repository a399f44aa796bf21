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
