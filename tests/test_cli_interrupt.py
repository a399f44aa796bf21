"""Interrupts and pipes, through real processes.

* SIGINT / SIGTERM during ``decide`` (also while embedding, without waiting for the
  embedding to return): exit 130 with a resume command that works, and the resumed run ends with the records of an
  uninterrupted one.
* ``... --json | head -1``: exit 0, nothing on stderr, for every command that streams
  (``decide`` names the resume command when its run stopped with the output)
  (``route`` in a real shell pipeline; the others as forked children of the test process
  writing into a pipe whose reader goes away after the first line, which is the same
  for the command and needs no interpreter start).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from cli_helpers import cli
from dissensus.pipeline.review import final_records
from dissensus.store import Journal
from fault_runner import forked
from pipeline_cases import crash_script, mixed_batch, panel, write_jsonl, write_policy

TESTS = Path(__file__).resolve().parent
RUNNER = str(TESTS / "fault_runner.py")


def _env(**extra: str) -> dict[str, str]:
    path = os.pathsep.join(
        [str(TESTS.parent / "src"), str(TESTS), os.environ.get("PYTHONPATH", "")]
    )
    return {**os.environ, "PYTHONPATH": path, **extra}


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_an_interrupted_decide_says_how_to_resume_and_resumes_identically(
    tmp_path: Path, sig: str
) -> None:
    inp = write_jsonl(tmp_path / "in.jsonl", mixed_batch())
    pol = write_policy(tmp_path / "p.yaml")
    script = crash_script(tmp_path / "s.yaml")

    def argv(name: str) -> list[str]:
        return ["decide", str(inp), "--policy", str(pol), "--journal", str(tmp_path / f"{name}.sqlite"), "--run-id", "R",
                "--model", f"scripted:{script}", "--json"]  # fmt: skip

    assert cli(*argv("base")).code == 3
    proc = subprocess.run(
        [sys.executable, RUNNER, "12", sig, *argv("cut")],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=120,
        check=False,
    )
    assert proc.returncode == 130, proc.stderr
    journal = tmp_path / "cut.sqlite"
    expected = f"interrupted: resume with dissensus runs resume R --journal {journal} --json"
    assert proc.stderr.strip().splitlines()[-1] == expected
    assert "Traceback" not in proc.stderr
    with Journal(journal) as j:
        assert j.verify("R").ok and j.get("R", "run/finished") is None
    resumed = cli("runs", "resume", "R", "--journal", journal, "--json")
    assert resumed.code == 3, resumed.err
    with Journal(journal) as j, Journal(tmp_path / "base.sqlite") as b:
        assert j.verify("R").ok
        assert final_records(j, "R") == final_records(b, "R")


def test_sigint_while_embedding_stops_without_waiting_for_it(tmp_path: Path) -> None:
    inp = write_jsonl(tmp_path / "in.jsonl", [panel(f"p{i}", ["1", "2"]) for i in range(3)])
    pol = write_policy(
        tmp_path / "p.yaml",
        {"reading": {"similarity": "slow_embed:embed", "theta_s": 0.5}, "allow_code": True},
    )
    marker = tmp_path / "embedding"
    j = tmp_path / "j.sqlite"
    env = _env(SLOW_EMBED_MARKER=str(marker), DISSENSUS_CACHE=str(tmp_path / "cache"))
    cmd = [
        sys.executable,
        "-m",
        "dissensus",
        "decide",
        str(inp),
        "--policy",
        str(pol),
        "--journal",
        str(j),
        "--run-id",
        "E",
    ]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env
    )
    assert proc.stderr is not None
    try:
        deadline = time.monotonic() + 60
        while not marker.exists():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        line = proc.stderr.readline()  # the run has stopped when it says so
        # The embedding sleeps a minute: it is still asleep when the run says it stopped.
        returned_before_the_stop = Path(str(marker) + ".returned").exists()
        rest = proc.stderr.read()
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, line + rest
    assert line.strip() == f"interrupted: resume with dissensus runs resume E --journal {j}", (
        line + rest
    )
    assert not returned_before_the_stop


# Every command must write well over a pipe's 64 KiB, or it could finish before the reader
# closes the pipe and the closed pipe would go untested. Long panel ids (every record and
# review item repeats its id) give that with few panels: each command below writes over
# 130 KB (2 pipe buffers) from 160 panels or 1,000 vote cases.
LONG_ID = "panel-" + "x" * 600


def _big_inputs(tmp_path: Path) -> dict[str, Path]:
    panels = [
        panel(f"{LONG_ID}-{i}", ["1", "1", "2"][: 2 + i % 2], swap=["1", "1", "1"][: 2 + i % 2])
        for i in range(160)
    ]
    vote = {"agent": "a", "answer": "x", "evidence_source": "kb", "evidence_present": True}
    cases = [
        {"id": i, "votes": [vote, {**vote, "agent": "b", "evidence_source": "web"}]}
        for i in range(1000)
    ]
    return {
        "panels": write_jsonl(tmp_path / "panels.jsonl", panels),
        "votes": write_jsonl(tmp_path / "votes.jsonl", cases),
    }


@pytest.mark.slow
def test_json_into_a_closed_pipe_exits_zero_silently(tmp_path: Path, shared_data: Path) -> None:
    files = _big_inputs(tmp_path)
    j = tmp_path / "j.sqlite"
    pol = write_policy(
        tmp_path / "p.yaml",
        {
            "routing": {"convergent_disagreement_without_values": "escalate"},
            "seek_context": {"followup": "none"},
        },
    )
    assert (
        cli(
            "decide",
            files["panels"],
            "--policy",
            pol,
            "--journal",
            j,
            "--run-id",
            "R",
            "-o",
            tmp_path / "o.jsonl",
        ).code
        == 0
    )
    commands = {
        "vote": ["vote", files["votes"], "--json"],
        "convert": ["convert", "llmbar", shared_data / "llmbar", "--per-subset", "200"],
        "runs export": ["runs", "export", "R", "--journal", j],
        "review list": ["review", "list", "--journal", j, "--json"],
    }
    # One real pipeline through the real entry point, in a fresh interpreter ...
    route = ["route", files["panels"], "--similarity", "tfidf", "--json"]
    line = " ".join(f"'{a}'" for a in [sys.executable, "-m", "dissensus", *map(str, route)])
    proc = subprocess.run(
        ["bash", "-c", f"{line} | head -1 >/dev/null; exit ${{PIPESTATUS[0]}}"],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=300,
        check=False,
    )
    assert (proc.returncode, proc.stderr) == (0, ""), "route"
    # ... and every other command as a forked process of this one (no interpreter start).
    for name, args in commands.items():
        code, first, err = _into_a_pipe_closed_after_one_line(
            [str(a) for a in args], tmp_path / "stderr"
        )
        assert first, name  # the output had started when the reader went away
        assert (code, err) == (0, ""), name
    # decide stops with its output: exit 0 too, and the line that finishes the run.
    j2 = tmp_path / "j2.sqlite"
    many = write_jsonl(tmp_path / "many.jsonl", [panel(f"p{i}", ["1", "2"]) for i in range(3000)])
    argv = ["decide", many, "--policy", pol, "--journal", j2, "--run-id", "P", "--json"]
    code, first, err = _into_a_pipe_closed_after_one_line(
        [str(a) for a in argv], tmp_path / "stderr"
    )
    assert first and code == 0
    with Journal(j2) as journal:
        finished = journal.get("P", "run/finished") is not None
    resume = f"standard output was closed: run P stopped; finish it with dissensus runs resume P --journal {j2} --json"
    assert err.strip() == ("" if finished else resume)
    if not finished:
        assert cli("runs", "resume", "P", "--journal", j2, "-o", tmp_path / "p.jsonl").code == 0


def test_a_run_stopped_by_a_closed_pipe_names_its_output_and_rejects_file(
    tmp_path: Path,
) -> None:
    """``decide ... --rejects R --json`` into a pipe already closed: the line that
    finishes the run names ``--json`` and ``--rejects R`` as every other resume line
    does, and that command, run as shown, writes the rejected line the stop cut off."""
    rows: list[dict[str, Any] | str] = [panel(f"p{i}", ["1", "2"]) for i in range(2000)]
    many = write_jsonl(tmp_path / "many.jsonl", [*rows, "{bad"])
    pol = write_policy(tmp_path / "p.yaml")
    j, rejects = tmp_path / "j.sqlite", tmp_path / "rj.jsonl"
    argv = ["decide", many, "--policy", pol, "--journal", j, "--run-id", "P", "--rejects", rejects, "--json"]  # fmt: skip
    r, w = os.pipe()
    os.close(r)  # the reader went away before the first record
    with open(tmp_path / "stderr", "w+b") as err:
        try:
            code = forked([str(a) for a in argv], stdout=w, stderr=err.fileno())
        finally:
            os.close(w)
        err.seek(0)
        said = err.read().decode()
    assert code == 0
    with Journal(j) as journal:
        assert journal.get("P", "run/finished") is None
    resume = f"runs resume P --journal {j} --json --rejects {rejects}"
    assert said.splitlines()[-1] == (
        f"standard output was closed: run P stopped; finish it with dissensus {resume}"
    )
    assert not rejects.exists() or rejects.read_text() == ""  # the bad line was not reached
    assert cli(*resume.split()).code == 3
    [rejected] = [json.loads(line) for line in rejects.read_text().splitlines()]
    assert (rejected["line"], rejected["raw"]) == (2001, "{bad")


def test_human_output_into_a_closed_pipe_exits_zero_silently(tmp_path: Path) -> None:
    """Tables and text (no ``--json``) cut short by a closed pipe: exit 0, nothing on
    stderr, as for JSON output (the console's own reaction would be a silent exit 1)."""
    files = _big_inputs(tmp_path)
    j = tmp_path / "j.sqlite"
    pol = write_policy(
        tmp_path / "p.yaml",
        {
            "routing": {"convergent_disagreement_without_values": "escalate"},
            "seek_context": {"followup": "none"},
        },
    )
    res = cli("decide", files["panels"], "--policy", pol, "--journal", j, "--run-id", "R")
    assert res.code == 0, res.err
    commands = {
        "vote": ["vote", files["votes"]],
        "route": ["route", files["panels"], "--similarity", "tfidf"],
        "runs show": ["runs", "show", "R", "--journal", j],
        "review list": ["review", "list", "--journal", j],
    }
    for name, args in commands.items():
        code, first, err = _into_a_pipe_closed_after_one_line(
            [str(a) for a in args], tmp_path / "stderr"
        )
        assert first, name
        assert (code, err) == (0, ""), name


def _into_a_pipe_closed_after_one_line(
    argv: list[str], err_path: Path
) -> tuple[int | None, bytes, str]:
    """``dissensus ARGV | head -1`` with ``dissensus`` a forked child of this process.

    Returns the child's exit code, the first line read and its standard error.
    """
    r, w = os.pipe()
    first = bytearray()

    def head() -> None:
        while b"\n" not in first and (chunk := os.read(r, 65536)):
            first.extend(chunk)
        os.close(r)

    reader = threading.Thread(target=head)
    reader.start()
    with open(err_path, "w+b") as err:
        try:
            code = forked(argv, stdout=w, stderr=err.fileno(), close=(r,))
        finally:
            os.close(w)  # the reader sees the end if the child wrote no whole line
            reader.join()
        err.seek(0)
        return code, bytes(first).split(b"\n")[0], err.read().decode("utf-8", "replace")


def _wait_for(predicate: Any, proc: subprocess.Popen[str], seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.05)


@pytest.mark.parametrize(
    ("command", "sig", "ignore_sigint", "code"),
    [
        # deliberate has no handler of its own: Ctrl-C and SIGTERM are exit 130.
        ("deliberate", signal.SIGTERM, False, 130),
        # A background job of a script ignores SIGINT: SIGTERM must still stop it.
        ("deliberate", signal.SIGTERM, True, 130),
        # negotiate's Ctrl-C cancels the negotiation and prints its record (exit 0).
        ("negotiate", signal.SIGINT, False, 0),
        ("negotiate", signal.SIGTERM, False, 0),
    ],
)
def test_sigterm_stops_a_command_waiting_on_a_model_as_sigint_does(
    command: str, sig: signal.Signals, ignore_sigint: bool, code: int
) -> None:
    """A command waiting on a slow model: SIGTERM does what Ctrl-C does, never a death by
    signal (nor a hang)."""
    from dissensus.llm.fakeserver import FakeServer, ServerSettings

    examples = TESTS.parent / "examples"
    problem = {"deliberate": examples / "dci" / "risk.yaml",
               "negotiate": examples / "concord" / "llm-checkout.yaml"}[command]  # fmt: skip
    server = FakeServer(settings=ServerSettings(latency_s=60)).start()

    def no_sigint() -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)

    try:
        env = _env(OPENAI_BASE_URL=server.base_url, OPENAI_API_KEY="test")
        cmd = [sys.executable, "-m", "dissensus", command, str(problem), "--model", "openai:fake-model"]  # fmt: skip
        proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            preexec_fn=no_sigint if ignore_sigint else None,
        )
        try:
            _wait_for(lambda: server.requests_received > 0, proc)
            proc.send_signal(sig)
            out, err = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
    finally:
        server.stop()
    assert proc.returncode == code, err
    assert "Traceback" not in err
    if command == "negotiate":
        assert "cancelled" in out, out


