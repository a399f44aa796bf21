"""SIGHUP (a closed terminal) stops a command as SIGTERM does: one line, exit 130.

It used to end the process by the signal (the shell's 129) without a word, leaving
``decide --output``'s temporary file behind. Under ``nohup`` (SIGHUP ignored) it stays
ignored.

The children set SIGHUP's action themselves (default, or ignored for ``nohup``): a test
run started under ``nohup`` hands its own ignored SIGHUP down to every child.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from cli_helpers import cli
from dissensus.store import Journal
from pipeline_cases import crash_script, mixed_batch, write_jsonl, write_policy
from test_cli_interrupt import RUNNER, _env, _wait_for


def _hup_default() -> None:
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def _hup_ignored() -> None:
    signal.signal(signal.SIGHUP, signal.SIG_IGN)


def _decide(tmp_path: Path) -> list[str]:
    inp = write_jsonl(tmp_path / "in.jsonl", mixed_batch())
    pol = write_policy(tmp_path / "p.yaml")
    script = crash_script(tmp_path / "s.yaml")
    return ["decide", str(inp), "--policy", str(pol), "--journal", str(tmp_path / "j.sqlite"),
            "--run-id", "R", "--model", f"scripted:{script}", "--json",
            "--output", str(tmp_path / "out" / "o.jsonl")]  # fmt: skip


def test_sighup_during_decide_says_how_to_resume_and_leaves_no_temporary_file(
    tmp_path: Path,
) -> None:
    argv = _decide(tmp_path)
    (tmp_path / "out").mkdir()
    proc = subprocess.run(
        [sys.executable, RUNNER, "12", "SIGHUP", *argv],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=120,
        check=False,
        preexec_fn=_hup_default,
    )
    assert proc.returncode == 130, proc.stderr
    journal = tmp_path / "j.sqlite"
    out = tmp_path / "out" / "o.jsonl"
    expected = (
        f"interrupted: resume with dissensus runs resume R --journal {journal} --output {out}"
    )
    assert proc.stderr.strip().splitlines()[-1] == expected
    assert "Traceback" not in proc.stderr
    assert os.listdir(tmp_path / "out") == []
    with Journal(journal) as j:
        assert j.verify("R").ok and j.get("R", "run/finished") is None
    resumed = cli("runs", "resume", "R", "--journal", journal, "--json")
    assert resumed.code == 3, resumed.err


def _waiting_route(ignore_hup: bool) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "dissensus", "route", "-", "--similarity", "tfidf"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
        preexec_fn=_hup_ignored if ignore_hup else _hup_default,
    )


def test_sighup_while_a_command_runs_or_loads_is_one_line() -> None:
    for loaded in (False, True):
        proc = _waiting_route(ignore_hup=False)
        maps = Path(f"/proc/{proc.pid}/maps")
        try:
            if loaded:
                _wait_for(lambda p=proc: _loaded(p), proc)
            else:
                _wait_for(lambda m=maps: "pydantic_core" in m.read_text(), proc)
            proc.send_signal(signal.SIGHUP)
            _, err = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == 130, (loaded, err)
        assert err.strip() == "interrupted", (loaded, err)


def test_sighup_ignored_under_nohup_stays_ignored() -> None:
    proc = _waiting_route(ignore_hup=True)
    try:
        _wait_for(lambda: _loaded(proc), proc)
        proc.send_signal(signal.SIGHUP)
        _, err = proc.communicate(input="", timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert (proc.returncode, err) == (0, ""), err


def _loaded(proc: subprocess.Popen[str]) -> bool:
    """Whether the command line has loaded and ``route`` waits on its standard input."""
    try:
        return "pipe" in Path(f"/proc/{proc.pid}/wchan").read_text() and (
            "numpy" in Path(f"/proc/{proc.pid}/maps").read_text()
        )
    except OSError:
        return False
