"""No byte, number, typo or configuration error crashes a run, loses a record or hides text.

Regression tests, in-process (``dissensus.cli.main``): every bad line of ``decide`` is a
per-line reject and the run completes; paths, policy and model spec are checked before
a run is created; review screens print agents' text exactly; configuration files are
read safely; smaller CLI defects.
"""

from __future__ import annotations

import json
import sqlite3
import typing
from pathlib import Path
from typing import Any

import pytest

from cli_helpers import cli
from dissensus.pipeline.durable import case_step
from dissensus.store import Journal
from pipeline_cases import panel, write_jsonl, write_policy

NASTY = "[b]bold[/b] [/INST] [/] :smile: [link=x]l[/link] \x1b[31mred\x1b[0m שלום עולם ‮evil"


def _good(i: int) -> str:
    return json.dumps(panel(f"g{i}", ["1", "1", "1"], swap=["1", "1", "1"]))


def _bad_lines() -> list[bytes]:
    base = panel("bad", ["1", "1"], values=[{"v": 0.5}, {"v": 0.5}])
    text = json.dumps(base)
    return [
        b'{"id": "x\xff\xfe", "outputs": []}',  # not UTF-8
        text.replace("0.5", "NaN", 1).encode(),
        text.replace("0.5", "Infinity", 1).encode(),
        text.replace("0.5", "1e999", 1).encode(),
        text.replace('"meta": {', '"meta": {"w": [-Infinity], ', 1).encode(),
        text.replace("agent 1", "\\ud800", 1).encode(),  # lone surrogate escape
        b'{"id": "deep", "meta": ' + b"[" * 1000 + b"]" * 1000 + b', "outputs": []}',
    ]


def _mixed(tmp_path: Path) -> tuple[Path, bytes]:
    data = b"\xef\xbb\xbf" + _good(0).encode() + b"\n"  # a BOM before the first record
    for i, bad in enumerate(_bad_lines(), start=1):
        data += bad + b"\n" + _good(i).encode() + b"\n"
    path = tmp_path / "in.jsonl"
    path.write_bytes(data)
    return path, data


def _runs(journal: Path) -> list[dict[str, Any]]:
    res = cli("runs", "list", "--journal", journal, "--json")
    assert res.code == 0, res.err
    return [json.loads(x) for x in res.out.splitlines()]


@pytest.mark.parametrize("source", ["file", "stdin"])
def test_decide_rejects_each_bad_line_and_completes_the_run(tmp_path: Path, source: str) -> None:
    path, data = _mixed(tmp_path)
    pol = write_policy(tmp_path / "p.yaml")
    j = tmp_path / "j.sqlite"
    rej = tmp_path / "rej.jsonl"
    arg = str(path) if source == "file" else "-"
    res = cli("decide", arg, "--policy", pol, "--journal", j, "--json", "--rejects", rej, "--run-id", "R",
              stdin=data if source == "stdin" else None)  # fmt: skip
    assert res.code == 3, res.err
    assert "Traceback" not in res.err
    ids = [json.loads(x)["id"] for x in res.out.splitlines()]
    assert ids == [f"g{i}" for i in range(len(_bad_lines()) + 1)]
    rejects = [json.loads(x) for x in rej.read_text().splitlines()]
    assert [r["line"] for r in rejects] == list(range(2, 2 * len(_bad_lines()) + 1, 2))
    assert [r["field"] for r in rejects] == [
        "<encoding>", "outputs.0.values.v", "outputs.0.values.v", "outputs.0.values.v", "meta.w.0",
        "outputs.0.reasoning", "<depth>",
    ]  # fmt: skip
    assert all("finite" in r["message"] for r in rejects[1:5])
    assert [(r["run_id"], r["finished"]) for r in _runs(j)] == [("R", True)]
    # The finished run resumes (replays) to the same records.
    again = cli("runs", "resume", "R", "--journal", j, "--json")
    assert again.code == 3 and again.out == res.out


def test_checks_fail_before_a_run_is_created(tmp_path: Path) -> None:
    inp = write_jsonl(tmp_path / "in.jsonl", [panel("a", ["1", "1"])])
    j = tmp_path / "j.sqlite"
    (tmp_path / "adir").mkdir()
    foreign = tmp_path / "other.sqlite"
    db = sqlite3.connect(foreign)
    db.execute("CREATE TABLE contacts (name TEXT)")
    db.commit()
    db.close()
    cases = [
        (["--output", str(tmp_path / "adir")], "is a directory"),
        (["--output", str(tmp_path / "missing" / "o.jsonl")], "does not exist"),
        (["--output", str(inp)], "same file"),
        (["--rejects", str(j)], "same file"),
        (["--policy", str(tmp_path / "nope.yaml")], "nope.yaml"),
    ]
    for extra, needle in cases:
        res = cli("decide", inp, "--journal", j, *extra)
        assert res.code == 2, (extra, res.err)
        assert needle in res.err and len(res.err.strip().splitlines()) == 1, res.err
    assert not j.exists() or _runs(j) == []
    assert cli("decide", tmp_path / "adir", "--journal", j).code == 2
    res = cli("decide", inp, "--journal", tmp_path / "nodir" / "j.sqlite")
    assert res.code == 2 and "does not exist" in res.err
    # Another application's SQLite database is refused, and left as it was.
    res = cli("decide", inp, "--journal", foreign)
    assert res.code == 2 and "another application" in res.err
    db = sqlite3.connect(foreign)
    assert [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")] == [
        "contacts"
    ]
    db.close()
    (tmp_path / "text.sqlite").write_text("hello")
    assert cli("decide", inp, "--journal", tmp_path / "text.sqlite").code == 2