def test_sigterm_stops_fake_llm_as_sigint_does(tmp_path: Path) -> None:
    """``fake-llm`` serves until interrupted and then exits 0 (llm.md): SIGTERM too."""
    script = tmp_path / "rules.yaml"
    script.write_text("default: ok\n", encoding="utf-8")
    cmd = [sys.executable, "-m", "dissensus", "fake-llm", "--port", "0", "--script", str(script)]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=_env()
    )
    assert proc.stderr is not None
    try:
        line = proc.stderr.readline()
        assert line.startswith("listening on http://127.0.0.1:"), line
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "Traceback" not in err


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupt_while_the_command_line_loads_is_one_line(sig: signal.Signals) -> None:
    """Ctrl-C (or SIGTERM) in the first tenths of a second, while the command line's
    modules are still being imported: one line and exit 130, no traceback."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "dissensus", "route", "-"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
    )
    maps = Path(f"/proc/{proc.pid}/maps")
    try:
        # pydantic's compiled core is loaded only by the command line's imports (``import
        # dissensus`` loads nothing): its mapping shows the import under way.
        _wait_for(lambda: "pydantic_core" in maps.read_text(), proc)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    # 130, or a death by SIGINT itself (what a shell reports as 130 too) when the signal
    # lands as the interpreter hands the exit over; once the command runs, Ctrl-C ends it
    # silently (the CLI framework's 130), so the line is there or nothing is.
    assert proc.returncode in (130, -signal.SIGINT), err
    assert "Traceback" not in err
    assert err.strip() == "interrupted", err


# The signal lands inside a weak reference's callback (as it can inside the import
# machinery's module locks): the interpreter reports the callback's exception and goes on.
_INTERRUPT_IN_A_CALLBACK = """
import os, signal, sys, types, weakref
import dissensus.__main__ as main

