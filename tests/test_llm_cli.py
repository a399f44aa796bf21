"""``dissensus fake-llm`` through a subprocess, driven by the real SDK.

The usage errors (exit 2 before any server starts) run in-process. The SDK is imported
by the tests that use it, not at collection.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from cli_helpers import cli


def test_fake_llm_serves_the_rule_file(tmp_path: Path) -> None:
    from openai import OpenAI

    script = tmp_path / "rules.yaml"
    script.write_text('rules:\n  - match: {contains: "ping"}\n    response: "pong"\ndefault: "?"\n')
    proc = subprocess.Popen(
        [sys.executable, "-m", "dissensus", "fake-llm", "--port", "0", "--script", str(script)],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        assert line.startswith("listening on http://127.0.0.1:")
        base_url = line.split()[-1]
        sdk = OpenAI(api_key="unused", base_url=base_url, max_retries=0, timeout=30)
        out = sdk.chat.completions.create(
            model="fake-model", messages=[{"role": "user", "content": "ping"}]
        )
        assert out.choices[0].message.content == "pong"
        assert [m.id for m in sdk.models.list()] == ["fake-model"]
        sdk.close()
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_fake_llm_missing_script_is_a_usage_error(tmp_path: Path) -> None:
    result = cli("fake-llm", "--port", "0", "--script", tmp_path / "none.yaml")
    assert result.code == 2
    assert "file not found" in result.err


def _docs_script(repo_root: Path) -> str:
    """The rule file of docs/llm.md ("Scripted models"), exactly as a user would copy it."""
    text = (repo_root / "docs" / "llm.md").read_text(encoding="utf-8")
    section = text[text.index("## Scripted models") :]
    return section[section.index("```yaml\n") + len("```yaml\n") : section.index("```\n", 1)]


def test_fake_llm_runs_the_script_of_the_docs(tmp_path: Path, repo_root: Path) -> None:
    from openai import NOT_GIVEN, OpenAI

    script = tmp_path / "rules.yaml"
    script.write_text(_docs_script(repo_root))
    proc = subprocess.Popen(
        [sys.executable, "-m", "dissensus", "fake-llm", "--port", "0", "--script", str(script)],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        base_url = proc.stderr.readline().split()[-1]
        sdk = OpenAI(api_key="unused", base_url=base_url, max_retries=0, timeout=30)

        def ask(content: str, schema: str | None = None, **headers: str) -> str | None:
            out = sdk.chat.completions.create(
                model="fake-model",
                messages=[{"role": "user", "content": content}],
                extra_headers={f"X-Dissensus-{k}": v for k, v in headers.items()},
                response_format=(
                    {"type": "json_schema", "json_schema": {"name": schema, "schema": {}}}
                    if schema is not None
                    else NOT_GIVEN
                ),
            )
            return out.choices[0].message.content

        every = {"Agent": "security", "Role": "Challenger", "Stage": "dci.challenge"}
        assert ask("substring CVE-2024", "Verdict", **every) == "plain text"
        assert ask("substring, no id", "Verdict", **every) == "fallback text"  # regex fails
        assert json.loads(ask("anything", Agent="judge-1") or "") == {"verdict": "ok", "score": 3}
        cycle = [ask("x", Agent="p1", Role="Proposer") for _ in range(3)]
        assert cycle == ["t1", '{"k": 2}', "t1"]
        assert ask("x", Agent="p2", Role="Proposer") == "t1"  # cycled per agent
        assert ask("nobody") == "fallback text"
        sdk.close()
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_fake_llm_bad_server_section_is_one_line(tmp_path: Path) -> None:
    script = tmp_path / "rules.yaml"
    script.write_text("server:\n  faults: {kinds: [bogus]}\n")
    result = cli("fake-llm", "--port", "0", "--script", script)
    assert result.code == 2
    lines = result.err.strip().splitlines()
    assert len(lines) == 1, result.err
    assert lines[0].startswith("error: ") and "field 'server.faults.kinds.0'" in lines[0]


NON_FINITE = ["1e400", '"inf"', '"-inf"', '"nan"', '"1e400"', ".inf", ".nan"]
"""Non-finite numbers as YAML spells them: PyYAML reads ``1e400`` (no dot) as a string,
which pydantic turned into ``inf``."""


@pytest.mark.parametrize("value", NON_FINITE)
@pytest.mark.parametrize(
    ("section", "field"),
    [
        ("server: {latency_s: %s}", "server.latency_s"),
        ("server: {drip_s: %s}", "server.drip_s"),
        ("server: {faults: {hang_s: %s}}", "server.faults.hang_s"),
        ("server: {faults: {rate: %s}}", "server.faults.rate"),
    ],
)
def test_fake_llm_refuses_non_finite_server_numbers(
    tmp_path: Path, value: str, section: str, field: str
) -> None:
    script = tmp_path / "rules.yaml"
    script.write_text('default: "x"\n' + section % value + "\n")
    res = cli("fake-llm", "--port", "0", "--script", script)
    assert res.code == 2, (res.out, res.err)
    lines = res.err.strip().splitlines()
    assert len(lines) == 1 and f"field '{field}'" in lines[0] and str(script) in lines[0]
    assert "finite" in lines[0] and "Traceback" not in res.err