def test_a_device_or_pipe_as_a_runs_input_is_named_for_what_it_is(tmp_path: Path) -> None:
    """A run reads its input again on resume: ``decide /dev/zero`` said "file not found"."""
    import os

    j = tmp_path / "j.sqlite"
    res = cli("decide", "/dev/zero", "--journal", j)
    assert res.code == 2, res.err
    assert "/dev/zero: not a regular file (a character device)" in res.err, res.err
    assert "- to read standard input" in res.err
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    res = cli("decide", fifo, "--journal", j)
    assert res.code == 2 and "not a regular file (a named pipe)" in res.err, res.err
    assert not j.exists() or _runs(j) == []


def test_route_reads_an_endless_line_no_further_than_the_bound(tmp_path: Path) -> None:
    """The line is rejected unparsed and the lines after it are routed, numbered as in
    the file (route read a line whole, and then parsed it)."""
    from dissensus.io.limits import MAX_LINE_CHARS

    good = json.dumps(panel("g", ["1", "1"]))
    src = tmp_path / "in.jsonl"
    src.write_text(f"{good}\n{'7' * (MAX_LINE_CHARS + 5)}\n{good}\n", encoding="utf-8")
    res = cli("route", src, "--similarity", "tfidf", "--json")
    assert res.code == 3, res.err
    assert f"{src}:2: field '<line>'" in res.err, res.err[:300]
    assert len([line for line in res.out.splitlines() if line.strip()]) == 2


# -- configuration errors stop the run before it starts ------------------------------


@pytest.mark.parametrize(
    ("how", "spec"),
    [
        ("flag", "bogus"),
        ("flag", "scripted:missing.yaml"),
        ("flag", "openai:x"),
        ("policy", "bogus"),
        ("env", "bogus"),
        ("env", "openai:x"),
    ],
)
def test_a_bad_model_spec_is_a_usage_error_before_any_case(
    tmp_path: Path, how: str, spec: str
) -> None:
    inp = write_jsonl(tmp_path / "in.jsonl", [panel("a", ["1", "2", "2"])])
    pol = write_policy(
        tmp_path / "p.yaml", {"seek_context": {"model": spec}} if how == "policy" else None
    )
    j = tmp_path / "j.sqlite"
    args: list[str | Path] = ["decide", inp, "--policy", pol, "--journal", j]
    if how == "flag":
        args += ["--model", spec]
    env = {
        "OPENAI_API_KEY": None,
        "OPENAI_BASE_URL": None,
        "DISSENSUS_MODEL": spec if how == "env" else None,
    }
    res = cli(*args, env=env)
    assert res.code == 2, res.err
    assert len(res.err.strip().splitlines()) == 1 and spec.split(":")[-1] in res.err
    assert not j.exists() or _runs(j) == []


def test_every_followup_failing_for_one_cause_is_a_failure(tmp_path: Path) -> None:
    inp = write_jsonl(
        tmp_path / "in.jsonl", [panel("x", ["1", "1", "1"]), panel("y", ["2", "1", "2"])]
    )
    pol = write_policy(tmp_path / "p.yaml")
    script = tmp_path / "s.yaml"
    script.write_text("rules: []\n")  # every call fails: no rule, no default
    res = cli(
        "decide",
        inp,
        "--policy",
        pol,
        "--journal",
        tmp_path / "j.sqlite",
        "--model",
        f"scripted:{script}",
    )
    assert res.code == 1
    assert "every follow-up of run" in res.err and "no rule matches" in res.err


# -- a reviewer sees exactly the text ------------------------------------------------


def _escalated(tmp_path: Path) -> tuple[Path, str]:
    p = panel(
        "c",
        ["1", "2", "2"],
        reasoning=[NASTY, "Option 2 [/INST] :x: is right.", "Second [charitable] view."],
    )
    p["meta"]["question"] = "Which [date] is right? :smile:"
    p["meta"]["options"] = [
        {"id": "1", "text": "Use [date] :x:"},
        {"id": "2", "text": "Use [charitable]"},
    ]
    inp = write_jsonl(tmp_path / "in.jsonl", [p])
    pol = write_policy(tmp_path / "p.yaml")
    j = tmp_path / "j.sqlite"
    res = cli("decide", inp, "--policy", pol, "--journal", j, "--run-id", "R")
    assert res.code == 0, res.err
    assert "review R.1" in res.out
    return j, res.out


def test_review_show_prints_agent_text_exactly(tmp_path: Path) -> None:
    j, summary = _escalated(tmp_path)
    # The next-step hint pastes and runs as printed.
    hint = [
        line.strip()
        for line in summary.splitlines()
        if line.strip().startswith("dissensus review show")
    ]
    assert hint == [f"dissensus review show R.1 --journal {j}"]
    res = cli("review", "show", "R.1", "--journal", j)
    assert res.code == 0, res.err
    flat = " ".join(res.out.split())
    for text in (
        "[b]bold[/b]",
        "[/INST]",
        "[/]",
        ":smile:",
        "[link=x]l[/link]",
        ":x:",
        "[date]",
        "[charitable]",
        "שלום עולם",
    ):
        assert text in flat, text
    assert "\x1b" not in res.out and "\\x1b[31mred\\x1b[0m" in flat
    assert "\u202e" not in res.out and "\\u202e" in flat
    assert "😄" not in res.out and "❌" not in res.out
    listed = cli("review", "list", "--journal", j)
    assert listed.code == 0 and "R.1" in listed.out


def test_route_and_decide_print_ids_plainly_and_a_legend(tmp_path: Path) -> None:
    p = panel("[b]x[/b] :smile:", ["1", "1"], swap=["1", "1"])
    inp = write_jsonl(tmp_path / "in.jsonl", [p])
    res = cli("route", inp, "--similarity", "tfidf")
    assert res.code == 0 and "[b]x[/b] :smile:" in res.out
    assert "CA convergent agreement" in res.out
    res = cli(
        "decide",
        inp,
        "--policy",
        write_policy(tmp_path / "p.yaml"),
        "--journal",
        tmp_path / "j.sqlite",
    )
    assert res.code == 0 and "[b]x[/b] :smile:" in res.out
    assert (
        "DD divergent disagreement" in res.out
        and "'auto -> escalate'" in res.out
        and "(learned)" in res.out
    )