class Held: ...

def callback(_):
    os.kill(os.getpid(), signal.SIGINT)
    for _ in range(100_000):
        pass

def command_line(name):
    held = Held()
    ref = weakref.ref(held, callback)
    del held
    return lambda: print("the command ran")

loading = types.ModuleType("dissensus.cli")
loading.__getattr__ = command_line
sys.modules["dissensus.cli"] = loading
main.main()
"""


def test_an_interrupt_inside_a_callback_the_interpreter_ignores_is_one_line(
    tmp_path: Path,
) -> None:
    """A signal whose ``KeyboardInterrupt`` is raised in a callback the interpreter
    reports and ignores, while the command line loads: the command still stops with one
    line, and the interpreter's "Exception ignored in" report is not printed."""
    script = tmp_path / "load.py"
    script.write_text(_INTERRUPT_IN_A_CALLBACK)
    proc = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, env=_env(), timeout=60
    )
    assert proc.returncode == 130, proc.stderr
    assert proc.stdout == ""
    assert proc.stderr == "interrupted\n"


# The signal lands inside a library's import, which turns the KeyboardInterrupt into an
# error of its own (numpy's "failed to import", a class whose __set_name__ failed).
_INTERRUPT_WRAPPED_BY_AN_IMPORT = """
import os, signal, sys, types
import dissensus.__main__ as main

def command_line(name):
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(1_000_000):
            pass
    except KeyboardInterrupt as exc:
        raise ImportError("a module failed to import") from exc
    return lambda: print("the command ran")

loading = types.ModuleType("dissensus.cli")
loading.__getattr__ = command_line
sys.modules["dissensus.cli"] = loading
main.main()
"""


