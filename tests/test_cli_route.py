"""``dissensus route`` and ``dissensus calibrate-thresholds`` through a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cli_helpers import run_cli


def run(
    *args: str | Path, stdin: str | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    # In-process (fast); the end-to-end test below spawns the real entry point.
    return run_cli(*args, stdin=stdin, env={**os.environ, "COLUMNS": "200", **(env or {})})


def panel(
    pid: str, *rows: tuple[str, str | None, str], meta: dict[str, object] | None = None
) -> dict[str, object]:
    return {
        "id": pid,
        "meta": meta or {},
        "outputs": [{"agent": a, "decision": d, "reasoning": r} for a, d, r in rows],
    }


GOOD = [
    panel(
        "agree",
        ("a", "keep", "satire not harmful"),
        ("b", "keep", "satire not harmful"),
        ("c", "keep", "satire not harmful"),
    ),
    panel(
        "split",
        ("a", "keep", "satire joke"),
        ("b", "remove", "slur attack group"),
        ("c", "flag", "unclear context"),
    ),
    panel("legal", ("a", "keep", "fine"), ("b", "keep", "fine"), meta={"category": "legal"}),
]

BAD_LINES = {
    "<json>": "{not json",
    "outputs": json.dumps({"id": "x1"}),
    "outputs.0.reasoning": json.dumps(
        {
            "id": "x2",
            "outputs": [
                {"agent": "a", "decision": "k", "reasoning": 5},
                {"agent": "b", "decision": "k", "reasoning": "r"},
            ],
        }
    ),
    "two agents": json.dumps(panel("x3", ("a", "k", "only one"))),
    "confidence": json.dumps(
        {
            "id": "x4",
            "outputs": [
                {"agent": "a", "decision": "k", "reasoning": "r", "confidence": 1.5},
                {"agent": "b", "decision": "k", "reasoning": "r"},
            ],
        }
    ),
    "duplicate": json.dumps(panel("x5", ("a", "k", "r"), ("a", "k", "s"))),
    "non-finite": json.dumps(panel("x6", ("a", "k", "r"), ("b", "k", "s"))).replace(
        '"decision": "k"', '"decision": "k", "w": NaN', 1
    ),
    "surrogate": json.dumps(panel("x7", ("a", "k", "r"), ("b", "k", "s"))).replace(
        '"r"', '"\\ud800"'
    ),
    "deep": '{"id": "x8", "meta": ' + "[" * 1000 + "]" * 1000 + "}",
}


@pytest.fixture()
def panels_file(tmp_path: Path) -> Path:
    path = tmp_path / "panels.jsonl"
    path.write_text("".join(json.dumps(p) + "\n" for p in GOOD), encoding="utf-8")
    return path


def records(text: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_route_json(panels_file: Path) -> None:
    res = run("route", panels_file, "--similarity", "tfidf", "--json")
    assert res.returncode == 0, res.stderr
    recs = records(res.stdout)
    assert [r["id"] for r in recs] == ["agree", "split", "legal"]
    first = recs[0]
    for key in (
        "id",
        "state",
        "action",
        "reasoning_similarity",
        "min_similarity",
        "agreement",
        "decision",
        "tie",
        "rule",
        "defeated",
        "model",
        "theta_s",
        "theta_a",
    ):
        assert key in first
    assert (first["state"], first["action"], first["rule"]) == ("CA", "auto", "default-CA")
    assert first["reasoning_similarity"] == 1.0
    assert first["model"] == "tfidf"
    assert recs[1]["state"] == "DD" and recs[1]["action"] == "seek_context"
    assert recs[1]["tie"] == ["flag", "keep", "remove"]


def test_route_rules_thresholds_out_and_stdin(panels_file: Path, tmp_path: Path) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text(
        "rules:\n  - id: legal\n    condition: meta.category == 'legal'\n    action: escalate\n",
        encoding="utf-8",
    )
    out = tmp_path / "out.jsonl"
    res = run(
        "route",
        "-",
        "--similarity",
        "tfidf",
        "--rules",
        rules,
        "--theta-s",
        "0.5",
        "--theta-a",
        "0.6",
        "--out",
        out,
        "--json",
        "--matrix",
        stdin=panels_file.read_text(),
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout == ""
    recs = records(out.read_text())
    legal = recs[2]
    assert (legal["action"], legal["rule"], legal["defeated"]) == (
        "escalate",
        "legal",
        ["default-CA"],
    )
    assert (legal["theta_s"], legal["theta_a"]) == (0.5, 0.6)
    assert legal["matrix"] == [[1.0, 1.0], [1.0, 1.0]]


def test_route_human_table(panels_file: Path) -> None:
    res = run("route", panels_file, "--similarity", "tfidf")
    assert res.returncode == 0, res.stderr
    assert "seek_context" in res.stdout
    assert "summary" in res.stdout
    assert "routed 3 panels, rejected 0 lines" in res.stdout


def test_every_bad_line_rejected_rest_processed(tmp_path: Path) -> None:
    path = tmp_path / "mixed.jsonl"
    lines = [json.dumps(GOOD[0]), *BAD_LINES.values(), json.dumps(GOOD[1])]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    rejects = tmp_path / "rejects.jsonl"
    res = run("route", path, "--similarity", "tfidf", "--json", "--rejects", rejects)
    assert res.returncode == 3
    assert [r["id"] for r in records(res.stdout)] == ["agree", "split"]
    assert "Traceback" not in res.stderr
    rej = records(rejects.read_text())
    assert [r["line"] for r in rej] == list(range(2, 2 + len(BAD_LINES)))
    fields = [r["field"] for r in rej]
    assert fields[:3] == ["<json>", "outputs", "outputs.0.reasoning"]
    by_message = {r["message"]: r["field"] for r in rej}
    assert by_message["a panel needs at least two agents (got 1)"] == "outputs"
    assert by_message["duplicate agent id 'a'"] == "outputs"
    messages = " | ".join(f"{r['field']}: {r['message']}" for r in rej)
    assert "at least two agents" in messages
    assert "confidence" in messages
    assert "duplicate agent id" in messages
    assert by_message["must be a finite number (got nan)"] == "outputs.0.w"
    assert "lone surrogate" in messages
    assert fields[-1] == "<depth>"
    for r in rej:
        assert f"{path}:{r['line']}: field" in res.stderr


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["route", "missing.jsonl"], "file not found"),
        (["route", "{panels}", "--bogus"], "No such option"),
        (["route", "{panels}", "--theta-a", "1.5"], "theta-a"),
        (["route", "{panels}", "--similarity", "word2vec"], "unknown similarity backend"),
        (["route", "{panels}", "--similarity", "my_mod:f"], "names Python code"),
        (["route", "{panels}", "--similarity", "math:sqrt"], "names Python code"),
        (
            ["route", "{panels}", "--rules", "{bad_rules}", "--similarity", "tfidf"],
            "field 'rules.0.oops'",
        ),
        (
            ["route", "{panels}", "--rules", "{conflict}", "--similarity", "tfidf"],
            "'a' (escalate) and 'b' (auto)",
        ),
        (["route", "{panels}", "--rules", "{yaml_error}", "--similarity", "tfidf"], "invalid YAML"),
        (["route", "{panels}", "--rules", "{binary}", "--similarity", "tfidf"], "not UTF-8"),
        (
            ["route", "{panels}", "--rules", "missing.yaml", "--similarity", "tfidf"],
            "cannot read rules file",
        ),
        (
            ["route", "{panels}", "--json", "--out", "{nowhere}/out.jsonl"],
            "cannot write the output",
        ),
        (
            ["route", "{panels}", "--rejects", "{nowhere}/r.jsonl"],
            "cannot write the rejects",
        ),
        (["calibrate-thresholds", "{panels}"], "--quantile"),
        (["calibrate-thresholds", "{panels}", "--quantile", "2"], "quantile"),
        (
            ["calibrate-thresholds", "{empty}", "--quantile", "0.5", "--similarity", "tfidf"],
            "no valid panels",
        ),
    ],
)
def test_usage_errors_exit_2(
    args: list[str], needle: str, panels_file: Path, tmp_path: Path
) -> None:
    bad_rules = tmp_path / "bad.yaml"
    bad_rules.write_text(
        "rules:\n  - id: a\n    condition: meta.x == 1\n    action: auto\n    oops: 1\n"
    )
    conflict = tmp_path / "conflict.yaml"
    conflict.write_text(
        "rules:\n"
        "  - {id: a, condition: \"meta.category == 'legal'\", action: escalate}\n"
        "  - {id: b, condition: \"meta.risk == 'low'\", action: auto}\n"
    )
    yaml_error = tmp_path / "broken.yaml"
    yaml_error.write_text("rules: [\n")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    binary = tmp_path / "binary.jsonl"
    binary.write_bytes(b"\xff\xfe{}\n")
    names = {
        "panels": panels_file,
        "bad_rules": bad_rules,
        "conflict": conflict,
        "yaml_error": yaml_error,
        "empty": empty,
        "binary": binary,
        "nowhere": tmp_path / "no" / "such" / "dir",  # never created, even when run as root
    }
    res = run(*[a.format(**names) for a in args])
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert needle in res.stderr
    assert "Traceback" not in res.stderr


def test_calibrate_json_with_rejects(panels_file: Path, tmp_path: Path) -> None:
    path = tmp_path / "corpus.jsonl"
    path.write_text(panels_file.read_text() + "{broken\n", encoding="utf-8")
    res = run("calibrate-thresholds", path, "--quantile", "0.5", "--similarity", "tfidf", "--json")
    assert res.returncode == 3
    data = json.loads(res.stdout)
    assert data["model"] == "tfidf"
    assert data["panels"] == 3
    assert data["rejected"] == 1
    assert data["min_similarity"] <= data["theta_s"] <= data["max_similarity"]


def test_callable_backend_on_the_cli(panels_file: Path, tmp_path: Path) -> None:
    (tmp_path / "lenvec.py").write_text(
        "def embed(texts):\n    return [[len(t), 1.0] for t in texts]\n"
    )
    res = run(
        "route",
        panels_file,
        "--similarity",
        "lenvec:embed",
        "--allow-code",
        "--theta-s",
        "0.9",
        "--json",
        "--no-cache",
        env={"PYTHONPATH": str(tmp_path)},
    )
    assert res.returncode == 0, res.stderr
    assert {r["model"] for r in records(res.stdout)} == {"lenvec:embed"}


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        (
            "def embed(texts):\n    raise RuntimeError('model server down')\n",
            "RuntimeError: model server down",
        ),
        ("def embed(texts):\n    return ['not', 'numbers']\n", "ValueError"),
    ],
)
def test_failing_callable_backend_is_one_line(
    body: str, needle: str, panels_file: Path, tmp_path: Path
) -> None:
    (tmp_path / "broken_embed.py").write_text(body)
    res = run(
        "route",
        panels_file,
        "--similarity",
        "broken_embed:embed",
        "--allow-code",
        "--theta-s",
        "0.5",
        "--no-cache",
        env={"PYTHONPATH": str(tmp_path)},
    )
    assert res.returncode == 1
    assert "Traceback" not in res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith("error: embedding function 'broken_embed:embed' failed")
    assert needle in lines[0]


BAD_EMBED_ARGS = [
    "--similarity",
    "bad_embed:embed",
    "--allow-code",
    "--theta-s",
    "0.5",
    "--no-cache",
]
HUGE_ARGS = ["--allow-code", "--theta-s", "0.9", "--no-cache", "--json", "--similarity"]


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ("return None", "returned None"),
        ("return [[float('nan'), 1.0] for t in texts]", "non-finite"),
        ("return [[1 + 2j, 1.0] for t in texts]", "complex"),
        ("return __import__('numpy').ones((len(texts), 2)) * (1 + 1j)", "complex values"),
        ("return __import__('numpy').full((len(texts), 2), float('inf'))", "non-finite"),
        ("raise SystemExit(0)", "SystemExit: 0"),
        ("raise SystemExit('bye')", "SystemExit: bye"),
        ("raise GeneratorExit()", "GeneratorExit"),
        ("raise RuntimeError('down\\nand out')", "RuntimeError: down and out"),
        ("return [[1.0, 2.0]]", "1 rows for"),
        ("return [1.0 for t in texts]", "not a 2-D array"),
    ],
)
def test_a_failing_callable_backend_is_exit_1_naming_it(
    body: str, needle: str, panels_file: Path, tmp_path: Path
) -> None:
    """docs/states.md: a module:function backend that fails is exit 1, one line naming
    it. ``SystemExit(0)`` ended the run with exit 0 and no record; ``None``/NaN were
    exit 2 without naming it; complex values ran on with a ComplexWarning."""
    import sys

    (tmp_path / "bad_embed.py").write_text(f"def embed(texts):\n    {body}\n")
    src = str(Path(__file__).resolve().parent.parent / "src")
    res = subprocess.run(
        [sys.executable, "-m", "dissensus", "route", panels_file, *BAD_EMBED_ARGS],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": f"{src}{os.pathsep}{tmp_path}"},
        check=False,
    )
    assert res.returncode == 1, (res.returncode, res.stderr)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith("error: embedding function 'bad_embed:embed' failed")
    assert needle in lines[0]
    assert "Warning" not in res.stderr and "Traceback" not in res.stderr


def test_a_callable_backend_with_huge_finite_values_is_normalised(
    panels_file: Path, tmp_path: Path
) -> None:
    """``1e308`` (any value past float32) overflowed the float32 cast (RuntimeWarnings, then a false non-finite
    error); rows are normalised, so a huge row means the same as a small one."""
    import sys

    src = str(Path(__file__).resolve().parent.parent / "src")
    outs = []
    for name, scale in (("huge_embed", "1e307"), ("small_embed", "1.0")):
        (tmp_path / f"{name}.py").write_text(
            "def embed(texts):\n"
            f"    return [[{scale} * (len(t) % 3 + 1), {scale}] for t in texts]\n"
        )
        res = subprocess.run(
            [sys.executable, "-m", "dissensus", "route", panels_file, *HUGE_ARGS, f"{name}:embed"],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": f"{src}{os.pathsep}{tmp_path}"},
            check=False,
        )
        assert res.returncode == 0, res.stderr
        assert res.stderr == ""
        outs.append([(r["state"], r["reasoning_similarity"]) for r in records(res.stdout)])
    assert len(outs[0]) == len(outs[1]) > 0
    for (s1, v1), (s2, v2) in zip(outs[0], outs[1], strict=True):
        assert s1 == s2 and v1 == pytest.approx(v2, abs=1e-6)


@pytest.mark.slow
@pytest.mark.embed
def test_route_with_default_model(panels_file: Path, tmp_path: Path) -> None:
    pytest.importorskip("sentence_transformers")
    res = run("route", panels_file, "--json", env={"DISSENSUS_CACHE": str(tmp_path / "cache")})
    assert res.returncode == 0, res.stderr
    recs = records(res.stdout)
    assert {r["model"] for r in recs} == {"all-MiniLM-L6-v2"}
    assert recs[0]["reasoning_similarity"] == 1.0
    assert recs[1]["reasoning_similarity"] < 0.86
    assert (tmp_path / "cache" / "embeddings.sqlite").exists()


def test_line_that_is_not_utf8_is_rejected_and_the_rest_routed(tmp_path: Path) -> None:
    path = tmp_path / "mixed.jsonl"
    good = "".join(json.dumps(p) + "\n" for p in GOOD).encode()
    path.write_bytes(b"\xff\xfe{}\n" + good)
    done = subprocess.run(
        [sys.executable, "-m", "dissensus", "route", str(path), "--similarity", "tfidf", "--json"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 3
    assert "not valid UTF-8" in done.stderr
    assert len(done.stdout.splitlines()) == len(GOOD)


def test_the_min_column_says_n_a_where_similarity_is_undefined(tmp_path: Path) -> None:
    """Fewer than two agents gave reasoning: both similarity columns say n/a (``--json``
    writes null for both), neither 0.000."""
    path = tmp_path / "in.jsonl"
    one = panel("one-reason", ("a", "keep", "satire not harmful"), ("b", "remove", ""))
    path.write_text(json.dumps(one) + "\n")
    res = run("route", path, "--similarity", "tfidf")
    assert res.returncode == 0, res.stderr
    (row,) = [line for line in res.stdout.splitlines() if "one-reason" in line]
    assert row.count("n/a") == 2 and "0.000" not in row.split("n/a", 1)[1], row


def test_route_records_carry_their_input_line_as_decide_records_do(tmp_path: Path) -> None:
    """Panels of one id are told apart by their line (docs/cli.md): ``route --json`` had
    no ``line``. It is the 1-based line of the input, under decide's name and after the
    id; blank and rejected lines are counted, on a file, on standard input, in --out."""
    from pipeline_cases import write_policy

    twice = json.dumps(GOOD[0])
    text = "\n".join([twice, "", json.dumps(GOOD[1]), "{not json", twice, json.dumps(GOOD[2])])
    path = tmp_path / "panels.jsonl"
    path.write_text(text + "\n", encoding="utf-8")
    want = [("agree", 1), ("split", 3), ("agree", 5), ("legal", 6)]
    res = run("route", path, "--similarity", "tfidf", "--json")
    assert res.returncode == 3, res.stderr
    recs = records(res.stdout)
    assert [(r["id"], r["line"]) for r in recs] == want
    assert all(list(r)[:2] == ["id", "line"] for r in recs)
    piped = run("route", "-", "--similarity", "tfidf", "--json", stdin=text + "\n")
    assert [(r["id"], r["line"]) for r in records(piped.stdout)] == want
    out = tmp_path / "out.jsonl"
    assert run("route", path, "--similarity", "tfidf", "--out", out).returncode == 3
    assert [(r["id"], r["line"]) for r in records(out.read_text())] == want
    # decide's records of the same file: the same field, the same numbers.
    policy = write_policy(tmp_path / "policy.yaml")
    journal = tmp_path / "j.sqlite"
    decided = run("decide", path, "--policy", policy, "--journal", journal, "--json")
    assert decided.returncode == 3, decided.stderr
    assert [(r["id"], r["line"]) for r in records(decided.stdout)] == want


def test_calibrate_thresholds_counts_a_repeated_panel_once(tmp_path: Path) -> None:
    """A corpus holding panels twice (``cat a.jsonl a.jsonl``) fitted θ_s on every copy,
    so the repeated panels' similarities counted twice and moved the quantile. The first
    panel of each id is kept, one warning per repeated id; the exit code is unchanged."""
    source = Path(__file__).resolve().parents[1] / "examples" / "llmbar-swap.jsonl"
    lines = [line for line in source.read_text(encoding="utf-8").splitlines() if line][:40]
    once = tmp_path / "once.jsonl"
    once.write_text("\n".join(lines) + "\n", encoding="utf-8")
    twice = tmp_path / "twice.jsonl"
    twice.write_text("\n".join(lines + lines[:15] + lines[:1]) + "\n", encoding="utf-8")
    args = ("--quantile", "0.25", "--similarity", "tfidf", "--json", "--no-cache")
    want = run("calibrate-thresholds", once, *args)
    got = run("calibrate-thresholds", twice, *args)
    assert got.returncode == want.returncode == 0, got.stderr
    assert json.loads(got.stdout) == json.loads(want.stdout)
    assert json.loads(got.stdout)["panels"] == 40
    warnings = got.stderr.splitlines()
    assert len(warnings) == 15, got.stderr
    first = json.loads(lines[0])["id"]
    assert warnings[0] == (
        f"warning: panel id '{first}' appears 3 times (first at line 1): "
        "calibrating on the first only"
    )
    assert want.stderr == ""


@pytest.mark.parametrize("as_json", [True, False])
def test_decisions_that_differ_only_in_spelling_are_said_once(
    tmp_path: Path, as_json: bool
) -> None:
    """A unanimous panel whose judges wrote 'remove', 'Remove ' and a full-width 'remove'
    read as a disagreement and was escalated, with nothing said. The reading is unchanged
    (a label is read as written), but one warning counts such panels and names the
    first with its spellings."""
    same = "the post targets a group"
    rows = [
        panel("plain", ("a", "keep", same), ("b", "keep", same)),
        panel("case", ("a", "remove", same), ("b", "Remove ", same), ("c", "remove", same)),
        panel("wide", ("a", "\uff52\uff45\uff4d\uff4f\uff56\uff45", same), ("b", "remove", same)),
        panel("apart", ("a", "keep", same), ("b", "remove", same)),
    ]
    path = tmp_path / "p.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    flags = ["--json"] if as_json else []
    res = run("route", path, "--similarity", "tfidf", *flags)
    assert res.returncode == 0, res.stderr
    warnings = [line for line in res.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1, res.stderr
    assert "2 panel(s) have decisions that differ only in case" in warnings[0]
    assert "(first: line 2, panel 'case': 'Remove ', 'remove')" in warnings[0]
    if as_json:
        states = {r["id"]: r["state"] for r in map(json.loads, res.stdout.splitlines())}
        assert states["case"] == "CD"  # read as written: the warning is what changed
    path.write_text(json.dumps(rows[0]) + "\n" + json.dumps(rows[3]) + "\n", encoding="utf-8")
    assert "warning" not in run("route", path, "--similarity", "tfidf", *flags).stderr


def test_an_input_that_is_a_link_to_nothing_says_so(tmp_path: Path) -> None:
    """A loop of symbolic links and a link whose file is gone were "file not found"
    alone, naming a file ``ls`` shows."""
    from dissensus.cli.common import check_input_path
    from dissensus.errors import InputError

    (tmp_path / "one.jsonl").symlink_to("two.jsonl")
    (tmp_path / "two.jsonl").symlink_to("one.jsonl")
    (tmp_path / "gone.jsonl").symlink_to("deleted.jsonl")
    for name, why in (
        ("one.jsonl", "(a loop of symbolic links)"),
        ("gone.jsonl", "(a broken symbolic link to deleted.jsonl)"),
        ("missing.jsonl", ""),
    ):
        path = str(tmp_path / name)
        with pytest.raises(InputError) as err:
            check_input_path(path)
        assert str(err.value) == f"file not found: {path} {why}".rstrip()
