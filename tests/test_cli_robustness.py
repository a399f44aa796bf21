"""Robustness of the command line: huge YAML integers,
oversized or special configuration files, full disks, journal sidecars and devices,
deeply nested journal payloads. Every failure is one line with its documented code."""

from __future__ import annotations

import errno
import importlib
import io
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

import dissensus
from cli_helpers import cli
from dissensus import files
from dissensus.signing import MAX_KEY_BYTES
from dissensus.store.canonical import GENESIS, canonical, chain_hash
from pipeline_cases import panel, write_jsonl, write_policy

HUGE = "1" + "0" * 5000


def _one_line(err: str) -> None:
    assert "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1, err
    assert err.startswith("error: "), err


@pytest.mark.parametrize("where", ["policy", "script", "rules", "problem", "task", "fake-llm"])
def test_a_yaml_integer_too_long_to_convert_is_one_line(tmp_path: Path, where: str) -> None:
    inp = write_jsonl(tmp_path / "in.jsonl", [panel("a", ["1", "1"])])
    bad = tmp_path / "bad.yaml"
    j = tmp_path / "j.sqlite"
    if where == "policy":
        bad.write_text(f"reading:\n  similarity: tfidf\nconcurrency: {HUGE}\n")
        args: list[str | Path] = ["decide", inp, "--policy", bad, "--journal", j]
    else:
        bad.write_text(f"rules: []\ndefault: x\nn: {HUGE}\n")
        args = {
            "script": ["decide", inp, "--model", f"scripted:{bad}", "--journal", j],
            "rules": ["route", inp, "--rules", bad],
            "problem": ["negotiate", bad],
            "task": ["deliberate", bad],
            "fake-llm": ["fake-llm", "--script", bad, "--port", "0"],
        }[where]
    res = cli(*args)
    assert res.code == 2, res.err
    _one_line(res.err)
    assert "4300 digits" in res.err and "bad.yaml" in res.err
    if where in ("policy", "script", "rules"):
        assert "line 3" in res.err


def _fifo(tmp_path: Path) -> Path:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    return fifo


@pytest.mark.parametrize("kind", ["device", "fifo", "directory"])
def test_configuration_files_must_be_regular_files(tmp_path: Path, kind: str) -> None:
    special = {"device": "/dev/zero", "fifo": str(_fifo(tmp_path)), "directory": str(tmp_path)}
    path = special[kind]
    named = {"device": "a character device", "fifo": "a named pipe", "directory": "a directory"}
    inp = write_jsonl(tmp_path / "in.jsonl", [panel("a", ["1", "1"])])
    pol = tmp_path / "p.yaml"
    pol.write_text(f"reading:\n  similarity: tfidf\nguard:\n  calibration: {path}\n")
    j = tmp_path / "j.sqlite"
    for args in (
        ["decide", inp, "--policy", pol, "--journal", j],
        ["decide", inp, "--policy", path, "--journal", j],
        ["route", inp, "--rules", path],
        ["vote", inp, "--calibration", path],
        ["negotiate", path],
        ["decide", inp, "--model", f"scripted:{path}", "--journal", j],
        ["decide", inp, "--model", f"replay:{path}", "--journal", j],
    ):
        res = cli(*args)
        assert res.code == 2, (args, res.err)
        _one_line(res.err)
        # (a directory is refused earlier by some commands, in their own words)
        assert named[kind].split()[-1] in res.err, (args, res.err)
        assert kind == "directory" or "not a regular file" in res.err, (args, res.err)
    assert not j.exists() or j.stat().st_size == 0 or _no_runs(j)


def _no_runs(journal: Path) -> bool:
    res = cli("runs", "list", "--journal", journal, "--json")
    return res.code == 0 and res.out.strip() == ""


def test_a_public_key_must_be_a_small_regular_file(tmp_path: Path) -> None:
    inp = write_jsonl(tmp_path / "in.jsonl", [panel("a", ["1", "1"])])
    j = tmp_path / "j.sqlite"
    assert cli("decide", inp, "--policy", write_policy(tmp_path / "p.yaml"), "--journal", j,
               "--run-id", "R").code == 0  # fmt: skip
    res = cli("runs", "verify", "R", "--journal", j, "--public-key", "/dev/zero")
    assert res.code == 2 and "not a regular file (a character device)" in res.err
    _one_line(res.err)
    big = tmp_path / "big.pem"
    with big.open("wb") as handle:
        handle.truncate(MAX_KEY_BYTES + 1)
    res = cli("runs", "verify", "R", "--journal", j, "--public-key", big)
    assert res.code == 2 and f"{MAX_KEY_BYTES + 1:,} bytes; at most {MAX_KEY_BYTES:,}" in res.err
    _one_line(res.err)