# -- resolutions, duplicates, strictness ----------------------------------------------


def test_resume_of_a_finished_run_reports_human_resolutions(tmp_path: Path) -> None:
    j, _ = _escalated(tmp_path)
    assert (
        cli("review", "resolve", "R.1", "--decision", "2", "--note", "", "--journal", j).code == 2
    )
    res = cli("review", "resolve", "R.1", "--decision", "2", "--note", "checked", "--journal", j)
    assert res.code == 0, res.err
    again = cli("runs", "resume", "R", "--journal", j, "--json")
    record = json.loads(again.out.splitlines()[0])
    assert (record["basis"], record["decision"]) == ("human", "2")
    assert cli("review", "list", "--run", "nosuch", "--journal", j).code == 2


def test_duplicate_panel_ids_are_warned_and_both_kept(tmp_path: Path) -> None:
    rows = [
        panel("d", ["1", "1"], swap=["1", "1"]),
        panel("e", ["1", "1"], swap=["1", "1"]),
        panel("d", ["1", "1"], swap=["1", "1"]),
    ]
    inp = write_jsonl(tmp_path / "in.jsonl", rows)
    res = cli(
        "decide",
        inp,
        "--policy",
        write_policy(tmp_path / "p.yaml"),
        "--journal",
        tmp_path / "j.sqlite",
        "-o",
        tmp_path / "o.jsonl",
    )
    assert res.code == 0
    records = [json.loads(x) for x in (tmp_path / "o.jsonl").read_text().splitlines()]
    assert [(r["id"], r["line"]) for r in records] == [("d", 1), ("e", 2), ("d", 3)]
    assert res.err.count("warning: panel id 'd'") == 1
    assert "1 duplicate panel id(s)" in res.out


def test_booleans_are_strict(tmp_path: Path) -> None:
    vote = {"agent": "a", "answer": "x", "evidence_source": "kb", "evidence_present": "yes"}
    case = {"id": 1, "votes": [vote, {**vote, "agent": "b", "evidence_present": True}]}
    inp = tmp_path / "v.jsonl"
    inp.write_text(json.dumps(case) + "\n")
    res = cli("vote", inp)
    assert res.code == 3 and "votes.0.evidence_present" in res.err
    p = panel("e", ["1", "1"], evidence=[[{"source": "kb", "present": 1}], None])
    assert cli("route", write_jsonl(tmp_path / "p.jsonl", [p]), "--similarity", "tfidf").code == 3


@pytest.mark.parametrize(
    "args",
    [
        ["vote", "{v}", "--beta", "nan"],
        ["calibrate", "{v}", "--beta-ref", "inf"],
        ["route", "{v}", "--theta-s", "nan"],
        ["calibrate-thresholds", "{v}", "--quantile", "nan"],
    ],
)
def test_non_finite_numbers_are_refused(tmp_path: Path, args: list[str]) -> None:
    v = tmp_path / "v.jsonl"
    v.write_text("\n")
    res = cli(*[a.format(v=v) for a in args])
    assert res.code == 2 and "must be a finite number" in res.err
    assert len(res.err.strip().splitlines()) == 1


def test_policy_nan_and_duplicate_keys_and_encodings(tmp_path: Path) -> None:
    inp = write_jsonl(tmp_path / "in.jsonl", [panel("a", ["1", "1"])])
    j = tmp_path / "j.sqlite"
    cases = {
        "nan.yaml": (b"reading:\n  theta_s: .nan\n", "must be a finite number"),
        "dup.yaml": (
            b"acceptance:\n  min_families: 2\n  min_families: 1\n",
            "duplicate key 'min_families'",
        ),
        "u16.yaml": ("reading:\n  theta_s: 0.3\n".encode("utf-16"), "UTF-16"),
        "latin.yaml": ("# café\nreading: {}\n".encode("latin-1"), "not UTF-8"),
    }
    for name, (data, needle) in cases.items():
        (tmp_path / name).write_bytes(data)
        res = cli("decide", inp, "--policy", tmp_path / name, "--journal", j)
        assert res.code == 2 and needle in res.err, (name, res.err)
        assert len(res.err.strip().splitlines()) == 1
    assert not j.exists() or _runs(j) == []


def test_other_configuration_files_not_utf8_are_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad"
    bad.write_bytes("x: 1\n".encode("utf-16"))
    votes = tmp_path / "v.jsonl"
    votes.write_text("\n")
    for args in (
        ["negotiate", bad],
        ["deliberate", bad],
        ["verify", bad],
        ["vote", votes, "--calibration", bad],
        ["route", votes, "--rules", bad],
    ):
        res = cli(*args)
        assert res.code == 2 and "Traceback" not in res.err, (args, res.err)
        assert len(res.err.strip().splitlines()) == 1, (args, res.err)


def test_a_yaml_alias_bomb_in_a_scripted_model_is_refused(tmp_path: Path) -> None:
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for prev, name in zip("abcdefgh", "bcdefghi", strict=True):
        lines.append(f"{name}: &{name} [" + ",".join([f"*{prev}"] * 9) + "]")
    lines.append("rules: []\ndefault: *i")
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text("\n".join(lines) + "\n")
    inp = write_jsonl(tmp_path / "in.jsonl", [panel("a", ["1", "1"])])
    res = cli("decide", inp, "--model", f"scripted:{bomb}", "--journal", tmp_path / "j.sqlite")
    assert res.code == 2 and "alias" in res.err


