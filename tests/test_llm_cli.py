"""``dissensus fake-llm`` through a subprocess, driven by the real SDK."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from openai import OpenAI


def test_fake_llm_serves_the_rule_file(tmp_path: Path) -> None:
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
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "dissensus",
            "fake-llm",
            "--port",
            "0",
            "--script",
            str(tmp_path / "none.yaml"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "file not found" in result.stderr
