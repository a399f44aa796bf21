"""``decide`` and ``runs resume`` on a terminal, with their progress bar drawn.

Run with no flags on a terminal, they printed every record as raw JSON onto it, above
the human table: whether to write JSON was decided by comparing the standard output
handle, taken before the bar started, with ``sys.stdout``, which the bar replaces with
its proxy while it is drawn. Through those lines an agent's text (a panel id holding
C1 controls, a bidi override) reached the terminal unescaped, where the table shows it
escaped. With ``--json`` and standard output a file, the records must still go to the
file, never to the terminal the bar is on.

Each command runs in a child process on a pseudo-terminal (standard error, and standard
output unless it is redirected to a file), so rich draws its bar and redirects standard
output as it does on a real terminal.
"""

from __future__ import annotations

import json
import os
import pty
import re
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipeline_cases import panel, write_jsonl

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="needs a pseudo-terminal")

SRC = Path(__file__).resolve().parent.parent / "src"

HOSTILE_ID = "\u009b2J\u009d8;;http://evil\u009cX\u2066\u202eabc"
"""A panel id holding a CSI, an OSC with its terminator, an isolate and an override."""

SHOWN_ID = "\\x9b2J\\x9d8;;http://evil\\x9cX\\u2066\\u202eabc"
"""How the human table shows :data:`HOSTILE_ID`."""

RAW = re.compile("[\u007f-\u009f\u2066\u202e]")
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _env() -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"DISSENSUS_PROGRESS", "FORCE_COLOR", "NO_COLOR", "TTY_COMPATIBLE"}
    }
    path = os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])
    return {**env, "PYTHONPATH": path, "TERM": "xterm-256color", "COLUMNS": "200"}


def _on_terminal(args: list[str], *, stdout: Path | None = None) -> tuple[int, str]:
    """``dissensus ARGS`` with standard error (and standard output, unless ``stdout``
    names a file for it) on a pseudo-terminal; the exit code and what the terminal got."""
    master, slave = pty.openpty()
    out_file = stdout.open("wb") if stdout is not None else None
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "dissensus", *args],
            stdin=subprocess.DEVNULL,
            stdout=out_file if out_file is not None else slave,
            stderr=slave,
            env=_env(),
            close_fds=True,
        )
    finally:
        os.close(slave)
        if out_file is not None:
            out_file.close()
    got = bytearray()
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.5)
            if not ready:
                if proc.poll() is not None:
                    break
                continue
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: every writer of the terminal is gone
                break
            if not chunk:
                break
            got += chunk
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
    code = proc.wait(timeout=30)
    return code, got.decode("utf-8", "replace")


def _lines(screen: str) -> list[str]:
    """The terminal's lines, cursor and colour sequences taken out; of a line a carriage
    return went back over, what was written last (the bar overwritten by a record)."""
    lines = []
    for line in _ANSI.sub("", screen).replace("\r\n", "\n").split("\n"):
        parts = [part for part in line.split("\r") if part]
        lines.append(parts[-1] if parts else "")
    return lines


def _records_on(screen: str) -> list[str]:
    return [line for line in _lines(screen) if '"review_id"' in line or line.startswith("{")]


@pytest.fixture
def hostile_run(tmp_path: Path) -> tuple[Path, Path, Path]:
    same = "Option 1 states the refund window clearly."
    inp = write_jsonl(
        tmp_path / "c1.jsonl", [panel(HOSTILE_ID, ["1", "2"], reasoning=[same, same])]
    )
    policy = tmp_path / "pol.yaml"
    policy.write_text("reading:\n  similarity: tfidf\n", encoding="utf-8")
    return inp, policy, tmp_path / "j.db"


def test_decide_and_resume_on_a_terminal_print_the_table_and_no_json(
    hostile_run: tuple[Path, Path, Path],
) -> None:
    inp, policy, journal = hostile_run
    code, screen = _on_terminal(
        ["decide", str(inp), "--policy", str(policy), "--journal", str(journal)]
    )
    assert code == 0, screen
    assert "deciding" in screen  # the bar was drawn
    assert _records_on(screen) == [], screen
    assert any(line.startswith(SHOWN_ID) and "escalate" in line for line in _lines(screen))
    assert RAW.search(screen) is None, ascii(screen)
    run_id = re.search(r"^run (\S+)", "\n".join(_lines(screen)), re.M)
    assert run_id is not None, screen

    code, screen = _on_terminal(["runs", "resume", run_id.group(1), "--journal", str(journal)])
    assert code == 0, screen
    assert "resuming run" in screen  # its bar was drawn
    assert _records_on(screen) == [], screen
    assert any(line.startswith(SHOWN_ID) for line in _lines(screen)), screen
    assert RAW.search(screen) is None, ascii(screen)


def test_json_goes_to_the_file_standard_output_is_and_above_the_bar_on_a_terminal(
    hostile_run: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    inp, policy, journal = hostile_run
    args = ["decide", str(inp), "--policy", str(policy), "--journal", str(journal), "--json"]
    saved = tmp_path / "stdout.jsonl"
    code, screen = _on_terminal(args, stdout=saved)
    assert code == 0, screen
    assert "deciding" in screen
    assert _records_on(screen) == [], screen  # none on the terminal the bar is on
    (line,) = saved.read_text(encoding="utf-8").splitlines()
    assert json.loads(line)["id"] == HOSTILE_ID

    # On a terminal, --json writes the records there: whole lines, nothing raw in them.
    journal.unlink()
    code, screen = _on_terminal(args)
    assert code == 0, screen
    (shown,) = _records_on(screen)
    assert json.loads(shown)["id"] == HOSTILE_ID
    assert RAW.search(screen) is None, ascii(screen)