def test_a_configuration_file_over_the_bound_is_refused_by_its_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(files, "MAX_FILE_BYTES", 1000)
    inp = write_jsonl(tmp_path / "in.jsonl", [panel("a", ["1", "1"])])
    pol = write_policy(tmp_path / "p.yaml")
    pol.write_text(pol.read_text() + "#" * 2000 + "\n")
    res = cli("decide", inp, "--policy", pol, "--journal", tmp_path / "j.sqlite")
    assert res.code == 2 and "bytes; at most 1,000" in res.err, res.err
    _one_line(res.err)
    cal = tmp_path / "cal.json"
    cal.write_text("[" + " " * 2000 + "]")
    res = cli("vote", inp, "--calibration", cal)
    assert res.code == 2 and "2,002 bytes; at most 1,000" in res.err, res.err
    _one_line(res.err)


def _nest_one_payload(journal: Path, run_id: str, seq: int, depth: int) -> str:
    """Edit event ``seq`` of ``run_id`` to hold a list nested ``depth`` deep and re-hash
    the chain after it (as someone with write access to the file could); its key."""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 4 * depth))
    try:
        db = sqlite3.connect(journal)
        rows = db.execute(
            "SELECT rowid, run_id, seq, key, type, case_ref, at, payload FROM events "
            "WHERE run_id = ? ORDER BY seq",
            (run_id,),
        ).fetchall()
        prev, key = GENESIS, ""
        for rowid, run, n, k, typ, case, at, text in rows:
            payload = json.loads(text)
            if n == seq:
                deep: list[object] = []
                for _ in range(depth):
                    deep = [deep]
                payload["deep"] = deep
                text, key = canonical(payload), k
            body = {"run": run, "seq": n, "key": k, "type": typ, "case": case, "at": at,
                    "payload": payload}  # fmt: skip
            digest = chain_hash(prev, body)
            db.execute("UPDATE events SET payload = ?, prev_hash = ?, hash = ? WHERE rowid = ?",
                       (text, prev, digest, rowid))  # fmt: skip
            prev = digest
        db.execute("UPDATE runs SET head_hash = ? WHERE run_id = ?", (prev, run_id))
        db.commit()
        db.close()
    finally:
        sys.setrecursionlimit(limit)
    return key


def test_a_journal_payload_nested_too_deeply_is_damage_named_by_its_event(tmp_path: Path) -> None:
    inp = write_jsonl(tmp_path / "in.jsonl", [panel(f"p{i}", ["1", "1", "2"]) for i in range(2)])
    j = tmp_path / "j.sqlite"
    pol = write_policy(tmp_path / "p.yaml")
    assert cli("decide", inp, "--policy", pol, "--journal", j, "--run-id", "R").code == 0
    key = _nest_one_payload(j, "R", 1, 5000)
    res = cli("runs", "verify", "R", "--journal", j)
    assert res.code == 1 and "Traceback" not in res.err, res.err
    assert f"event 1 ({key})" in res.out + res.err and "nested too deeply" in res.out + res.err
    for args in (["resume"], ["show", "--json"], ["show"], ["export"]):
        res = cli("runs", args[0], "R", *args[1:], "--journal", j)
        assert res.code == 2, (args, res.err)
        _one_line(res.err)
        assert f"event 1 ({key})" in res.err, (args, res.err)
    assert cli("review", "list", "--journal", j).code == 0


@pytest.mark.parametrize("suffix", ["-wal", "-shm", "-journal"])
def test_an_output_may_not_be_a_sidecar_file_of_the_journal(tmp_path: Path, suffix: str) -> None:
    inp = write_jsonl(tmp_path / "in.jsonl", [panel("a", ["1", "1"])])
    pol = write_policy(tmp_path / "p.yaml")
    j = tmp_path / "j.sqlite"
    side = tmp_path / f"j.sqlite{suffix}"
    res = cli("decide", inp, "--policy", pol, "--journal", j, "--output", side)  # a new journal
    assert res.code == 2 and "beside the journal" in res.err, res.err
    _one_line(res.err)
    assert not side.exists()
    assert cli("decide", inp, "--policy", pol, "--journal", j, "--run-id", "R").code == 0
    for args in (
        ["decide", inp, "--policy", pol, "--journal", j, "--output", side],
        ["decide", inp, "--policy", pol, "--journal", j, "--rejects", side],
        ["runs", "export", "R", "--journal", j, "--output", side],
        ["runs", "resume", "R", "--journal", j, "--output", side],
    ):
        res = cli(*args)
        assert res.code == 2 and f"beside the journal {j}" in res.err, (args, res.err)
        _one_line(res.err)
    assert cli("runs", "verify", "R", "--journal", j).code == 0
    other = tmp_path / f"in.jsonl{suffix}"  # beside a file that is not a journal: fine
    assert cli("route", inp, "--similarity", "tfidf", "--out", other).code == 0