def test_usage_errors_are_one_line() -> None:
    for args in (["route", "--bogus"], ["route"], ["decide"], ["nosuchcommand"], ["runs", "show"]):
        res = cli(*args)
        assert res.code == 2
        assert len(res.err.strip().splitlines()) == 1 and res.err.startswith("error: "), res.err


def test_empty_reasoning_is_accepted_and_named(tmp_path: Path) -> None:
    one = panel(
        "one",
        ["1", "1", "1"],
        reasoning=["", "Option 1 states the window.", "Option 1 states the window too."],
    )
    none = panel("none", ["1", "1"], reasoning=["", " "])
    inp = write_jsonl(tmp_path / "in.jsonl", [one, none])
    res = cli("route", inp, "--similarity", "tfidf", "--json")
    assert res.code == 0, res.err
    r1, r2 = (json.loads(x) for x in res.out.splitlines())
    assert r1["missing_reasoning"] == ["a1"] and r1["reasoning_similarity"] is not None
    assert r2["missing_reasoning"] == ["a1", "a2"] and r2["reasoning_similarity"] is None
    assert r2["state"] == "DA"  # agreement alone: convergence is not claimed without texts
    j = tmp_path / "j.sqlite"
    res = cli(
        "decide",
        inp,
        "--policy",
        write_policy(tmp_path / "p.yaml"),
        "--journal",
        j,
        "--run-id",
        "R",
    )
    assert res.code == 0, res.err
    with Journal(j) as store:
        readings = [
            s for line in (1, 2) if (s := case_step(store, "R", line, "reading")) is not None
        ]
    assert [r["missing_reasoning"] for r in readings[:2]] == [["a1"], ["a1", "a2"]]


def test_makefile_torch_check_is_quiet(repo_root: Path) -> None:
    text = (repo_root / "Makefile").read_text()
    line = next(x for x in text.splitlines() if "import torch" in x)
    assert "-W ignore" in line or "warnings" in line


def test_output_is_written_atomically(tmp_path: Path) -> None:
    inp = write_jsonl(tmp_path / "in.jsonl", [panel("a", ["1", "1"], swap=["1", "1"])])
    out = tmp_path / "o.jsonl"
    out.write_text("previous\n")
    res = cli("route", inp, "--similarity", "tfidf", "--out", out, "--theta-s", "0.3")
    assert res.code == 0
    assert json.loads(out.read_text().splitlines()[0])["id"] == "a"
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []
    res = cli("route", inp, "--similarity", "tfidf", "--out", inp)
    assert res.code == 2 and "same file" in res.err
    assert json.loads(inp.read_text())["id"] == "a"


def test_the_progress_bar_moves_while_embedding(tmp_path: Path) -> None:
    import slow_embed

    slow_embed.CALLS.clear()
    rows = [
        panel(f"p{i}", ["1", "1"], reasoning=[f"text {i} a", f"text {i} b"], swap=["1", "1"])
        for i in range(40)
    ]
    inp = write_jsonl(tmp_path / "in.jsonl", rows)
    pol = write_policy(
        tmp_path / "p.yaml",
        {"reading": {"similarity": "slow_embed:counting", "theta_s": 0.5}, "allow_code": True},
    )
    env = {"DISSENSUS_PROGRESS": "1", "DISSENSUS_CACHE": str(tmp_path / "cache")}
    res = cli("decide", inp, "--policy", pol, "--journal", tmp_path / "j.sqlite", env=env)
    assert res.code == 0, res.err
    # 80 texts embedded in chunks the bar reports one by one, never all at once.
    assert (
        sum(slow_embed.CALLS) >= 80 and max(slow_embed.CALLS) <= 32 and len(slow_embed.CALLS) >= 3
    )
    # Standard error is no terminal here: progress is plain lines, the last one at the end.
    lines = [line for line in res.err.splitlines() if line.startswith("deciding")]
    assert lines and lines[-1].startswith("deciding: 40/40 (100%) 0:00:"), res.err


def test_a_code_backend_without_theta_s_is_refused_before_any_run(tmp_path: Path) -> None:
    """A ``module:function`` backend has no calibrated default theta_s: ``decide`` refuses
    the policy in one line naming its field, and creates no run to resume."""
    inp = write_jsonl(tmp_path / "in.jsonl", [panel("p1", ["1", "2"])])
    pol = tmp_path / "p.yaml"
    pol.write_text('reading: {similarity: "slow_embed:counting"}\nallow_code: true\n')
    journal = tmp_path / "j.sqlite"
    res = cli("decide", inp, "--policy", pol, "--journal", journal)
    assert res.code == 2, res.err
    (line,) = res.err.strip().splitlines()
    assert "field 'reading.theta_s'" in line and "no calibrated default theta_s" in line
    assert str(pol) in line
    if journal.exists():  # opened, perhaps: no run in it
        with Journal(journal) as j:
            assert j.runs() == []


def test_bundled_models_are_package_data() -> None:
    import dissensus
    from dissensus.cli.dci import bundled_model

    for name in ("dci", "single", "judge"):
        path = Path(bundled_model(name).removeprefix("scripted:"))
        assert path.is_file() and path.is_relative_to(Path(dissensus.__file__).parent)