def test_an_interrupt_a_library_wraps_while_the_command_line_loads_is_one_line(
    tmp_path: Path,
) -> None:
    script = tmp_path / "load.py"
    script.write_text(_INTERRUPT_WRAPPED_BY_AN_IMPORT)
    proc = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, env=_env(), timeout=60
    )
    assert proc.returncode == 130, proc.stderr
    assert proc.stderr == "interrupted\n"


def test_an_interrupt_a_library_wraps_while_a_command_runs_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Ctrl-C inside a command's lazy import or a schema being built, which the library
    turned into its own error: the command stops as on Ctrl-C, not with a traceback."""
    import dissensus.engines

    def wrapped(*args: Any, **kwargs: Any) -> str:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as exc:
            raise RuntimeError("Error calling __set_name__ on 'Field' instance") from exc

    monkeypatch.setattr(dissensus.engines, "check_engine", wrapped)
    inp = write_jsonl(tmp_path / "in.jsonl", [panel("a", ["1", "2", "1"])])
    done = cli("decide", inp, "--journal", tmp_path / "j.sqlite")
    assert done.code == 130
    assert done.err.strip() == "interrupted"


def test_an_interrupt_the_cli_framework_catches_is_still_said(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Ctrl-C while a command checks its options, before its own handling: the CLI
    framework turns it into exit 130 without a word; the command line says it."""
    import dissensus.engines

    def interrupted(*args: Any, **kwargs: Any) -> str:
        raise KeyboardInterrupt

    monkeypatch.setattr(dissensus.engines, "check_engine", interrupted)
    inp = write_jsonl(tmp_path / "in.jsonl", [panel("a", ["1", "2", "1"])])
    done = cli("decide", inp, "--journal", tmp_path / "j.sqlite")
    assert done.code == 130
    assert done.err.strip() == "interrupted"