@pytest.mark.parametrize("device", ["/dev/null", "/dev/full", "fifo"])
def test_a_journal_that_is_not_a_regular_file_is_refused_untouched(
    tmp_path: Path, device: str
) -> None:
    path = str(_fifo(tmp_path)) if device == "fifo" else device
    inp = write_jsonl(tmp_path / "in.jsonl", [panel("a", ["1", "1"])])
    pol = write_policy(tmp_path / "p.yaml")
    existed = Path(f"{path}-journal").exists()
    for args in (
        ["runs", "list", "--journal", path],
        ["decide", inp, "--policy", pol, "--journal", path],
        ["review", "list", "--journal", path],
    ):
        res = cli(*args)
        assert res.code == 2, (args, res.err)
        _one_line(res.err)
        assert f"journal {path}: not a regular file" in res.err, res.err
    assert Path(f"{path}-journal").exists() == existed
    from dissensus.errors import InputError
    from dissensus.store import Journal

    with pytest.raises(InputError, match="not a regular file"):
        Journal(path)


class _FullDisk(io.RawIOBase):
    """A raw file whose every write fails as on a full disk."""

    def __init__(self, fd: int) -> None:
        self._fd = fd

    def writable(self) -> bool:
        return True

    def write(self, data: object) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def close(self) -> None:
        if not self.closed:
            os.close(self._fd)
        super().close()


def test_a_full_disk_under_an_output_file_is_one_line_and_keeps_the_old_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    inp = write_jsonl(tmp_path / "in.jsonl", [panel(f"p{i}", ["1", "1"]) for i in range(3)])
    pol = write_policy(tmp_path / "p.yaml")
    j = tmp_path / "j.sqlite"
    out = tmp_path / "out.jsonl"
    out.write_text("previous\n")
    monkeypatch.setattr(os, "fdopen", lambda fd, mode: io.BufferedWriter(_FullDisk(fd)))
    res = cli("decide", inp, "--policy", pol, "--journal", j, "--output", out, "--run-id", "R")
    monkeypatch.undo()
    assert res.code == 1, res.err
    _one_line(res.err)
    assert f"cannot write the output file {out}: No space left on device (ENOSPC)" in res.err
    assert out.read_text() == "previous\n"
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")) == []
    assert cli("runs", "verify", "R", "--journal", j).code == 0


def test_a_device_that_is_full_as_an_output_or_rejects_file_is_one_line(tmp_path: Path) -> None:
    inp = write_jsonl(tmp_path / "in.jsonl", ['{"id": 1}', panel("a", ["1", "1"])])
    pol = write_policy(tmp_path / "p.yaml")
    for option, what in (("--output", "output file"), ("--rejects", "rejects file")):
        j = tmp_path / f"j{option}.sqlite"
        res = cli("decide", inp, "--policy", pol, "--journal", j, option, "/dev/full")
        assert res.code == 1, res.err
        errors = [x for x in res.err.splitlines() if not x.startswith("rejected ")]
        assert len(errors) == 1, errors
        assert errors[0].startswith(
            f"error: cannot write the {what} /dev/full: No space left on device (ENOSPC); "
        )
        assert "dissensus runs resume " in errors[0] and f"--journal {j}" in errors[0]
        # The resume command names the run's own file, to write once there is room.
        assert f"{option} /dev/full" in errors[0].partition("dissensus runs resume ")[2]


def test_a_full_standard_output_names_the_rejects_file_in_its_resume_command(
    tmp_path: Path,
) -> None:
    """``decide ... --rejects R > /dev/full``: the resume command the line names carries
    ``--rejects R``, so the resumed run writes the rejected lines there again."""
    inp = write_jsonl(tmp_path / "in.jsonl", [panel("a", ["1", "1"]), '{"id": 1}'])
    pol = write_policy(tmp_path / "p.yaml")
    j, rejects = tmp_path / "j.sqlite", tmp_path / "r j.jsonl"
    args = [sys.executable, "-m", "dissensus", "decide", str(inp), "--policy", str(pol),
            "--journal", str(j), "--run-id", "R", "--rejects", str(rejects)]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(Path(dissensus.__file__).parent.parent)}
    with open("/dev/full", "w") as full:
        res = subprocess.run(args, stdout=full, stderr=subprocess.PIPE, text=True, env=env)
    assert res.returncode == 1, res.stderr
    errors = [x for x in res.stderr.splitlines() if x.startswith("error: ")]
    assert len(errors) == 1, res.stderr
    assert errors[0].endswith(
        f"dissensus runs resume R --journal {j} --output FILE --rejects '{rejects}' "
        "goes on and writes all its records once there is room"
    )
    # ``--output -`` is standard output too: the line says to write a file, not "-".
    j2 = tmp_path / "j2.sqlite"
    args = [*args[:8], str(j2), "--run-id", "R", "--output", "-"]
    with open("/dev/full", "w") as full:
        res = subprocess.run(args, stdout=full, stderr=subprocess.PIPE, text=True, env=env)
    assert res.returncode == 1, res.stderr
    errors = [x for x in res.stderr.splitlines() if x.startswith("error: ")]
    assert errors[-1].endswith(
        f"dissensus runs resume R --journal {j2} --output FILE "
        "goes on and writes all its records once there is room"
    ), errors
    # A full rejects file, standard output fine: the run's own --output - / --json stay.
    for i, (given, said) in enumerate(((["--output", "-"], "--output -"), (["--json"], "--json"))):
        j3 = tmp_path / f"j3{i}.sqlite"
        args = [*args[:8], str(j3), "--run-id", "R", *given, "--rejects", "/dev/full"]
        res = subprocess.run(args, capture_output=True, text=True, env=env)
        assert res.returncode == 1, res.stderr
        errors = [x for x in res.stderr.splitlines() if x.startswith("error: ")]
        assert errors[-1].endswith(
            f"dissensus runs resume R --journal {j3} {said} --rejects /dev/full "
            "goes on and writes all its records once there is room"
        ), errors