def test_the_review_hint_names_the_program_as_typed(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr("sys.argv", [".venv/bin/dissensus", "decide"])
    monkeypatch.setenv("PATH", str(tmp_path))  # not on the PATH, as after `make demo`
    _, summary = _escalated(tmp_path)
    lines = [line.strip() for line in summary.splitlines()]
    assert f".venv/bin/dissensus review show R.1 --journal {tmp_path / 'j.sqlite'}" in lines


def _is_float(param: Any) -> bool:
    """Whether a parameter of the command tree takes a float (whatever the typer version)."""
    described = getattr(param, "type_descriptor", None)
    if described is not None:
        annotation = described.annotation
        return annotation is float or float in typing.get_args(annotation)
    return type(getattr(param, "type", None)).__name__ == "FloatParamType"


def _float_options() -> list[tuple[list[str], str]]:
    """(command path, option) of every float option of the CLI."""
    from dissensus.cli import _command

    found: list[tuple[list[str], str]] = []

    def walk(command: Any, path: list[str]) -> None:
        for name, sub in getattr(command, "commands", {}).items():
            walk(sub, [*path, name])
        for param in command.params:
            if param.opts and param.opts[0].startswith("-") and _is_float(param):
                found.append((path, max(param.opts, key=len)))

    walk(_command(), [])
    return found


def test_every_float_option_refuses_non_finite_numbers(monkeypatch: pytest.MonkeyPatch) -> None:
    def started(*args: object, **kwargs: object) -> None:
        raise AssertionError("the server started")

    monkeypatch.setattr("dissensus.serve.server.listen", started)
    options = _float_options()
    named = {(" ".join(path), option) for path, option in options}
    assert {
        ("decide", "--deadline"),
        ("runs resume", "--deadline"),
        ("deliberate", "--deadline"),
        ("review undo", "--within"),
        ("serve", "--timeout"),
        ("serve", "--claim-ttl"),
        ("serve", "--undo-window"),
        ("calibrate-acceptance", "--target-precision"),
        ("calibrate-acceptance", "--delta"),
    } <= named
    for path, option in options:
        for value in ("nan", "inf", "-inf", "1e309"):
            port = ["--port", "0"] if path == ["serve"] else []
            res = cli(*path, option, value, *port)
            assert res.code == 2, (path, option, value, res.err)
            assert "must be a finite number" in res.err and option in res.err, res.err
            assert len(res.err.strip().splitlines()) == 1, res.err


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["serve", "--port", "0", "--claim-ttl", "1e300"], "--claim-ttl"),
        (["serve", "--port", "0", "--timeout", "1e12"], "--timeout"),
        (["serve", "--port", "0", "--undo-window", "1e300"], "--undo-window"),
        (["review", "undo", "X.1", "--within", "1e300"], "--within"),
        (["decide", "in.jsonl", "--deadline", "1e300"], "--deadline"),
        (["runs", "resume", "R", "--deadline", "1e300"], "--deadline"),
        (["route", "in.jsonl", "--batch-size", "99999999999999999999999"], "--batch-size"),
        (["route", "in.jsonl", "--engine", "ray", "--workers", "99999999999999999999999"], "--workers"),
        (["decide", "in.jsonl", "--engine", "ray", "--workers", "99999999999999999999999"], "--workers"),
        (["calibrate-thresholds", "in.jsonl", "--quantile", "0.5", "--batch-size", "99999999999999999999999"], "--batch-size"),
    ],
)  # fmt: skip
def test_numbers_too_large_are_usage_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], needle: str
) -> None:
    def started(*args: object, **kwargs: object) -> None:
        raise AssertionError("the server started")

    monkeypatch.setattr("dissensus.serve.server.listen", started)
    write_jsonl(tmp_path / "in.jsonl", [panel("a", ["1", "1"])])
    journal = ["--journal", str(tmp_path / "j.sqlite")] if args[0] in ("decide", "runs") else []
    res = cli(*args, *journal, cwd=tmp_path)
    assert res.code == 2, (args, res.err)
    assert needle in res.err and "Traceback" not in res.err
    assert len(res.err.strip().splitlines()) == 1, res.err


def test_a_similarity_backend_is_checked_before_the_run_is_created(tmp_path: Path) -> None:
    inp = write_jsonl(tmp_path / "in.jsonl", [panel("a", ["1", "1"])])
    j = tmp_path / "j.sqlite"
    for extra, env, needle in [
        (["--similarity", "os:getcwd"], {"DISSENSUS_ALLOW_CODE": None}, "names Python code"),
        (["--similarity", "no_such_module_xyz:fn"], {"DISSENSUS_ALLOW_CODE": "1"}, "cannot import"),
    ]:
        res = cli("decide", inp, "--journal", j, *extra, env=env)
        assert res.code == 2 and needle in res.err, res.err
        assert len(res.err.strip().splitlines()) == 1, res.err
    assert not j.exists() or _runs(j) == []


def test_a_failed_judge_call_is_one_error_line(tmp_path: Path, repo_root: Path) -> None:
    res = cli("deliberate", repo_root / "examples" / "dci" / "routine.yaml", "--json")
    outputs = tmp_path / "outputs.jsonl"
    outputs.write_text(res.out * 2)
    res = cli("judge", outputs, "--max-calls", "0")
    assert res.code == 1
    assert res.err.startswith("error: judge call failed: ") and "budget" in res.err
    assert "(and 1 more" in res.err and len(res.err.strip().splitlines()) == 1, res.err
    res = cli("judge", outputs, "--model", "bogus")
    assert res.code == 2 and "'bogus'" in res.err and len(res.err.strip().splitlines()) == 1


def test_a_failed_judge_call_with_rejected_lines_exits_1(tmp_path: Path, repo_root: Path) -> None:
    """With rejected lines and a failed judge call, ``judge`` exited 3 (some lines
    rejected, every other one processed), the failure only on stderr. A failed call is
    a failure, exit 1, as documented, rejects or not; the error line says so."""
    res = cli("deliberate", repo_root / "examples" / "dci" / "routine.yaml", "--json")
    outputs = tmp_path / "outputs.jsonl"
    outputs.write_text(res.out + "{not json\n")
    res = cli("judge", outputs, "--max-calls", "0")
    assert res.code == 1, res.err
    lines = res.err.strip().splitlines()
    assert lines[0].startswith(f"rejected {outputs}:2: field '<json>'"), res.err
    assert lines[1].startswith("error: judge call failed: ") and "budget" in lines[1]
    assert len(lines) == 2, res.err
    res = cli("judge", outputs, "--max-calls", "0", "--json")
    assert res.code == 1 and len(json.loads(res.out)["errors"]) == 1
    assert cli("judge", outputs).code == 3  # rejects alone: 3, as before