@pytest.mark.parametrize("command", ["decide", "resume"])
def test_an_interrupt_after_the_run_began_before_its_loop_names_the_resume(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: str
) -> None:
    """A signal once ``run.started`` is journalled but before the run's loop takes it over
    (here: while the input's lines are counted for the progress bar) names the resume
    command, as one during the loop does, and the run resumes to its full records."""
    import dissensus.cli.decide
    import dissensus.cli.runs

    inp = write_jsonl(tmp_path / "in.jsonl", mixed_batch())
    pol = write_policy(tmp_path / "p.yaml")
    journal = tmp_path / "j.sqlite"
    base = tmp_path / "base.sqlite"
    assert cli("decide", inp, "--policy", pol, "--journal", base, "--run-id", "R").code in (0, 3)

    def interrupted(*args: Any, **kwargs: Any) -> int:
        raise KeyboardInterrupt

    with_progress = {"DISSENSUS_PROGRESS": "1"}
    monkeypatch.setattr(dissensus.cli.decide, "count_lines", interrupted)
    done = cli("decide", inp, "--policy", pol, "--journal", journal, "--run-id", "R",
               env=with_progress)  # fmt: skip
    if command == "resume":
        assert done.code == 130, done.err
        monkeypatch.setattr(dissensus.cli.runs, "count_lines", interrupted)
        done = cli("runs", "resume", "R", "--journal", journal, env=with_progress)
    assert done.code == 130, done.err
    assert done.err.strip().splitlines()[-1] == (
        f"interrupted: resume with dissensus runs resume R --journal {journal}"
    )
    monkeypatch.undo()
    assert cli("runs", "resume", "R", "--journal", journal).code in (0, 3)
    with Journal(journal) as j, Journal(base) as b:
        assert j.verify("R").ok
        assert final_records(j, "R") == final_records(b, "R")