@pytest.mark.parametrize("json_out", [True, False])
def test_a_full_standard_output_is_one_line_and_a_closed_pipe_still_exit_0(
    tmp_path: Path, json_out: bool
) -> None:
    inp = write_jsonl(tmp_path / "in.jsonl", [panel(f"p{i}", ["1", "1"]) for i in range(3)])
    pol = write_policy(tmp_path / "p.yaml")
    args = [sys.executable, "-m", "dissensus", "decide", str(inp), "--policy", str(pol),
            "--journal", str(tmp_path / "j.sqlite"), *(["--json"] if json_out else [])]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(Path(dissensus.__file__).parent.parent)}
    with open("/dev/full", "w") as full:
        res = subprocess.run(args, stdout=full, stderr=subprocess.PIPE, text=True, env=env)
    assert res.returncode == 1, res.stderr
    _one_line(res.stderr)
    assert "No space left on device (ENOSPC)" in res.stderr
    if json_out:
        assert "cannot write standard output" in res.stderr
    for runs in (["runs", "list", "--json"], ["runs", "list"]):
        shown = subprocess.run([*args[:3], *runs, "--journal", str(tmp_path / "j.sqlite")],
                               capture_output=True, env=env)  # fmt: skip
        assert shown.returncode == 0 and shown.stdout
    piped = subprocess.run(
        f"{' '.join(args)} --run-id P | head -c 1", shell=True, capture_output=True, text=True,
        env=env,
    )  # fmt: skip
    assert piped.stderr == "", piped.stderr


@pytest.mark.parametrize("where", ["dissensus.engines.check_engine",
                                   "dissensus.pipeline.batch.check_resumable"])  # fmt: skip
def test_runs_resume_interrupted_as_it_starts_names_the_resume_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    inp = write_jsonl(tmp_path / "in.jsonl", [panel("a", ["1", "1"])])
    j = tmp_path / "j.sqlite"
    assert cli("decide", inp, "--policy", write_policy(tmp_path / "p.yaml"), "--journal", j,
               "--run-id", "R").code == 0  # fmt: skip

    def interrupt(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    module, name = where.rsplit(".", 1)
    monkeypatch.setattr(importlib.import_module(module), name, interrupt)
    res = cli("runs", "resume", "R", "--journal", j)
    assert res.code == 130
    assert res.err == f"interrupted: resume with dissensus runs resume R --journal {j}\n"


def test_an_output_named_like_a_sidecar_never_reads_a_piped_input(tmp_path: Path) -> None:
    """Whether ``--out r-journal`` is an SQLite input's sidecar was asked by reading every
    input's first bytes: from a pipe that lost them (its first panel), from a named pipe
    it waited for a writer that had gone."""
    src = write_jsonl(tmp_path / "in.jsonl", [panel(f"p{i}", ["1", "2"]) for i in range(5)])
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    writer = subprocess.Popen(["sh", "-c", f"cat '{src}' > '{fifo}'"])
    args = [sys.executable, "-m", "dissensus", "route", str(fifo), "--similarity", "tfidf"]
    env = {**os.environ, "PYTHONPATH": str(Path(dissensus.__file__).parent.parent)}
    try:
        res = subprocess.run(
            [*args, "--json", "--out", str(tmp_path / "r-journal")],
            capture_output=True, text=True, env=env, timeout=60, check=False,
        )  # fmt: skip
    finally:
        writer.wait(timeout=30)
    assert res.returncode == 0, res.stderr
    routed = (tmp_path / "r-journal").read_text(encoding="utf-8").splitlines()
    assert [json.loads(line)["id"] for line in routed] == [f"p{i}" for i in range(5)]