def test_negotiate_checks_model_even_when_no_agent_needs_one(repo_root: Path) -> None:
    problem = repo_root / "examples" / "concord" / "incident.yaml"
    assert cli("negotiate", problem).code == 0  # function agents only: no model needed
    res = cli("negotiate", problem, "--model", "bogus")
    assert res.code == 2 and res.err.startswith("error: ") and "'bogus'" in res.err, res.err
    assert len(res.err.strip().splitlines()) == 1


def test_standard_input_has_one_name_in_rejects() -> None:
    """Every JSONL reader names standard input ``-`` in its rejects."""
    bad = b"{not json\n"
    for args in (
        ["route", "-", "--similarity", "tfidf", "--json"],
        ["vote", "-", "--json"],
        ["calibrate", "-"],
    ):
        res = cli(*args, stdin=bad)
        assert "rejected -:1: field '<json>'" in res.err, (args, res.err)


SWAP = Path(__file__).resolve().parent.parent / "examples" / "llmbar-swap.jsonl"


@pytest.mark.parametrize(
    "args",
    [
        ["calibrate", SWAP, "--out", "-"],
        ["calibrate-acceptance", SWAP, "--out", "-"],
        ["negotiate", SWAP.parent / "concord" / "incident.yaml", "--out", "-"],
        ["vote", SWAP, "--rejects", "-"],
        ["route", SWAP, "--similarity", "tfidf", "--rejects", "-"],
        ["calibrate", SWAP, "--rejects", "-"],
        ["decide", SWAP, "--rejects", "-", "--journal", "j.sqlite"],
        ["convert", "zeroeval", ".", "--rejects", "-"],
    ],
    ids=lambda a: " ".join(str(x) for x in a if x != SWAP),
)
def test_dash_where_standard_output_cannot_carry_it_is_a_usage_error(
    tmp_path: Path, args: list[Any]
) -> None:
    """``-`` is standard output only for an output of records (``route --out``, ``convert
    --out``, ``decide --output``, ``runs export --output``); a calibration file printed
    beside a report, or rejects (on standard error already), are refused, not written
    to a file called ``-``."""
    (tmp_path / "p.yaml").write_text("reading: {similarity: tfidf}\n")
    if args[0] == "calibrate-acceptance":
        args = [*args, "--policy", "p.yaml"]
    res = cli(*args, cwd=tmp_path)
    assert res.code == 2 and res.out == "", (res.out, res.err)
    assert f"{args[args.index('-') - 1]} -:" in res.err, res.err
    assert not (tmp_path / "-").exists() and not (tmp_path / "j.sqlite").exists()


@pytest.mark.parametrize(
    "args",
    [
        ["route", "/dev/zero", "--similarity", "tfidf"],
        ["vote", "/dev/zero"],
        ["calibrate", "/dev/zero"],
        ["calibrate-thresholds", "/dev/zero", "--quantile", "0.5", "--similarity", "tfidf"],
        ["calibrate-acceptance", "/dev/zero", "--out", "a.json"],
    ],
    ids=lambda a: a[0],
)
def test_a_device_as_input_is_refused_before_reading(args: list[str], tmp_path: Path) -> None:
    """``/dev/zero`` is one endless line: every JSONL reader read it until interrupted.
    A device is refused up front (exit 2); a named pipe is still read."""
    res = cli(*args, cwd=tmp_path)
    assert res.code == 2 and "not a regular file (a character device)" in res.err, res.err


def test_a_named_pipe_is_still_an_input(tmp_path: Path) -> None:
    import os
    import threading

    fifo = tmp_path / "panels.fifo"
    os.mkfifo(fifo)
    writer = threading.Thread(target=lambda: fifo.write_bytes(SWAP.read_bytes()))
    writer.start()
    res = cli("route", fifo, "--similarity", "tfidf", "--json")
    writer.join(timeout=30)
    assert res.code == 0 and len(res.out.splitlines()) == 150, res.err


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["vote", ""], "the input is an empty path"),
        (["route", " ", "--similarity", "tfidf"], "the input is an empty path"),
        (["route", SWAP, "--similarity", "tfidf", "--out", ""], "(--out): it is an empty path"),
        (["vote", SWAP, "--rejects", ""], "(--rejects): it is an empty path"),
    ],
)
def test_an_empty_path_is_named_as_such(args: list[Any], said: str) -> None:
    """``"$UNSET"`` as an input or an output: one line saying the path is empty (it said
    "expected a file, got a directory:" and "is a directory")."""
    res = cli(*args)
    assert res.code == 2 and said in res.err, res.err


def test_route_out_dash_writes_the_records_alone(tmp_path: Path) -> None:
    """``route --out -`` is ``--json``: the records on standard output, no table after them."""
    res = cli("route", SWAP, "--similarity", "tfidf", "--out", "-", cwd=tmp_path)
    assert res.code == 0, res.err
    lines = res.out.splitlines()
    assert len(lines) == 150 and all(json.loads(line)["id"] for line in lines)
    assert not (tmp_path / "-").exists()