# The signal lands once the command line has loaded, before its own handlers are in place
# (here: as it checks its standard streams, the first thing it does).
_INTERRUPT_AT_THE_HANDOVER = """
import os, signal, sys
import dissensus.__main__ as main
import dissensus.cli as cli

checked = cli._closed_streams

def streams():
    os.kill(os.getpid(), signal.{sig})
    checked()

cli._closed_streams = streams
sys.argv = ["dissensus", "route", "-"]
main.main()
"""


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_an_interrupt_as_the_loaded_command_line_takes_over_is_one_line(
    tmp_path: Path, sig: str
) -> None:
    """A signal between the command line's loading and its own handlers (a SIGTERM there
    met the default action and ended the process without a word; a Ctrl-C, a traceback):
    it waits for the handlers, and the command stops with one line and exit 130."""
    script = tmp_path / "handover.py"
    script.write_text(_INTERRUPT_AT_THE_HANDOVER.replace("{sig}", sig))
    proc = subprocess.run(
        [sys.executable, str(script)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=_env(),
        timeout=60,
    )
    assert proc.returncode == 130, proc.stderr
    assert proc.stdout == ""
    assert proc.stderr == "interrupted\n"


# The signal is sent before the command line parses anything (as it checks its standard
# streams, the first thing it does); it is held until the command line's handlers are in.
_INTERRUPT_BEFORE_PARSING = """
import os, signal, sys
import dissensus.__main__ as main
import dissensus.cli as cli

checked = cli._closed_streams

def streams():
    os.kill(os.getpid(), signal.SIGINT)
    checked()

cli._closed_streams = streams
sys.argv = ["dissensus", *sys.argv[1:]]
main.main()
"""


@pytest.mark.parametrize(
    ("args", "env", "said"),
    [
        (["R", "--journal", "jw.sqlite", "--json"], {}, "R --journal jw.sqlite --json"),
        (["-o", "f", "--journal=a b.sqlite", "--deadline", "5", "R2"], {}, "R2 --journal 'a b.sqlite' --output f"),
        (["-oa b.jsonl", "R5", "--output=o.jsonl", "--json"], {}, "R5 --output o.jsonl"),
        (["R6", "-o", "-"], {}, "R6 --output -"),
        (["R7", "--rejects", "r j.jsonl", "--json"], {}, "R7 --json --rejects 'r j.jsonl'"),
        (["R3"], {"DISSENSUS_JOURNAL": "env.sqlite"}, "R3"),
        (["R4"], {}, "R4"),
    ],
)  # fmt: skip
def test_runs_resume_interrupted_at_once_names_the_resume_command(
    tmp_path: Path, args: list[str], env: dict[str, str], said: str
) -> None:
    """``runs resume`` names its resume command from its first moment: a signal before
    its options are parsed says the same line as one while it runs (the journal as
    given, else the environment's or the default), not a bare ``interrupted``."""
    script = tmp_path / "at_once.py"
    script.write_text(_INTERRUPT_BEFORE_PARSING)
    proc = subprocess.run(
        [sys.executable, str(script), "runs", "resume", *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env={k: v for k, v in _env(**env).items() if env or k != "DISSENSUS_JOURNAL"},
        cwd=tmp_path,
        timeout=60,
    )
    assert proc.returncode == 130, proc.stderr
    assert proc.stdout == ""
    assert proc.stderr == f"interrupted: resume with dissensus runs resume {said}\n"
    assert not list(tmp_path.glob("*.sqlite")), "nothing was opened"


def test_another_command_interrupted_at_once_says_interrupted(tmp_path: Path) -> None:
    script = tmp_path / "at_once.py"
    script.write_text(_INTERRUPT_BEFORE_PARSING)
    proc = subprocess.run(
        [sys.executable, str(script), "runs", "show", "R", "--journal", "j.sqlite"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=_env(),
        cwd=tmp_path,
        timeout=60,
    )
    assert proc.returncode == 130, proc.stderr
    assert proc.stderr == "interrupted\n"


# The signal lands while the command line loads (as the first of its modules is imported).
_INTERRUPT_WHILE_LOADING = """
import os, signal, sys
import dissensus.__main__ as main

class Interrupting:
    def find_spec(self, name, path=None, target=None):
        if name == "dissensus.cli":
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signal.SIGINT)
        return None

sys.meta_path.insert(0, Interrupting())
sys.argv = ["dissensus", *sys.argv[1:]]
main.main()
"""


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["runs", "resume", "R", "--journal", "j.sqlite", "-o", "out.jsonl"],
         "interrupted: resume with dissensus runs resume R --journal j.sqlite --output out.jsonl"),
        (["runs", "resume", "R", "--json"], "interrupted: resume with dissensus runs resume R --json"),
        (["runs", "show", "R"], "interrupted"),
    ],
)  # fmt: skip
def test_an_interrupt_while_the_command_line_loads_names_the_resume_command(
    tmp_path: Path, args: list[str], said: str
) -> None:
    """A ``runs resume`` stopped while the command line loads (its first few tenths of a
    second) names its resume command, with its output, as it does once it runs; it
    said only ``interrupted``, though the run it resumes is journalled."""
    script = tmp_path / "loading.py"
    script.write_text(_INTERRUPT_WHILE_LOADING)
    proc = subprocess.run(
        [sys.executable, str(script), *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env={k: v for k, v in _env().items() if k != "DISSENSUS_JOURNAL"},
        cwd=tmp_path,
        timeout=60,
    )
    assert proc.returncode == 130, proc.stderr
    assert proc.stdout == ""
    assert proc.stderr == said + "\n"
    assert not list(tmp_path.glob("*.sqlite")), "nothing was opened"


@pytest.mark.parametrize(
    ("args", "said"),
    [(["--output", "o u t.jsonl"], " --output 'o u t.jsonl'"), (["--json"], " --json"), ([], "")],
)
def test_runs_resume_interrupted_as_it_starts_names_its_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], said: str
) -> None:
    """A signal while ``runs resume`` opens the journal and checks the run (its first
    second on a long run) names the output as every other resume line does: without
    it the command copied resumed into a table and the file never got its records."""
    import dissensus.cli.runs

    def interrupted(*args: Any, **kwargs: Any) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(dissensus.cli.runs, "_resume", interrupted)
    journal = tmp_path / "j.sqlite"
    done = cli("runs", "resume", "R", "--journal", journal, *args)
    assert done.code == 130
    assert (
        done.err == f"interrupted: resume with dissensus runs resume R --journal {journal}{said}\n"
    )


