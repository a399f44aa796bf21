"""Each command once per exit code that ``docs/cli.md`` lists for it, and no other code.

The table of docs/cli.md is parsed; every (command, code) pair it lists has a scenario
here, every scenario is listed there, and every command of the CLI is in the table.
Scenarios run in-process; the interrupted ones run in a forked child of the test process
that sends itself the signal (``test_cli_interrupt.py`` signals real processes), and the
killed run that ``runs resume`` is interrupted in is made by a forked child too.
"""

from __future__ import annotations

import json
import re
import signal
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from cli_helpers import Result, cli
from dissensus.llm.retry import Backoff
from fault_runner import forked
from pipeline_cases import panel, write_jsonl, write_policy
from test_convert_cli import _write_tiny
from test_guard_cli import _labelled_lines

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
EXAMPLES = REPO / "examples"


def _fresh(w: World, name: str) -> Path:
    """A journal of its own with run ``U`` decided from the good input (1 auto, 2 escalated)."""
    journal = w.root / f"{name}.sqlite"
    code = cli(
        "decide", w.good, "--policy", w.policy, "--journal", journal, "--run-id", "U", "--json"
    ).code
    assert code == 0
    return journal


def _claimed(w: World, command: str, ref: str, *extra: str) -> int:
    """``review resolve`` / ``confirm`` / ``claim`` as bob while alice holds a live claim
    on the case."""
    from dissensus.store import Journal

    journal = _fresh(w, f"claimed-{command}")
    with Journal(journal) as store:
        store.claim(ref, "alice", 600, run_id="U")
    note = () if command == "claim" else ("--note", "n")
    return cli(
        "review", command, ref, *extra, *note, "--reviewer", "bob", "--journal", journal
    ).code


def _undo(w: World, code: int) -> int:
    """0: kim undoes her own resolution; 1: nothing to undo (the case is open)."""
    journal = _fresh(w, f"undo-{code}")
    if code == 0:
        assert (
            cli(
                "review", "resolve", "U.2", "--decision", "2", "--note", "n",
                "--reviewer", "kim", "--journal", journal,
            ).code
            == 0
        )  # fmt: skip
    return cli("review", "undo", "U.2", "--reviewer", "kim", "--journal", journal).code


def _documented() -> dict[str, set[int]]:
    text = (REPO / "docs" / "cli.md").read_text(encoding="utf-8")
    out: dict[str, set[int]] = {}
    for m in re.finditer(r"^\| `([a-z -]+)` \| ([0-9 ]+) \|", text, flags=re.M):
        out[m.group(1)] = {int(c) for c in m.group(2).split()}
    return out