@pytest.mark.parametrize("command", ["decide", "runs resume"])
def test_decide_output_dash_writes_the_records_alone(tmp_path: Path, command: str) -> None:
    """``decide --output -`` and ``runs resume --output -`` write the records on standard
    output, as ``--json`` does, no summary after them (they printed the summary and no
    record), and no file called ``-``."""
    journal = tmp_path / "j.sqlite"
    args: list[Any] = ["decide", SWAP, "--similarity", "tfidf", "--journal", journal]
    if command == "runs resume":
        first = cli(*args, "--run-id", "r1", cwd=tmp_path)
        assert first.code == 0, first.err
        args = ["runs", "resume", "r1", "--journal", journal]
    res = cli(*args, "--output", "-", cwd=tmp_path)
    assert res.code == 0, res.err
    lines = res.out.splitlines()
    assert len(lines) == 150, res.out[-400:]
    assert [json.loads(line)["line"] for line in lines] == list(range(1, 151))
    assert not (tmp_path / "-").exists()


def test_a_reject_line_escapes_the_file_name(tmp_path: Path) -> None:
    """A file named with an escape sequence or a newline: its reject lines are one line
    each, the name escaped, as every other message shows a name."""
    bad = tmp_path / "r\x1b[31mRED\x1b]0;title\x07\nx.jsonl"
    bad.write_bytes(b"{not json\n")
    for args in (
        ["route", bad, "--similarity", "tfidf", "--json"],
        ["vote", bad, "--json"],
        ["calibrate", bad],
        ["calibrate-thresholds", bad, "--similarity", "tfidf", "--quantile", "0.5"],
    ):
        res = cli(*args)
        assert "\x1b" not in res.err and "\x07" not in res.err, (args, res.err)
        rejects = [line for line in res.err.splitlines() if line.startswith("rejected ")]
        assert len(rejects) == 1, (args, res.err)
        assert "r\\x1b[31mRED\\x1b]0;title\\x07\\nx.jsonl:1: field '<json>'" in rejects[0], rejects


@pytest.mark.parametrize("name", ["a\x1b[31mb", "a\u202eb", "a\x00b", "a\x7fb", "a\x9bb", "a\nb"])
def test_serve_token_refuses_control_characters_in_names(name: str) -> None:
    res = cli("serve-token", name, "review")
    assert res.code == 2 and res.out == ""
    assert res.err.startswith("error: ") and len(res.err.strip().splitlines()) == 1
    assert "\x1b" not in res.err and "\u202e" not in res.err


def test_the_per_record_limits_are_documented() -> None:
    from dissensus.io.limits import MAX_AGENTS, MAX_FIELD_CHARS, MAX_PANEL_CHARS

    text = (Path(__file__).resolve().parents[1] / "docs" / "cli.md").read_text()
    section = text.split("## Input lines", 1)[1].split("\n## ", 1)[0]
    for limit in (MAX_AGENTS, MAX_FIELD_CHARS, MAX_PANEL_CHARS):
        assert f"{limit:,}" in section, limit


def test_a_malformed_run_id_is_named_as_such(tmp_path: Path) -> None:
    with Journal(tmp_path / "j.sqlite") as journal:
        journal.create_run("x", kind="t", meta={})
    done = cli("runs", "verify", "a/b", "--journal", tmp_path / "j.sqlite")
    assert done.code == 2
    assert "no run 'a/b'" in done.err and "invalid run id 'a/b'" in done.err
    assert (
        "invalid run id" not in cli("runs", "verify", "y", "--journal", tmp_path / "j.sqlite").err
    )


def test_the_code_refusal_names_the_option_of_the_command(tmp_path: Path) -> None:
    inp = write_jsonl(tmp_path / "in.jsonl", [panel("a", ["1", "2"])])
    done = cli("route", inp, "--similarity", "os.path:join")
    assert done.code == 2
    assert "--allow-code" in done.err and "allow_code: true" in done.err


def test_serve_session_ttl_reaches_the_sessions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--session-ttl`` sets how long a review page login lasts (eight hours unless given)."""
    made: list[Any] = []

    def check_exposure(settings: Any) -> None:
        made.append(settings)
        raise SystemExit(0)  # stop before the port is bound

    monkeypatch.setattr("dissensus.serve.check_exposure", check_exposure)
    journal = str(tmp_path / "j.sqlite")
    cli("serve", "--journal", journal, "--session-ttl", "90")
    cli("serve", "--journal", journal)
    assert [s.session_ttl_s for s in made] == [90.0, 8 * 3600.0]


@pytest.mark.parametrize("similarity", ["static", "minilm"])
def test_an_unusable_cache_directory_is_a_configuration_error(
    tmp_path: Path, similarity: str
) -> None:
    """DISSENSUS_CACHE naming no usable directory: one line naming it, exit 2 (as any
    unusable path), not a failure of the run."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    env = {"DISSENSUS_CACHE": str(blocker / "cache")}
    res = cli(
        "route",
        Path(__file__).parent.parent / "examples" / "llmbar-swap.jsonl",
        "--similarity",
        similarity,
        env=env,
    )
    assert res.code == 2, res.err
    assert res.err.count("\n") == 1 and "Traceback" not in res.err
    assert "DISSENSUS_CACHE" in res.err and str(blocker) in res.err


def test_an_output_that_cannot_be_written_names_the_resume_command(tmp_path: Path) -> None:
    """``--output /dev/full``: one line naming the file, the error and how to get the
    records, exit 1 (two chained tracebacks before)."""
    inp = write_jsonl(tmp_path / "in.jsonl", [panel(f"p{i}", ["1", "2"]) for i in range(3)])
    j = tmp_path / "j.sqlite"
    res = cli("decide", inp, "--journal", j, "--output", "/dev/full")
    assert res.code == 1, res.err
    lines = res.err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in res.err, res.err
    assert "cannot write the output file /dev/full: No space left on device" in lines[0]
    run_id = _runs(j)[0]["run_id"]
    # The run's own output file, to write once there is room.
    assert f"dissensus runs resume {run_id} --journal {j} --output /dev/full" in lines[0]
    out = tmp_path / "out.jsonl"
    assert cli("runs", "resume", run_id, "--journal", j, "--output", out).code == 0
    assert len(out.read_text(encoding="utf-8").splitlines()) == 3