@pytest.mark.parametrize("committed", [True, False])
def test_an_interrupt_as_the_run_is_started_names_the_resume_once_it_is_journalled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, committed: bool
) -> None:
    """A signal as ``run.started`` is committed (the commit done, the call not yet
    returned) names the resume command of the run, its random id included, with its
    output; it said only ``interrupted``, though the run was journalled. One before the
    commit says ``interrupted``: no run exists."""
    import dissensus.pipeline.batch

    start_run = dissensus.pipeline.batch.start_run

    def interrupted(*args: Any, **kwargs: Any) -> Any:
        if committed:
            start_run(*args, **kwargs)
        raise KeyboardInterrupt

    monkeypatch.setattr(dissensus.pipeline.batch, "start_run", interrupted)
    inp = write_jsonl(tmp_path / "in.jsonl", [panel("a", ["1", "2", "1"])])
    journal, out = tmp_path / "j.sqlite", tmp_path / "out.jsonl"
    done = cli("decide", inp, "--journal", journal, "--output", out)
    assert done.code == 130
    with Journal(journal) as j:
        runs = [r.run_id for r in j.runs()]
    if not committed:
        assert done.err == "interrupted\n" and runs == []
        return
    [run_id] = runs
    assert done.err == (
        f"interrupted: resume with dissensus runs resume {run_id} --journal {journal} "
        f"--output {out}\n"
    )
    monkeypatch.undo()
    assert cli("runs", "resume", run_id, "--journal", journal, "--output", out).code == 0
    assert out.read_text().count("\n") == 1