class World:
    """Input files shared by the scenarios (built lazily, once per module)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.good = write_jsonl(
            root / "good.jsonl",
            [panel("a", ["1", "1"], swap=["1", "1"]), panel("b", ["1", "2", "2"])],
        )
        self.mixed = write_jsonl(
            root / "mixed.jsonl", [panel("a", ["1", "1"], swap=["1", "1"]), "{not json"]
        )
        self.policy = write_policy(root / "p.yaml")
        self.labelled = root / "labelled.jsonl"
        self.labelled.write_text("\n".join(_labelled_lines()) + "\n")
        self.labelled_bad = root / "labelled-bad.jsonl"
        self.labelled_bad.write_text("\n".join([*_labelled_lines(), "{bad"]) + "\n")
        self.missing = root / "missing.jsonl"
        self.journal = root / "j.sqlite"
        self.failing = root / "failing.yaml"
        self.failing.write_text("rules: []\n")
        assert self.decide("R", self.good).code == 0
        assert self.decide("REJ", self.mixed).code == 3
        assert self.decide("FAIL", self.good, "--model", f"scripted:{self.failing}").code == 1

    def decide(self, run: str, inp: Path, *extra: str | Path) -> Result:
        return cli(
            "decide",
            inp,
            "--policy",
            self.policy,
            "--journal",
            self.journal,
            "--run-id",
            run,
            "--json",
            *extra,
        )


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    return World(tmp_path_factory.mktemp("exit-codes"))


def _signalled(argv: list[str | Path], after: int, sig: str = "SIGINT") -> int | None:
    """``dissensus ARGV`` in a forked child sent ``sig`` after its ``after``-th journalled event.

    (``test_cli_interrupt.py`` sends the signals to real ``python -m dissensus`` processes.)
    """
    return forked([str(a) for a in argv], after, getattr(signal, sig))


def _killed_in_a_fork(argv: list[str | Path], after: int) -> int | None:
    """``dissensus ARGV`` in a forked child killed after its ``after``-th journalled event."""
    return forked([str(a) for a in argv], after, signal.SIGKILL)


def _decide_130(w: World) -> int:
    # Enough panels (cases are committed up to 512 at a time) that the signal lands
    # mid-run: one that lands as the run completes
    # ends the command as the completed run (exit 0).
    many = write_jsonl(
        w.root / "many.jsonl", [panel(f"p{i}", ["1", "2", "2"]) for i in range(1500)]
    )
    return _signalled(
        [
            "decide",
            many,
            "--policy",
            w.policy,
            "--journal",
            w.root / "int.sqlite",
            "--run-id",
            "I",
        ],
        3,
    )


def _resume(w: World, code: int) -> int:
    if code == 130:
        j = w.root / "int2.sqlite"
        argv: list[str | Path] = [
            "decide",
            w.good,
            "--policy",
            w.policy,
            "--journal",
            j,
            "--run-id",
            "I",
        ]
        # One case per batch, so that the killed run and the resumed one each write
        # several batches (the forked children inherit the setting).
        from dissensus.pipeline import batch

        block, batch.BLOCK_CASES = batch.BLOCK_CASES, 1
        try:
            assert _killed_in_a_fork(argv, 3) == -signal.SIGKILL  # set-up: a killed run
            return _signalled(["runs", "resume", "I", "--journal", j], 2)
        finally:
            batch.BLOCK_CASES = block
    run = {0: "R", 1: "FAIL", 2: "nosuch", 3: "REJ"}[code]
    return cli("runs", "resume", run, "--journal", w.journal).code


def _tampered(w: World) -> int:
    j = w.root / "tampered.sqlite"
    j.write_bytes(w.journal.read_bytes())
    db = sqlite3.connect(j)
    db.execute("UPDATE events SET payload = '{}' WHERE run_id = 'R' AND seq = 1")
    db.commit()
    db.close()
    return cli("runs", "verify", "R", "--journal", j).code


def _certificate(w: World, tamper: bool) -> int:
    cert = w.root / "cert.json"
    problem = EXAMPLES / "concord" / "incident.yaml"
    assert cli("negotiate", problem, "--out", cert).code == 0
    if tamper:
        data = json.loads(cert.read_text())
        data["floor"] = 0.99
        cert.write_text(json.dumps(data))
    return cli("verify", cert).code


def _judge(w: World, code: int) -> int:
    outputs = w.root / "outputs.jsonl"
    if not outputs.exists():
        res = cli("deliberate", EXAMPLES / "dci" / "routine.yaml", "--method", "single", "--json")
        assert res.code == 0, res.err
        outputs.write_text(res.out)
    if code == 1:
        return cli("judge", outputs, "--model", f"scripted:{w.failing}").code
    if code == 3:
        bad = w.root / "outputs-bad.jsonl"
        bad.write_text(outputs.read_text() + "{bad\n")
        return cli("judge", bad).code
    return cli("judge", outputs if code == 0 else w.missing).code


def _negotiate_unreachable(w: World) -> int:
    env = {
        "OPENAI_BASE_URL": "http://127.0.0.1:9/v1",
        "OPENAI_API_KEY": "x",
        "DISSENSUS_MODEL": None,
    }
    # Every call is retried (28 attempts); the waits between them are not what is checked.
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Backoff, "delay", lambda self, attempt, retry_after=None: 0.0)
        res = cli(
            "negotiate", EXAMPLES / "concord" / "llm-checkout.yaml", "--model", "openai:m", env=env
        )
    assert "connection failed" in res.err
    return res.code


def _convert(kind: str, code: int, w: World) -> int:
    if kind == "llmbar":
        root = w.root / f"llmbar{code}"
        if code != 2:
            _write_tiny(root, ["1", "2"] if code == 0 else ["1", "bogus"])
        return cli("convert", "llmbar", root, "-o", w.root / "conv.jsonl").code
    src = w.root / f"varierrnli{code}.json"
    item = {
        "text": {
            "context": "The palace was built the next year.",
            "statement": "It took one year.",
        },
        "annotators": "Ann1,Ann2",
        "annotations": {"Ann1": "neutral", "Ann2": "entailment"},
        "other_info": {
            "explanations": ["No duration is given.", "The next year suggests one year."]
        },
    }
    if code == 0:
        src.write_text(json.dumps({"1": item}))
    elif code == 3:
        single = {
            **item,
            "annotators": "Ann1",
            "annotations": {"Ann1": "neutral"},
            "other_info": {"explanations": ["x"]},
        }
        src.write_text(json.dumps({"1": item, "2": single}))
    return cli("convert", "varierrnli", src, "-o", w.root / "conv.jsonl").code


SCENARIOS: dict[tuple[str, int], Callable[[World], int]] = {
    ("route", 0): lambda w: cli("route", w.good, "--similarity", "tfidf").code,
    ("route", 1): lambda w: (
        cli(
            "route", w.good, "--allow-code", "--similarity", "slow_embed:broken", "--theta-s", "0.5"
        ).code
    ),
    ("route", 2): lambda w: cli("route", w.missing).code,
    ("route", 3): lambda w: cli("route", w.mixed, "--similarity", "tfidf").code,
    ("calibrate-thresholds", 0): lambda w: (
        cli("calibrate-thresholds", w.good, "--quantile", "0.5", "--similarity", "tfidf").code
    ),
    ("calibrate-thresholds", 1): lambda w: (
        cli(
            "calibrate-thresholds",
            w.good,
            "--quantile",
            "0.5",
            "--allow-code",
            "--similarity",
            "slow_embed:broken",
        ).code
    ),
    ("calibrate-thresholds", 2): lambda w: (
        cli("calibrate-thresholds", w.good, "--quantile", "nan").code
    ),
    ("calibrate-thresholds", 3): lambda w: (
        cli("calibrate-thresholds", w.mixed, "--quantile", "0.5", "--similarity", "tfidf").code
    ),
    ("convert llmbar", 0): lambda w: _convert("llmbar", 0, w),
    ("convert llmbar", 2): lambda w: _convert("llmbar", 2, w),
    ("convert llmbar", 3): lambda w: _convert("llmbar", 3, w),
    ("convert varierrnli", 0): lambda w: _convert("varierrnli", 0, w),
    ("convert varierrnli", 2): lambda w: _convert("varierrnli", 2, w),
    ("convert varierrnli", 3): lambda w: _convert("varierrnli", 3, w),
    ("calibrate", 0): lambda w: cli("calibrate", w.labelled).code,
    ("calibrate", 2): lambda w: cli("calibrate", w.missing).code,
    ("calibrate", 3): lambda w: cli("calibrate", w.labelled_bad).code,
    ("vote", 0): lambda w: cli("vote", w.labelled).code,
    ("vote", 1): lambda w: cli("vote", w.labelled, "--strict").code,
    ("vote", 2): lambda w: cli("vote", w.labelled, "--beta", "nan").code,
    ("vote", 3): lambda w: cli("vote", w.labelled_bad).code,
    ("negotiate", 0): lambda w: cli("negotiate", EXAMPLES / "concord" / "incident.yaml").code,
    ("negotiate", 1): _negotiate_unreachable,
    ("negotiate", 2): lambda w: cli("negotiate", w.missing).code,
    ("verify", 0): lambda w: _certificate(w, tamper=False),
    ("verify", 1): lambda w: _certificate(w, tamper=True),
    ("verify", 2): lambda w: cli("verify", w.missing).code,
    ("bound", 0): lambda w: cli("bound", "--agents", "3", "--rounds", "2").code,
    ("bound", 2): lambda w: cli("bound", "--agents", "0", "--rounds", "2").code,
    ("deliberate", 0): lambda w: (
        cli("deliberate", EXAMPLES / "dci" / "routine.yaml", "--method", "single").code
    ),
    ("deliberate", 1): lambda w: (
        cli("deliberate", EXAMPLES / "dci" / "routine.yaml", "--max-calls", "1").code
    ),
    ("deliberate", 2): lambda w: cli("deliberate", w.missing).code,
    ("judge", 0): lambda w: _judge(w, 0),
    ("judge", 1): lambda w: _judge(w, 1),
    ("judge", 2): lambda w: _judge(w, 2),
    ("judge", 3): lambda w: _judge(w, 3),
    ("decide", 0): lambda w: w.decide("D0", w.good).code,
    ("decide", 1): lambda w: w.decide("D1", w.good, "--model", f"scripted:{w.failing}").code,
    ("decide", 2): lambda w: w.decide("D2", w.good, "--model", "bogus").code,
    ("decide", 3): lambda w: w.decide("D3", w.mixed).code,
    ("decide", 130): _decide_130,
    ("review list", 0): lambda w: cli("review", "list", "--journal", w.journal).code,
    ("review list", 2): lambda w: cli("review", "list", "--journal", w.root / "none.sqlite").code,
    ("review audits", 0): lambda w: cli("review", "audits", "--journal", w.journal).code,
    ("review audits", 2): lambda w: (
        cli("review", "audits", "--journal", w.root / "none.sqlite").code
    ),
    ("acceptance status", 0): lambda w: cli("acceptance", "status", "--journal", w.journal).code,
    ("acceptance status", 2): lambda w: (
        cli("acceptance", "status", "--journal", w.root / "none.sqlite").code
    ),
    ("review show", 0): lambda w: cli("review", "show", "R.2", "--journal", w.journal).code,
    ("review show", 2): lambda w: cli("review", "show", "R.9", "--journal", w.journal).code,
    ("review resolve", 0): lambda w: (
        cli(
            "review", "resolve", "R.2", "--decision", "2", "--note", "ok", "--journal", w.journal
        ).code
    ),
    ("review resolve", 2): lambda w: (
        cli(
            "review", "resolve", "R.2", "--decision", "2", "--note", " ", "--journal", w.journal
        ).code
    ),
    ("review confirm", 0): lambda w: (
        cli("review", "confirm", "R.1", "--note", "checked", "--journal", w.journal).code
    ),
    ("review confirm", 2): lambda w: (
        cli("review", "confirm", "R.2", "--note", "checked", "--journal", w.journal).code
    ),
    ("review resolve", 1): lambda w: _claimed(w, "resolve", "U.2", "--decision", "2"),
    ("review claim", 0): lambda w: cli("review", "claim", "R.2", "--journal", w.journal).code,
    ("review claim", 1): lambda w: _claimed(w, "claim", "U.2"),
    ("review claim", 2): lambda w: cli("review", "claim", "R.9", "--journal", w.journal).code,
    ("review confirm", 1): lambda w: _claimed(w, "confirm", "U.1"),
    ("review undo", 0): lambda w: _undo(w, 0),
    ("review undo", 1): lambda w: _undo(w, 1),
    ("review undo", 2): lambda w: cli("review", "undo", "R.9", "--journal", w.journal).code,
    ("runs list", 0): lambda w: cli("runs", "list", "--journal", w.journal).code,
    ("runs list", 2): lambda w: cli("runs", "list", "--journal", w.root / "none.sqlite").code,
    ("runs schema", 0): lambda w: cli("runs", "schema", "--journal", w.journal).code,
    ("runs schema", 2): lambda w: cli("runs", "schema", "--journal", w.root / "none.sqlite").code,
    ("runs show", 0): lambda w: cli("runs", "show", "R", "--journal", w.journal).code,
    ("runs show", 2): lambda w: cli("runs", "show", "nosuch", "--journal", w.journal).code,
    ("runs export", 0): lambda w: (
        cli("runs", "export", "R", "--journal", w.journal, "-o", w.root / "export.jsonl").code
    ),
    ("runs export", 2): lambda w: (
        cli("runs", "export", "R", "--journal", w.journal, "-o", w.journal).code
    ),
    ("runs verify", 0): lambda w: cli("runs", "verify", "R", "--journal", w.journal).code,
    ("runs verify", 1): _tampered,
    ("runs verify", 2): lambda w: cli("runs", "verify", "nosuch", "--journal", w.journal).code,
    ("runs resume", 0): lambda w: _resume(w, 0),
    ("runs resume", 1): lambda w: _resume(w, 1),
    ("runs resume", 2): lambda w: _resume(w, 2),
    ("runs resume", 3): lambda w: _resume(w, 3),
    ("runs resume", 130): lambda w: _resume(w, 130),
    ("fake-llm", 2): lambda w: cli("fake-llm", "--script", w.missing).code,
    ("mcp", 2): lambda w: cli("mcp", "--journal").code,
    ("version", 0): lambda w: cli("version").code,
    ("serve", 2): lambda w: cli("serve", "--host", "0.0.0.0").code,
    ("serve-token", 0): lambda w: cli("serve-token", "kim", "review").code,
    ("serve-token", 2): lambda w: cli("serve-token", "kim", "no-such-role").code,
    ("calibrate-acceptance", 0): lambda w: _calibrate_acceptance(w, bad=False),
    ("calibrate-acceptance", 2): lambda w: (
        cli("calibrate-acceptance", w.missing, "--out", w.root / "acc.json").code
    ),
    ("calibrate-acceptance", 3): lambda w: _calibrate_acceptance(w, bad=True),
    ("convert zeroeval", 0): lambda w: _convert_zeroeval(w, bad=False),
    ("convert zeroeval", 2): lambda w: (
        cli("convert", "zeroeval", w.missing, "-o", w.root / "z.jsonl").code
    ),
    ("convert zeroeval", 3): lambda w: _convert_zeroeval(w, bad=True),
}


def _calibrate_acceptance(w: World, *, bad: bool) -> int:
    """The bundled LLMBar panels carry their gold in ``meta.gold``."""
    src = REPO / "examples" / "llmbar-swap.jsonl"
    lines = src.read_text(encoding="utf-8").splitlines()[:60]
    labelled = w.root / ("acc-bad.jsonl" if bad else "acc.jsonl")
    labelled.write_text("\n".join([*lines, "{bad"] if bad else lines) + "\n", encoding="utf-8")
    return cli(
        "calibrate-acceptance",
        labelled,
        "--out",
        w.root / "acc.json",
        "--policy",
        w.policy,
        "--min-accepted",
        "5",
    ).code


def _convert_zeroeval(w: World, *, bad: bool) -> int:
    folder = w.root / "zeroeval"
    folder.mkdir(exist_ok=True)
    for model, answer in (("gemma-2-9b-it", "18"), ("Qwen2-7B-Instruct", "17")):
        out = json.dumps({"reasoning": "9 * 2 = 18", "answer": answer})
        # A gold that is not a number skips the problem (reported, exit 3).
        gold = "# banana" if bad else "# 18"
        row = {"session_id": "s1", "question": "2 * 9?", "output": [out], "answer": gold}
        (folder / f"{model}.json").write_text(json.dumps([row]), encoding="utf-8")
    return cli("convert", "zeroeval", folder, "-o", w.root / "z.jsonl").code


def test_the_documented_table_matches_the_scenarios_and_the_cli() -> None:
    documented = _documented()
    assert {(c, k) for c, codes in documented.items() for k in codes} == set(SCENARIOS)
    from typer.main import get_command

    from dissensus.cli import app

    root = get_command(app)
    names: set[str] = set()
    for name, command in root.commands.items():  # type: ignore[attr-defined]
        sub = getattr(command, "commands", None)
        names |= {f"{name} {s}" for s in sub} if sub else {name}
    assert names == set(documented)


@pytest.mark.parametrize(("command", "code"), sorted(SCENARIOS))
def test_each_command_once_per_code(world: World, command: str, code: int) -> None:
    assert SCENARIOS[(command, code)](world) == code