def test_a_long_run_or_review_id_is_quoted_back_bounded(tmp_path: Path) -> None:
    """An unknown id of 10,000 characters is named by its first characters, not echoed."""
    journal = tmp_path / "j.sqlite"
    Journal(journal).close()
    long_id = "r" * 10_000
    for argv in (
        ("runs", "show", long_id, "--journal", journal),
        ("review", "show", f"{long_id}.1", "--journal", journal),
    ):
        res = cli(*argv)
        assert res.code == 2, res.err
        assert "no run 'rrrr" in res.err or "no review item 'rrrr" in res.err
        assert len(res.err) < 1_000


def test_a_journal_a_killed_writer_left_mid_transaction_is_rolled_back_and_read(
    tmp_path: Path,
) -> None:
    """A writer killed while it made a file a journal leaves a hot rollback journal;
    the journal check read the file read-only, which cannot roll it back, so every
    command on the file failed "attempt to write a readonly database"."""
    import subprocess
    import sys

    journal = tmp_path / "j.sqlite"
    killed = (
        "import os, sqlite3\n"
        f"db = sqlite3.connect({str(journal)!r}, isolation_level=None)\n"
        "db.execute('PRAGMA journal_mode=DELETE'); db.execute('PRAGMA cache_size=1')\n"
        "db.execute('PRAGMA user_version = 1')\n"
        "db.execute('BEGIN IMMEDIATE'); db.execute('CREATE TABLE t(x)')\n"
        "for i in range(2000): db.execute('INSERT INTO t VALUES (?)', ('x' * 200,))\n"
        "os._exit(0)\n"
    )
    subprocess.run([sys.executable, "-c", killed], check=True, timeout=60)
    assert Path(f"{journal}-journal").stat().st_size > 0
    listed = cli("runs", "list", "--journal", journal, "--json")
    assert listed.code == 0, listed.err
    assert not Path(f"{journal}-journal").exists()


def test_a_command_that_reads_a_journal_refuses_an_empty_file(tmp_path: Path) -> None:
    """SQLite makes any empty file a database: ``review list --journal e`` turned an empty
    file (a mistyped path) into a journal."""
    empty = tmp_path / "notes.txt"
    empty.touch()
    for args in (("runs", "list"), ("review", "list"), ("acceptance", "status")):
        got = cli(*args, "--journal", empty)
        assert got.code == 2 and "an empty file, not a journal" in got.err, (args, got.err)
    assert empty.stat().st_size == 0


def test_standard_input_past_its_bound_is_refused_before_a_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run journals its standard input whole: past the bound (64 MiB; one panel's line
    here) it is refused in one line naming the way out (a file), exit 2, and no run is
    created; an input of exactly the bound is taken."""
    import dissensus.pipeline.batch as batch

    line = SWAP.read_text(encoding="utf-8").splitlines()[0] + "\n"
    monkeypatch.setattr(batch, "MAX_STDIN_BYTES", len(line.encode()))
    journal = tmp_path / "j.sqlite"
    args = ("decide", "-", "--journal", journal, "--similarity", "tfidf", "--json")
    res = cli(*args, stdin=(line * 2).encode())
    assert res.code == 2, res.err
    assert res.err.strip() == (
        f"error: standard input holds more than {len(line.encode()):,} bytes: a run journals "
        "its standard input whole; write it to a file and give the file's path instead of -"
    )
    assert Journal(journal).runs() == []
    ok = cli(*args, stdin=line.encode())
    assert ok.code == 0, ok.err
    assert len(Journal(journal).runs()) == 1


@pytest.mark.parametrize("value", ["", " ", "\t"])
def test_an_empty_run_id_is_refused_before_any_run(tmp_path: Path, value: str) -> None:
    """``--run-id "$RID"`` with ``RID`` unset: refused as ``--journal ''`` is (exit 2), not
    a random id no later ``runs resume "$RID"`` finds; nothing is created."""
    inp = write_jsonl(tmp_path / "in.jsonl", [panel("p", ["1", "1"])])
    j = tmp_path / "j.sqlite"
    res = cli("decide", inp, "--journal", j, "--run-id", value)
    assert res.code == 2, res.err
    assert res.err.startswith("error: field '--run-id': the run id is empty"), res.err
    assert "unset shell variable" in res.err
    assert not j.exists()


def test_start_run_refuses_an_empty_run_id_as_invalid(tmp_path: Path) -> None:
    from dissensus.errors import ConfigError
    from dissensus.pipeline import start_run

    inp = write_jsonl(tmp_path / "in.jsonl", [panel("p", ["1", "1"])])
    with Journal(tmp_path / "j.sqlite") as journal:
        with pytest.raises(ConfigError, match="invalid run id ''"):
            start_run(journal, str(inp), run_id="")
        assert journal.run("", missing_ok=True) is None


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["deliberate", "-"], "TASK.yaml: standard input ('-') is not read here"),
        (["negotiate", "-"], "PROBLEM.yaml: standard input ('-') is not read here"),
        (["verify", "-"], "CERT.json: standard input ('-') is not read here"),
        (["fake-llm", "--script", "-", "--port", "1"], "--script: standard input ('-')"),
    ],
)
def test_a_file_only_input_given_as_standard_input_is_refused_by_name(
    args: list[str], named: str
) -> None:
    """A task, problem, certificate or rule file is read from a file only (its paths are
    read beside it): ``-`` is refused naming the argument (exit 2), not taken for a file
    named ``-`` and reported missing ("No such file or directory")."""
    done = cli(*args, stdin=b"{}\n")
    assert done.code == 2, done.err
    assert named in done.err and "No such file" not in done.err
