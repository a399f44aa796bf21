"""``dissensus convert`` through a subprocess: outputs, exit codes 0 / 2 / 3, error messages."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import dissensus
from cli_helpers import run_cli
from dissensus.types import Panel, VoteCase


def run(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return run_cli("convert", *args)


def _write_tiny(root: Path, winners: list[str | None]) -> Path:
    base = root / "Tiny"
    items = [
        {"input": f"i{k}", "output_1": "a", "output_2": "b", "label": 1}
        for k in range(len(winners))
    ]
    base.mkdir(parents=True)
    (base / "dataset.json").write_text(json.dumps(items))
    for judge in ("GPT-4", "LLaMA2"):
        folder = base / "evaluators" / judge / "CoT"
        folder.mkdir(parents=True)
        results = [
            {
                **items[k],
                "results": [
                    {"swap = False": {"winner": w, "completion": [f"{judge} {k}", "stop"]}}
                ],
            }
            for k, w in enumerate(winners)
        ]
        (folder / "result.json").write_text(json.dumps(results))
    return root


def test_llmbar_panels_to_stdout(shared_data: Path) -> None:
    proc = run("llmbar", shared_data / "llmbar")
    assert proc.returncode == 0, proc.stderr
    panels = [Panel.model_validate_json(line) for line in proc.stdout.splitlines()]
    assert len(panels) == 326
    assert {p.meta["strategy"] for p in panels} == {"CoT"}


def test_llmbar_swap_votes_to_file(shared_data: Path, tmp_path: Path) -> None:
    out = tmp_path / "votes.jsonl"
    proc = run(
        "llmbar",
        shared_data / "llmbar",
        "--strategy",
        "Swap_CoT",
        "--as",
        "votes",
        "--per-subset",
        "3",
        "--out",
        out,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""
    cases = [VoteCase.model_validate_json(line) for line in out.read_text().splitlines()]
    assert len(cases) == 9
    assert all(
        set(c.meta["swap_answers"]) == {v.agent for v in c.votes} | set(c.meta["abstained"])
        for c in cases
    )


def test_varierrnli_train_skips_single_annotator_items(shared_data: Path, tmp_path: Path) -> None:
    rejects = tmp_path / "skipped.jsonl"
    proc = run(
        "varierrnli", shared_data / "varierrnli" / "VariErrNLI_train.json", "--rejects", rejects
    )
    assert proc.returncode == 3
    assert len(proc.stdout.splitlines()) == 385
    lines = [line for line in proc.stderr.splitlines() if line.startswith("skipped ")]
    assert len(lines) == 3
    assert all("VariErrNLI_train.json: item " in line and "'annotations'" in line for line in lines)
    assert len(rejects.read_text().splitlines()) == 3


def test_malformed_item_reported_rest_converted(tmp_path: Path) -> None:
    root = _write_tiny(tmp_path / "data", ["1", "bogus", "2"])
    proc = run("llmbar", root)
    assert proc.returncode == 3
    ids = [json.loads(line)["id"] for line in proc.stdout.splitlines()]
    assert ids == ["Tiny/0", "Tiny/2"]
    assert "result.json: item 1: field 'results.0.swap = False.winner'" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_abstention_written_as_null(tmp_path: Path) -> None:
    root = _write_tiny(tmp_path / "data", [None])
    proc = run("llmbar", root)
    assert proc.returncode == 0, proc.stderr
    panel = json.loads(proc.stdout)
    assert [o["decision"] for o in panel["outputs"]] == [None, None]
    votes = run("llmbar", root, "--as", "votes")
    assert votes.returncode == 3  # no voter at all: the case is skipped, and said so
    assert "item 0: field 'votes'" in votes.stderr


def test_usage_errors_exit_2(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "list.json").write_text("[]")
    cases = [
        (("llmbar", tmp_path / "missing"), "not a directory"),
        (("llmbar", tmp_path / "empty", "--out", tmp_path / "out.jsonl"), "no LLMBar subset found"),
        (("llmbar", tmp_path / "empty", "--strategy", "Best"), "--strategy"),
        (("llmbar", tmp_path / "empty", "--as", "rows"), "--as"),
        (("varierrnli", tmp_path / "missing.json"), "file not found"),
        (("varierrnli", tmp_path / "list.json"), "expected a JSON object"),
    ]
    for args, message in cases:
        proc = run(*args)
        assert proc.returncode == 2, (args, proc.stderr)
        assert message in proc.stderr, (args, proc.stderr)
        assert "Traceback" not in proc.stderr
        assert proc.stdout == ""
    assert not (tmp_path / "out.jsonl").exists()  # a wrong layout leaves no output file


def test_unwritable_outputs_and_non_utf8_sources_exit_2(tmp_path: Path) -> None:
    root = _write_tiny(tmp_path / "data", ["1"])
    (tmp_path / "binary.json").write_bytes(b'{"a": "\xff"}')
    broken = _write_tiny(tmp_path / "broken", ["1"])
    (broken / "Tiny" / "dataset.json").write_bytes(b'[{"input": "\xff"}]')
    nowhere = tmp_path / "no" / "such" / "dir" / "x.jsonl"
    cases = [
        (("llmbar", root, "--out", nowhere), "cannot write the output file"),
        (("llmbar", root, "--rejects", nowhere), "cannot write the rejects file"),
        (("varierrnli", tmp_path / "binary.json"), "not UTF-8 text"),
        (("llmbar", broken), "not UTF-8 text"),
    ]
    for args, message in cases:
        proc = run(*args)
        assert proc.returncode == 2, (args, proc.stderr)
        assert "Traceback" not in proc.stderr
        assert proc.stderr.startswith("error: ") and message in proc.stderr, (args, proc.stderr)
        assert len(proc.stderr.strip().splitlines()) == 1


def test_rejects_file_lists_every_skipped_item(tmp_path: Path) -> None:
    root = _write_tiny(tmp_path / "data", ["bogus", "1", "7"])
    rejects = tmp_path / "rejects.jsonl"
    proc = run("llmbar", root, "--rejects", rejects)
    assert proc.returncode == 3
    rows = [json.loads(line) for line in rejects.read_text().splitlines()]
    assert [(r["item"], r["field"]) for r in rows] == [
        ("0", "results.0.swap = False.winner"),
        ("2", "results.0.swap = False.winner"),
    ]
    assert [json.loads(line)["id"] for line in proc.stdout.splitlines()] == ["Tiny/1"]


def _write_zeroeval(root: Path, models: tuple[str, ...] = ("ModelA", "ModelB")) -> Path:
    root.mkdir(parents=True)
    for model in models:
        rows = [
            {
                "session_id": f"s{k}",
                "question": f"q{k}",
                "output": ['{"answer": "4"}'],
                "answer": "4",
            }
            for k in range(2)
        ]
        (root / f"{model}.json").write_text(json.dumps(rows))
    return root


def test_outputs_may_not_be_a_source_file(tmp_path: Path) -> None:
    """``--out`` / ``--rejects`` naming a file the converter reads: exit 2, every file as it was."""
    lb = _write_tiny(tmp_path / "lb", ["1", "2"])
    ze = _write_zeroeval(tmp_path / "ze")
    sources = [
        lb / "Tiny" / "dataset.json",
        lb / "Tiny" / "evaluators" / "GPT-4" / "CoT" / "result.json",
        lb / "Tiny" / "evaluators" / "LLaMA2" / "CoT" / "result.json",
        ze / "ModelA.json",
        ze / "ModelB.json",
    ]
    before = {p: p.read_bytes() for p in sources}
    cases = [
        ("llmbar", lb, "--out", sources[0]),
        ("llmbar", lb, "--rejects", sources[1]),
        ("llmbar", lb, "--as", "votes", "--rejects", sources[2]),
        ("zeroeval", ze, "--out", sources[3]),
        ("zeroeval", ze, "--rejects", sources[4]),
    ]
    for args in cases:
        proc = run(*args)
        assert proc.returncode == 2, (args, proc.stderr)
        assert proc.stderr.startswith("error: ") and "same file as" in proc.stderr, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1
        assert proc.stdout == ""
        assert {p: p.read_bytes() for p in sources} == before, args


def test_failed_conversion_leaves_rejects_file_untouched(tmp_path: Path) -> None:
    """A conversion that fails (exit 2) after starting replaces neither output."""
    root = _write_tiny(tmp_path / "data", ["bogus", "1"])
    second = _write_tiny(tmp_path / "data2", ["1"])
    (root / "Zzz").mkdir()
    (second / "Tiny").rename(root / "Zzz" / "Tiny")
    (root / "Zzz" / "Tiny" / "dataset.json").write_text("{not json")
    rejects, out = tmp_path / "rejects.jsonl", tmp_path / "out.jsonl"
    rejects.write_text("old rejects\n")
    out.write_text("old out\n")
    proc = run("llmbar", root, "--rejects", rejects, "--out", out)
    assert proc.returncode == 2, proc.stderr
    assert rejects.read_text() == "old rejects\n"
    assert out.read_text() == "old out\n"


def test_zeroeval_reports_items_it_cannot_join(tmp_path: Path) -> None:
    root = tmp_path / "ze"
    root.mkdir()
    good = {"question": "q", "output": ['{"answer": "4"}'], "answer": "4"}
    (root / "ModelA.json").write_text(
        json.dumps(
            [
                {**good, "session_id": "s0"},
                {**good, "session_id": 7},
                {**good},
                "not an object",
                {**good, "session_id": "s0", "output": ['{"answer": "5"}']},
            ]
        )
    )
    (root / "ModelB.json").write_text(json.dumps([{**good, "session_id": "s0"}]))
    rejects = tmp_path / "rejects.jsonl"
    proc = run("zeroeval", root, "--rejects", rejects)
    assert proc.returncode == 3, proc.stderr
    rows = [json.loads(line) for line in rejects.read_text().splitlines()]
    assert [(Path(r["file"]).name, r["item"], r["field"]) for r in rows] == [
        ("ModelA.json", "1", "session_id"),
        ("ModelA.json", "2", "session_id"),
        ("ModelA.json", "3", "<item>"),
        ("ModelA.json", "4", "session_id"),
    ]
    assert "duplicate session_id 's0'" in rows[3]["message"] and "first" in rows[3]["message"]
    assert len(proc.stderr.strip().splitlines()) == 4
    panels = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [p["id"] for p in panels] == ["s0"]
    assert {o["agent"]: o["decision"] for o in panels[0]["outputs"]} == {
        "ModelA": "4",  # the first of the two s0 items
        "ModelB": "4",
    }


def test_zeroeval_model_named_like_an_internal_key(tmp_path: Path) -> None:
    root = _write_zeroeval(tmp_path / "ze", ("Model", "__seen__"))
    proc = run("zeroeval", root)
    assert proc.returncode == 0, proc.stderr
    panels = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [sorted(o["agent"] for o in p["outputs"]) for p in panels] == [["Model", "__seen__"]] * 2


def test_zeroeval_silent_models_are_not_read_as_identical(tmp_path: Path) -> None:
    """Models with no output were each given the reasoning "(no output)", exit 0: route
    read them as identical (similarity 1.0), CD, escalate. They are abstentions without
    reasoning; an output that is not text is reported (exit 3), the rest converted."""
    root = tmp_path / "ze"
    root.mkdir()
    second = {"session_id": "s1", "question": "q", "output": ['{"answer": "4"}'], "answer": "4"}
    for model, output in [("A", []), ("B", [""]), ("C", [None])]:
        first = {"session_id": "s0", "question": "q", "output": output, "answer": "# 18"}
        (root / f"{model}.json").write_text(json.dumps([first, second]))
    proc = run("zeroeval", root)
    assert (proc.returncode, proc.stderr) == (0, "")
    silent = json.loads(proc.stdout.splitlines()[0])
    assert [(o["decision"], o["reasoning"]) for o in silent["outputs"]] == [(None, "")] * 3
    routed = run_cli("route", "-", "--similarity", "tfidf", "--json", stdin=proc.stdout)
    assert routed.returncode == 0, routed.stderr
    first_line = json.loads(routed.stdout.splitlines()[0])
    assert (first_line["state"], first_line["reasoning_similarity"]) == ("DD", None)
    assert first_line["missing_reasoning"] == ["A", "B", "C"]

    rows = json.loads((root / "B.json").read_text())
    rows[0]["output"] = [{"reasoning": "r", "answer": "18"}]
    (root / "B.json").write_text(json.dumps(rows))
    rejects = tmp_path / "rejects.jsonl"
    proc = run("zeroeval", root, "--rejects", rejects)
    assert proc.returncode == 3, proc.stderr
    assert proc.stderr == (
        f"skipped {root / 'B.json'}: item s0: field 'output': element 0 must be a string or "
        "null, got dict {'answer': '18', 'reasoning': 'r'}\n"
    )
    (reject,) = [json.loads(line) for line in rejects.read_text().splitlines()]
    assert (reject["file"], reject["item"], reject["field"]) == (
        str(root / "B.json"),
        "s0",
        "output",
    )
    assert [json.loads(line)["id"] for line in proc.stdout.splitlines()] == ["s1"]


def test_a_source_without_items_is_an_error_not_an_empty_success(tmp_path: Path) -> None:
    """A ``{}`` VariErrNLI file exited 0 with no line and no word; so did a directory of
    empty ZeroEval files."""
    (tmp_path / "empty.json").write_text("{}")
    ze = tmp_path / "ze"
    ze.mkdir()
    for model in ("a", "b"):
        (ze / f"{model}.json").write_text("[]")
    for args, message in [
        (("varierrnli", tmp_path / "empty.json"), "no item (an empty object"),
        (("zeroeval", ze), "no problem in any model file"),
    ]:
        proc = run(*args)
        assert proc.returncode == 2, (args, proc.stderr)
        assert proc.stderr.startswith("error: ") and message in proc.stderr, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1 and proc.stdout == ""


def test_skip_lines_are_bounded_and_escape_control_characters(tmp_path: Path) -> None:
    item = {
        "text": {"context": "c", "statement": "s"},
        "annotators": "A,B",
        "annotations": {"A": "neutral", "B": "\x1b[2Jbogus" + "z" * 40_000},
        "soft_label": {"neutral": {"0": 0.5, "1": 0.5}},
        "split": "dev",
        "other_info": {"explanations": ["x", "y"]},
    }
    path = tmp_path / "v.json"
    path.write_text(json.dumps({"k\x07" + "K" * 50_000: item}))
    rejects = tmp_path / "rejects.jsonl"
    proc = run("varierrnli", path, "--rejects", rejects)
    assert proc.returncode == 3, proc.stderr
    (line,) = proc.stderr.splitlines()
    assert "\x1b" not in line and "\x07" not in line and len(line) < 800, line[:300]
    assert "(50002 characters)" in line and "(40009 characters)" in line
    (row,) = [json.loads(r) for r in rejects.read_text().splitlines()]
    assert row["field"] == "annotations.B" and len(row["item"]) < 250


def _big_llmbar(root: Path) -> Path:
    """A subset whose panels are well over a standard output buffer (8 KiB)."""
    root = _write_tiny(root, ["1", "2"] * 20)
    for result in root.glob("Tiny/evaluators/*/CoT/result.json"):
        rows = json.loads(result.read_text())
        for row in rows:
            row["results"][0]["swap = False"]["completion"][0] += " reasoning" * 100
        result.write_text(json.dumps(rows))
    return root


@pytest.mark.parametrize("unbuffered", [False, True], ids=["buffered", "unbuffered"])
@pytest.mark.parametrize("source", ["llmbar", "zeroeval"])
def test_a_full_standard_output_is_one_line_naming_it(
    tmp_path: Path, source: str, unbuffered: bool
) -> None:
    """``convert ... > /dev/full`` said ``error: No space left on device (ENOSPC)``, not
    which file; every command names standard output (docs/cli.md)."""
    if source == "llmbar":
        argv = ["convert", "llmbar", str(_big_llmbar(tmp_path / "lb"))]
    else:
        argv = ["convert", "zeroeval", str(_write_zeroeval(tmp_path / "ze"))]
    # A real interpreter: its standard output is the one the failure went unnamed on.
    python = [sys.executable, *(["-u"] if unbuffered else []), "-m", "dissensus"]
    env = {**os.environ, "PYTHONPATH": str(Path(dissensus.__file__).parent.parent)}
    with open("/dev/full", "w") as full:
        proc = subprocess.run(
            [*python, *argv], stdout=full, stderr=subprocess.PIPE, text=True, env=env
        )
    code, text = proc.returncode, proc.stderr
    assert code == 1, text
    assert text.splitlines() == [
        "error: cannot write standard output: No space left on device (ENOSPC)"
    ], text


@pytest.mark.parametrize("source", ["llmbar", "zeroeval"])
def test_a_source_file_that_is_a_broken_link_exits_2_naming_it(tmp_path: Path, source: str) -> None:
    """A judge's result.json or a model file that is a broken symbolic link was passed
    over with exit 0; it is refused, one line naming the file, nothing written."""
    if source == "llmbar":
        root = _write_tiny(tmp_path / "lb", ["1", "2"])
        odd = root / "Tiny" / "evaluators" / "LLaMA2" / "CoT" / "result.json"
        what = "an LLMBar result file"
    else:
        root = _write_zeroeval(tmp_path / "ze", ("ModelA", "ModelB", "ModelC"))
        odd = root / "ModelC.json"
        what = "a ZeroEval model file"
    odd.unlink()
    odd.symlink_to(tmp_path / "gone.json")
    out = tmp_path / "out.jsonl"
    proc = run(source, root, "--out", out)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [f"error: {odd}: cannot read {what}: a broken symbolic link"]
    assert proc.stdout == "" and not out.exists()


@pytest.mark.parametrize("existed", [False, True])
def test_an_interrupted_conversion_keeps_the_rejects_so_far(tmp_path: Path, existed: bool) -> None:
    """An interrupted ``convert --rejects r.jsonl`` removed what it had written of
    ``r.jsonl`` (a file of an earlier run stayed in its place), while an interrupted
    route, vote or calibrate keeps the lines it rejected so far. It keeps the items
    skipped before the interrupt; ``--out`` is not written, as route's is not."""
    from pydantic import BaseModel

    from dissensus.cli.convert import _convert, _SkipLog
    from dissensus.convert.skips import Skipped

    class Record(BaseModel):
        id: str

    rejects, out = tmp_path / "r.jsonl", tmp_path / "o.jsonl"
    if existed:
        rejects.write_text("old rejects\n", encoding="utf-8")
    skips = _SkipLog()
    skipped = [Skipped(file="d.json", item=str(i), field="winner", message="bad") for i in (1, 3)]

    def records() -> object:
        yield Record(id="0")
        skips(skipped[0])
        yield Record(id="2")
        skips(skipped[1])
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _convert(records(), skips, str(out), str(rejects), "test")  # type: ignore[arg-type]
    rows = [json.loads(line) for line in rejects.read_text(encoding="utf-8").splitlines()]
    assert rows == [s.model_dump() for s in skipped]
    assert not out.exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []
