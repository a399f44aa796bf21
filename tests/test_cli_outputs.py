"""Output files: written through a temporary file and renamed, except devices and pipes.

Renaming over ``/dev/null`` as root would replace the device with a regular file, so a
path that exists and is neither a regular file nor a directory is written in place. A
named pipe stands in for the device here (the suite must never touch ``/dev/null``).
"""

from __future__ import annotations

import errno
import json
import os
import stat
import tempfile
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cli_helpers import cli
from dissensus.cli.common import atomic_output, check_output_path


def _drain(path: Path, into: list[str]) -> threading.Thread:
    def read() -> None:
        with open(path, encoding="utf-8") as fh:
            into.append(fh.read())

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread


def test_a_regular_file_is_replaced_whole(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    out.write_text("old\n")
    with atomic_output(str(out)) as handle:
        handle.write("new\n")
        assert out.read_text() == "old\n"  # not visible until the end
    assert out.read_text() == "new\n"
    assert [p.name for p in tmp_path.iterdir()] == ["out.jsonl"]


def test_a_named_pipe_is_written_in_place_and_stays_a_pipe(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    check_output_path(str(fifo), option="--out")  # accepted
    got: list[str] = []
    reader = _drain(fifo, got)
    with atomic_output(str(fifo)) as handle:
        handle.write("through the pipe\n")
    reader.join(timeout=10)
    assert got == ["through the pipe\n"]
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert [p.name for p in tmp_path.iterdir()] == ["pipe"]  # no temporary file left


def test_route_out_to_a_named_pipe(tmp_path: Path) -> None:
    panels = tmp_path / "p.jsonl"
    outputs = [{"agent": a, "decision": "A", "reasoning": "same words"} for a in ("x", "y")]
    panels.write_text(json.dumps({"id": "c1", "outputs": outputs}) + "\n")
    fifo = tmp_path / "records"
    os.mkfifo(fifo)
    got: list[str] = []
    reader = _drain(fifo, got)
    res = cli("route", panels, "--similarity", "tfidf", "--json", "--out", fifo)
    reader.join(timeout=10)
    assert res.code == 0, res.err
    assert json.loads(got[0].splitlines()[0])["id"] == "c1"
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_a_directory_is_still_refused(tmp_path: Path) -> None:
    with pytest.raises(Exception, match="is a directory"):
        check_output_path(str(tmp_path), option="--out")


# ------------------------------------------------------------- outputs that are inputs
class Files:
    """Files every command of the table below reads (content checked unchanged after)."""

    def __init__(self, root: Path) -> None:
        from dissensus.store import Journal
        from pipeline_cases import panel, write_jsonl, write_policy
        from test_guard_cli import _labelled_lines

        self.root = root
        self.panels = write_jsonl(root / "panels.jsonl", [panel("a", ["1", "1"])])
        self.votes = root / "votes.jsonl"
        self.votes.write_text("\n".join(_labelled_lines()) + "\n")
        self.policy = write_policy(root / "policy.yaml")
        self.guard = root / "guard.json"
        assert cli("calibrate", self.votes, "--out", self.guard).code == 0
        self.guarded = write_policy(root / "guarded.yaml", {"guard": {"calibration": "guard.json"}})
        self.rules = root / "rules.yaml"
        self.rules.write_text("rules: []\n")
        self.accept = root / "accept.json"
        self.accept.write_text("{}\n")
        self.journal = root / "j.sqlite"
        with Journal(self.journal):
            pass
        self.outputs = root / "outputs.jsonl"
        self.outputs.write_text('{"not": "read"}\n')
        self.nli = root / "nli.json"
        self.nli.write_text("[]\n")

    def snapshot(self) -> dict[str, bytes]:
        # SQLite's -wal and -shm files come and go as the journal is read.
        return {
            p.name: p.read_bytes()
            for p in self.root.iterdir()
            if p.is_file() and not p.name.endswith(("-wal", "-shm"))
        }


OVERWRITES: list[tuple[str, ...]] = [
    # (command and arguments, with {name} for a file of Files)..., the output option, what it names
    ("calibrate-acceptance {panels} --policy {policy} --out {panels}", "--out", "LABELLED"),
    ("calibrate-acceptance {panels} --policy {policy} --rejects {panels}", "--rejects", "LABELLED"),
    ("calibrate-acceptance {panels} --policy {policy} --out {policy}", "--out", "--policy"),
    ("calibrate-acceptance {panels} --policy {policy} --journal {journal} --out {journal}", "--out", "--journal"),
    ("calibrate-acceptance {panels} --policy {guarded} --out {guard}", "--out", "guard.calibration"),
    ("calibrate-acceptance {panels} --policy {policy} --out {outputs} --rejects {outputs}", "--rejects", "--out"),
    ("vote {votes} --rejects {votes}", "--rejects", "VOTES"),
    ("vote {votes} --calibration {guard} --rejects {guard}", "--rejects", "--calibration"),
    ("judge {outputs} --rejects {outputs}", "--rejects", "OUTPUTS.jsonl"),
    ("calibrate-thresholds {panels} --quantile 0.5 --similarity tfidf --rejects {panels}", "--rejects", "CORPUS"),
    ("route {panels} --similarity tfidf --rules {rules} --out {rules}", "--out", "--rules"),
    ("route {panels} --similarity tfidf --out {outputs} --rejects {outputs}", "--rejects", "--out"),
    ("calibrate {votes} --out {outputs} --rejects {outputs}", "--rejects", "--out"),
    ("decide {panels} --policy {policy} --journal {journal} --output {policy}", "--output", "--policy"),
    ("decide {panels} --policy {policy} --journal {journal} --rejects {policy}", "--rejects", "--policy"),
    ("decide {panels} --policy {policy} --journal {journal} --acceptance {accept} --output {accept}", "--output", "--acceptance"),
    ("decide {panels} --policy {guarded} --journal {journal} --output {guard}", "--output", "guard.calibration"),
    ("convert varierrnli {nli} --out {nli}", "--out", "FILE"),
    ("convert varierrnli {nli} --out {outputs} --rejects {outputs}", "--rejects", "--out"),
]  # fmt: skip


@pytest.mark.parametrize(("argv", "option", "named"), OVERWRITES)
def test_no_output_is_a_file_the_command_reads(
    tmp_path: Path, argv: str, option: str, named: str
) -> None:
    files = Files(tmp_path)
    before = files.snapshot()
    args = [a.format(**{k: str(v) for k, v in vars(files).items()}) for a in argv.split()]
    res = cli(*args)
    assert res.code == 2, (argv, res.err)
    assert res.err.startswith("error: ") and len(res.err.strip().splitlines()) == 1, res.err
    assert "same file" in res.err and f"({option})" in res.err and f"({named})" in res.err
    assert files.snapshot() == before  # nothing written, not even the journal
    runs = cli("runs", "list", "--journal", files.journal, "--json")
    assert runs.code == 0 and runs.out == ""


def test_the_same_file_by_another_name_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = Files(tmp_path)
    (tmp_path / "hard.jsonl").hardlink_to(files.panels)
    (tmp_path / "soft.jsonl").symlink_to(files.panels)
    before = files.snapshot()
    for via in ("hard.jsonl", "soft.jsonl", "./x/../panels.jsonl"):
        (tmp_path / "x").mkdir(exist_ok=True)
        res = cli("vote", tmp_path / via, "--rejects", files.panels, cwd=tmp_path)
        assert res.code == 2 and "same file" in res.err, (via, res.err)
        res = cli("vote", files.panels, "--rejects", via, cwd=tmp_path)
        assert res.code == 2 and "same file" in res.err, (via, res.err)
    # Standard input redirected from the output file.
    with open(files.panels, encoding="utf-8") as handle:
        monkeypatch.setattr("sys.stdin", handle)
        res = cli("route", "-", "--similarity", "tfidf", "--out", files.panels)
    assert res.code == 2 and "same file as standard input (PANELS)" in res.err, res.err
    assert files.snapshot() == before


OUTPUTS: list[str] = [
    "judge {outputs} --rejects {bad}",
    "vote {votes} --rejects {bad}",
    "calibrate {votes} --out {bad}",
    "calibrate-thresholds {panels} --quantile 0.5 --similarity tfidf --rejects {bad}",
    "calibrate-acceptance {panels} --policy {policy} --out {bad}",
    "calibrate-acceptance {panels} --policy {policy} --rejects {bad}",
    "route {panels} --similarity tfidf --out {bad}",
    "decide {panels} --policy {policy} --journal {journal} --rejects {bad}",
    "negotiate examples/concord/incident.yaml --out {bad}",
    "convert varierrnli {nli} --rejects {bad}",
]


@pytest.mark.parametrize("argv", OUTPUTS)
@pytest.mark.parametrize("bad", ["adir", "missing/x.jsonl"])
def test_an_output_that_cannot_be_written_is_one_line_before_anything_is_read(
    tmp_path: Path, repo_root: Path, argv: str, bad: str
) -> None:
    files = Files(tmp_path)
    (tmp_path / "adir").mkdir()
    before = files.snapshot()
    names = {k: str(v) for k, v in vars(files).items()} | {"bad": str(tmp_path / bad)}
    res = cli(*(a.format(**names) for a in argv.split()), cwd=repo_root)
    assert res.code == 2, (argv, res.err)
    assert res.err.startswith("error: cannot write the ") and "Traceback" not in res.err
    assert len(res.err.strip().splitlines()) == 1, res.err
    assert files.snapshot() == before


UNCREATABLE: list[tuple[str, str]] = [
    # (command and arguments, with {bad} for the output), the output option
    ("route {panels} --similarity tfidf --out {bad}", "--out"),
    ("route {panels} --similarity tfidf --rejects {bad}", "--rejects"),
    ("calibrate-thresholds {panels} --quantile 0.5 --similarity tfidf --rejects {bad}", "--rejects"),
    ("vote {votes} --rejects {bad}", "--rejects"),
    ("judge {outputs} --rejects {bad}", "--rejects"),
    ("calibrate {votes} --out {bad}", "--out"),
    ("calibrate {votes} --rejects {bad}", "--rejects"),
    ("calibrate-acceptance {panels} --policy {policy} --out {bad}", "--out"),
    ("calibrate-acceptance {panels} --policy {policy} --rejects {bad}", "--rejects"),
    ("decide {panels} --policy {policy} --journal {journal} --output {bad}", "--output"),
    ("decide {panels} --policy {policy} --journal {journal} --rejects {bad}", "--rejects"),
    ("runs export R --journal {journal} --output {bad}", "--output"),
    ("negotiate examples/concord/incident.yaml --out {bad}", "--out"),
    ("convert varierrnli {nli} --out {bad}", "--out"),
    ("convert varierrnli {nli} --rejects {bad}", "--rejects"),
]  # fmt: skip


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs Linux's /proc")
@pytest.mark.parametrize(("argv", "option"), UNCREATABLE)
@pytest.mark.parametrize("bad", ["/proc/dissensus-out.jsonl", "/sys/dissensus-out.jsonl"])
def test_an_output_whose_folder_says_writable_but_cannot_be_created_is_refused_first(
    tmp_path: Path, repo_root: Path, argv: str, option: str, bad: str
) -> None:
    """``/proc`` (and ``/sys`` where it is mounted read-write) passes a look at the
    folder's permission bits, yet creating a file there fails: the command did all its
    work and then failed (exit 1). The write's first step is tried up front instead."""
    files = Files(tmp_path)
    before = files.snapshot()
    names = {k: str(v) for k, v in vars(files).items()} | {"bad": bad}
    res = cli(*(a.format(**names) for a in argv.split()), cwd=repo_root)
    assert res.code == 2, (argv, res.err)
    assert res.out == "", res.out
    assert res.err.startswith("error: cannot write the ") and "Traceback" not in res.err
    assert f"{bad} ({option})" in res.err, res.err
    assert len(res.err.strip().splitlines()) == 1, res.err
    assert files.snapshot() == before  # nothing written, not even the journal
    runs = cli("runs", "list", "--journal", files.journal, "--json")
    assert runs.code == 0 and runs.out == ""


@pytest.mark.parametrize("option", ["--out", "--output", "--rejects"])
def test_the_output_check_leaves_nothing_behind_and_truncates_nothing(
    tmp_path: Path, option: str
) -> None:
    """The check tries to create the file (or its temporary file) and removes what it
    made: a new output is not left behind by a command refused later, and an existing
    one keeps its content until the command writes it."""
    new = tmp_path / "new.jsonl"
    check_output_path(str(new), option=option)
    assert list(tmp_path.iterdir()) == []
    old = tmp_path / "old.jsonl"
    old.write_text("kept\n")
    os.utime(old, (1_000_000, 1_000_000))
    check_output_path(str(old), option=option)
    assert old.read_text() == "kept\n" and old.stat().st_mtime == 1_000_000
    # A dangling symbolic link: the file it leads to is what a write would create.
    (tmp_path / "link.jsonl").symlink_to(tmp_path / "sub-target.jsonl")
    check_output_path(str(tmp_path / "link.jsonl"), option=option)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.jsonl", "old.jsonl"]


def test_a_command_refused_after_its_output_check_leaves_no_output_file(tmp_path: Path) -> None:
    files = Files(tmp_path)
    before = files.snapshot()
    missing = tmp_path / "missing-policy.yaml"
    res = cli(
        "decide", files.panels, "--policy", missing, "--journal", files.journal,
        "--output", tmp_path / "o.jsonl", "--rejects", tmp_path / "r.jsonl",
    )  # fmt: skip
    assert res.code == 2 and "missing-policy.yaml" in res.err, res.err
    assert files.snapshot() == before


def test_a_deadline_keeps_the_records_finished_in_the_output_file(tmp_path: Path) -> None:
    """pipeline.md: when the deadline stops a run, the records finished in input order have
    been written; with ``-o`` too (the file was all-or-nothing and stayed unwritten), and
    ``runs resume -o`` then writes the whole run."""
    from pipeline_cases import panel, write_jsonl

    inp = write_jsonl(tmp_path / "in.jsonl", [panel(f"p{i}", ["1", "2"]) for i in range(400)])
    out, journal = tmp_path / "out.jsonl", tmp_path / "j.sqlite"
    res = cli("decide", inp, "--similarity", "tfidf", "--deadline", "0.05", "-o", out,
              "--journal", journal, "--run-id", "D", "--json")  # fmt: skip
    assert res.code == 1 and "deadline of 0.05 s reached after" in res.err, res.err
    done = int(res.err.split("reached after ")[1].split(" ")[0])
    lines = out.read_text(encoding="utf-8").splitlines()
    assert len(lines) == done < 400
    assert [json.loads(line)["line"] for line in lines] == list(range(1, done + 1))
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temp file
    whole = tmp_path / "whole.jsonl"
    assert cli("runs", "resume", "D", "--journal", journal, "-o", whole).code == 0
    assert whole.read_text(encoding="utf-8").splitlines()[:done] == lines


def test_a_deadline_shows_the_cases_finished_in_human_mode(tmp_path: Path) -> None:
    """Without --json, a run the deadline stops shows the cases it finished as a finished
    run's summary does (it printed nothing, only the error line), then the resume line."""
    from pipeline_cases import panel, write_jsonl

    inp = write_jsonl(tmp_path / "in.jsonl", [panel(f"p{i}", ["1", "2"]) for i in range(3000)])
    res = cli("decide", inp, "--similarity", "tfidf", "--deadline", "0.4",
              "--journal", tmp_path / "j.sqlite", "--run-id", "D")  # fmt: skip
    assert res.code == 1 and "deadline of 0.4 s reached after" in res.err, res.err
    assert "runs resume D" in res.err
    done = int(res.err.split("reached after ")[1].split(" ")[0])
    assert done < 3000
    if done:  # a machine too loaded to finish one case in 0.4 s shows nothing
        assert res.out.startswith("run D  journal ")
        assert f"{done} case(s): " in res.out and "p0 " in res.out
    else:
        assert res.out == ""


def test_atomic_output_keeps_the_file_only_for_the_named_stops(tmp_path: Path) -> None:
    class Stop(Exception):
        pass

    kept, dropped = tmp_path / "kept.txt", tmp_path / "dropped.txt"
    with pytest.raises(Stop), atomic_output(str(kept), keep_on=(Stop,)) as handle:
        handle.write("so far\n")
        raise Stop
    with pytest.raises(ValueError), atomic_output(str(dropped), keep_on=(Stop,)) as handle:
        handle.write("half\n")
        raise ValueError
    assert kept.read_text(encoding="utf-8") == "so far\n" and not dropped.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept.txt"]


@settings(max_examples=60, deadline=None)
@given(mask=st.integers(0, 0o777), existing=st.none() | st.integers(0, 0o777))
def test_an_output_file_gets_the_mode_a_plain_open_would_leave(
    mask: int, existing: int | None
) -> None:
    """A new output file is 0666 less the umask; an existing one keeps its mode."""
    with tempfile.TemporaryDirectory() as tmp:
        target = Path(tmp) / "out.jsonl"
        if existing is not None:
            target.write_text("old\n")
            target.chmod(existing)
        old = os.umask(mask)
        try:
            with atomic_output(str(target)) as handle:
                handle.write("new\n")
        finally:
            os.umask(old)
        want = existing if existing is not None else 0o666 & ~mask
        assert stat.S_IMODE(target.stat().st_mode) == want
        assert target.read_text() == "new\n"


def test_route_out_keeps_an_existing_files_mode(tmp_path: Path) -> None:
    panels = tmp_path / "p.jsonl"
    panels.write_text(
        json.dumps(
            {
                "id": "a",
                "outputs": [
                    {"agent": name, "decision": "1", "reasoning": "r"} for name in ("x", "y")
                ],
            }
        )
        + "\n"
    )
    out, new = tmp_path / "out.jsonl", tmp_path / "new.jsonl"
    out.write_text("")
    out.chmod(0o644)
    old = os.umask(0o022)
    try:
        for target in (out, new):
            res = cli("route", panels, "--similarity", "tfidf", "--json", "--out", target)
            assert res.code == 0, res.err
    finally:
        os.umask(old)
    assert stat.S_IMODE(out.stat().st_mode) == 0o644
    assert stat.S_IMODE(new.stat().st_mode) == 0o644


def test_a_finished_run_resumes_from_the_journal_alone(tmp_path: Path) -> None:
    """Resuming a finished run replays it from the journal: its input file may be gone
    (the CLI refused, though nothing is read from it); an unfinished run still needs it."""
    from pipeline_cases import panel, write_jsonl

    journal = tmp_path / "j.sqlite"
    for run, n, code in (("F", 5, 0), ("U", 2000, 1)):  # 2,000 panels outlast 1 ms
        inp = write_jsonl(tmp_path / f"{run}.jsonl", [panel(f"p{i}", ["1", "2"]) for i in range(n)])
        res = cli("decide", inp, "--similarity", "tfidf", "--journal", journal, "--run-id", run,
                  "--json", "--deadline", "0.001" if code else "60")  # fmt: skip
        assert res.code == code, res.err
        inp.unlink()
    res = cli("runs", "resume", "F", "--journal", journal, "--json")
    assert res.code == 0, res.err
    assert [json.loads(line)["id"] for line in res.out.splitlines()] == [f"p{i}" for i in range(5)]
    res = cli("runs", "resume", "U", "--journal", journal)
    assert res.code == 2 and "its input file is gone" in res.err, res.err
    assert str(tmp_path / "U.jsonl") in res.err and len(res.err.strip().splitlines()) == 1


def test_a_lock_row_does_not_stop_the_replay_of_a_finished_run(tmp_path: Path) -> None:
    """A finished run is only replayed (no lease taken), so a lock row naming a process
    elsewhere (left behind, or written by hand) does not refuse it; an unfinished run it
    still refuses, naming the holder."""
    import sqlite3

    from pipeline_cases import panel, write_jsonl

    journal = tmp_path / "j.sqlite"
    inp = write_jsonl(tmp_path / "in.jsonl", [panel(f"p{i}", ["1", "2"]) for i in range(3)])
    res = cli("decide", inp, "--similarity", "tfidf", "--journal", journal, "--run-id", "F")
    assert res.code == 0, res.err
    with sqlite3.connect(journal) as db:
        db.execute("INSERT INTO run_locks VALUES ('F', 4242, 'elsewhere', '2026-01-01')")
    res = cli("runs", "resume", "F", "--journal", journal, "--json")
    assert res.code == 0, res.err
    assert [json.loads(line)["id"] for line in res.out.splitlines()] == ["p0", "p1", "p2"]
    with sqlite3.connect(journal) as db:
        db.execute("DELETE FROM events WHERE run_id = 'F' AND key = 'run/finished'")
    res = cli("runs", "resume", "F", "--journal", journal)
    assert res.code == 2 and "pid 4242 (host elsewhere)" in res.err, res.err


def test_a_symbolic_link_is_written_through_and_kept(tmp_path: Path) -> None:
    """Renaming over the link replaced the link with a regular file and left the file it
    led to unchanged; with two hops and a relative link too."""
    (tmp_path / "sub").mkdir()
    target = tmp_path / "sub" / "target.json"
    target.write_text("old\n", encoding="utf-8")
    (tmp_path / "hop").symlink_to("sub/target.json")
    link = tmp_path / "link.json"
    link.symlink_to(tmp_path / "hop")
    with atomic_output(str(link)) as handle:
        handle.write("new\n")
    assert link.is_symlink() and (tmp_path / "hop").is_symlink()
    assert target.read_text(encoding="utf-8") == "new\n"
    assert sorted(p.name for p in (tmp_path / "sub").iterdir()) == ["target.json"]  # no temp


def test_a_loop_of_symbolic_links_is_refused_and_left_as_it_is(
    tmp_path: Path, repo_root: Path
) -> None:
    """A plain ``open`` refuses a loop of links (ELOOP); the temporary file renamed over
    the last link reached replaced that link with the output, and the command went on as
    if it had written where it was told."""
    from dissensus.io.atomic import OutputWriteError

    one, two = tmp_path / "one.jsonl", tmp_path / "two.jsonl"
    one.symlink_to(two.name)
    two.symlink_to(one.name)
    with (
        pytest.raises(OutputWriteError, match=r"one\.jsonl: .*\(ELOOP\)"),
        atomic_output(str(one)) as handle,
    ):
        handle.write("new\n")
    from pipeline_cases import panel, write_jsonl

    panels = write_jsonl(tmp_path / "panels.jsonl", [panel("a", ["1", "1"])])
    res = cli("route", panels, "--similarity", "tfidf", "--out", one, cwd=repo_root)
    assert res.code == 2, res.err
    assert res.err.startswith("error: cannot write the output file ") and "(ELOOP)" in res.err
    assert len(res.err.strip().splitlines()) == 1, res.err
    assert one.is_symlink() and two.is_symlink()
    assert os.readlink(one) == two.name and os.readlink(two) == one.name
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


def _chain(folder: Path, links: int) -> Path:
    """``links`` symbolic links in a row (relative), the last leading to ``end.json``."""
    (folder / "end.json").write_text("old\n", encoding="utf-8")
    for i in range(links):
        (folder / f"l{i}").symlink_to("end.json" if i == links - 1 else f"l{i + 1}")
    return folder / "l0"


@pytest.mark.parametrize("links", [39, 40])
def test_a_chain_of_as_many_links_as_the_kernel_follows_is_written_through(
    tmp_path: Path, links: int
) -> None:
    """The kernel opens a path through 40 links; they were refused (ELOOP) after the
    40th was read, without looking whether its target was a link at all."""
    from dissensus.io.atomic import probe_output

    head = _chain(tmp_path, links)
    with open(head, encoding="utf-8") as plain:  # the kernel's own answer
        assert plain.read() == "old\n"
    probe_output(str(head))
    with atomic_output(str(head)) as handle:
        handle.write("new\n")
    assert (tmp_path / "end.json").read_text(encoding="utf-8") == "new\n"
    assert all((tmp_path / f"l{i}").is_symlink() for i in range(links))
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


def test_a_chain_of_one_link_more_than_the_kernel_follows_is_refused(tmp_path: Path) -> None:
    from dissensus.io.atomic import OutputWriteError, probe_output

    head = _chain(tmp_path, 41)
    with pytest.raises(OSError) as plain:
        open(head, encoding="utf-8").close()
    assert plain.value.errno == errno.ELOOP
    with pytest.raises(OSError) as probed:
        probe_output(str(head))
    assert probed.value.errno == errno.ELOOP
    with pytest.raises(OutputWriteError, match=r"l0: .*\(ELOOP\)"), atomic_output(str(head)) as out:
        out.write("new\n")
    assert (tmp_path / "end.json").read_text(encoding="utf-8") == "old\n"
    assert all((tmp_path / f"l{i}").is_symlink() for i in range(41))
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


def test_a_path_through_a_file_descriptor_is_written_in_place(tmp_path: Path) -> None:
    """``--out /dev/stdout > file``: the file the shell holds open is written, not replaced
    by a new one (as root, the system's /dev/stdout was replaced by a regular file)."""
    held = tmp_path / "redirected.txt"
    fd = os.open(held, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        fake_dev = tmp_path / "dev"
        fake_dev.mkdir()
        (fake_dev / "stdout").symlink_to(f"/proc/self/fd/{fd}")
        inode = held.stat().st_ino
        with atomic_output(str(fake_dev / "stdout")) as handle:
            handle.write("through the descriptor\n")
        assert (fake_dev / "stdout").is_symlink()
        assert held.stat().st_ino == inode
        assert held.read_text(encoding="utf-8") == "through the descriptor\n"
    finally:
        os.close(fd)


@pytest.mark.parametrize("option", ["-o", "--rejects"])
def test_runs_resume_never_overwrites_the_policy_or_a_file_it_names(
    tmp_path: Path, option: str
) -> None:
    """``runs resume -o`` (or ``--rejects``) naming the run's policy file (or its input)
    is refused before anything is written: it replaced the policy with the
    run's records, as ``decide`` refuses the same paths."""
    from pipeline_cases import panel, write_jsonl

    policy = tmp_path / "policy.yaml"
    policy.write_text("reading:\n  similarity: tfidf\n", encoding="utf-8")
    inp = write_jsonl(tmp_path / "in.jsonl", [panel(f"p{i}", ["1", "2"]) for i in range(2000)])
    journal = tmp_path / "j.sqlite"
    res = cli("decide", inp, "--policy", policy, "--journal", journal, "--run-id", "R",
              "--json", "--deadline", "0.001")  # fmt: skip
    assert res.code == 1, res.err
    before = {p: p.read_bytes() for p in (policy, inp)}
    for target in (policy, inp):
        res = cli("runs", "resume", "R", "--journal", journal, option, target)
        assert res.code == 2, res.err
        assert "same file as" in res.err and str(target) in res.err, res.err
        assert {p: p.read_bytes() for p in before} == before
    assert (
        "the run's policy" in cli("runs", "resume", "R", "--journal", journal, option, policy).err
    )


@pytest.mark.parametrize("option", ["-o", "--rejects"])
def test_runs_resume_never_overwrites_the_runs_model_recording(tmp_path: Path, option: str) -> None:
    """``runs resume -o`` naming the recording of the run's ``record:FILE:...`` model is
    refused before anything is written: the records replaced the recorded calls."""
    from pipeline_cases import crash_script, panel, write_jsonl

    script = crash_script(tmp_path / "script.yaml")
    recording = tmp_path / "rec.jsonl"
    inp = write_jsonl(tmp_path / "in.jsonl", [panel(f"p{i}", ["1", "2"]) for i in range(2000)])
    journal = tmp_path / "j.sqlite"
    res = cli("decide", inp, "--similarity", "tfidf", "--journal", journal, "--run-id", "R",
              "--model", f"record:{recording}:scripted:{script}", "--json",
              "--deadline", "0.001")  # fmt: skip
    assert res.code == 1, res.err
    recording.write_text("kept\n", encoding="utf-8")
    res = cli("runs", "resume", "R", "--journal", journal, option, recording)
    assert res.code == 2, res.err
    assert "recording of the run's model spec" in res.err and str(recording) in res.err, res.err
    assert recording.read_text(encoding="utf-8") == "kept\n"
