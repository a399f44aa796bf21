"""A journal in a folder its reader cannot write is read as it stands.

An archive handed over read-only (another user's folder, ``chmod 555``) holds a WAL
journal without its ``-shm`` file, which SQLite needs to read it and cannot make there:
``runs list``, ``runs verify``, ``runs show`` and ``review list`` failed with "attempt
to write a readonly database". They read it now, as on a read-only file system; a
write is still a one-line read-only error (exit 2), and a ``-wal`` file with writes in
it is named instead of being silently skipped.

The commands run in a child process without the capability to override file modes
when the tests run as root (``setpriv``), so the folder's mode binds them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import dissensus
from dissensus.store import Journal
from pipeline_cases import panel, write_jsonl

SRC = str(Path(dissensus.__file__).resolve().parent.parent)


def _prefix() -> list[str]:
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("root without setpriv(1): a folder's mode does not bind root")
    prefix = [setpriv, "--bounding-set", "-dac_override,-dac_read_search,-fowner"]
    if subprocess.run([*prefix, "true"], capture_output=True).returncode != 0:
        pytest.skip("setpriv(1) cannot drop capabilities here")
    return prefix


def _cli(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": SRC}
    env.pop("DISSENSUS_JOURNAL", None)
    return subprocess.run(
        [*_prefix(), sys.executable, "-m", "dissensus", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture
def archive(tmp_path: Path) -> Iterator[Path]:
    """A folder nobody but its owner (not this reader) writes, holding a closed journal."""
    folder = tmp_path / "archive"
    folder.mkdir()
    with Journal(folder / "j.sqlite") as j:
        j.create_run("r", kind="t", meta={})
        j.append("r", "e", {"n": 1}, key="k")
    assert not (folder / "j.sqlite-shm").exists()
    (folder / "j.sqlite").chmod(0o644)
    if os.geteuid() == 0:
        os.chown(folder, 65534, -1)
        os.chown(folder / "j.sqlite", 65534, -1)
    folder.chmod(0o555)
    try:
        yield folder
    finally:
        folder.chmod(0o755)


def test_a_journal_in_a_folder_this_reader_cannot_write_is_read(
    archive: Path, tmp_path: Path
) -> None:
    journal = str(archive / "j.sqlite")
    for args in (
        ("runs", "list", "--journal", journal),
        ("runs", "verify", "r", "--journal", journal),
        ("runs", "show", "r", "--journal", journal),
        ("review", "list", "--journal", journal),
    ):
        done = _cli(tmp_path, *args)
        assert done.returncode == 0, (args, done.stderr)
        assert "Traceback" not in done.stderr
    assert (
        "run r: OK, 1 events" in _cli(tmp_path, "runs", "verify", "r", "--journal", journal).stdout
    )
    inputs = write_jsonl(tmp_path / "in.jsonl", [panel("p1", ["1", "1", "1"])])
    written = _cli(tmp_path, "decide", str(inputs), "--journal", journal, "--similarity", "tfidf")
    assert written.returncode == 2 and "read-only" in written.stderr, written.stderr
    assert len(written.stderr.strip().splitlines()) == 1
    assert sorted(p.name for p in archive.iterdir()) == ["j.sqlite"]


def test_writes_left_in_a_wal_file_there_are_named(archive: Path, tmp_path: Path) -> None:
    archive.chmod(0o755)
    (archive / "j.sqlite-wal").write_bytes(b"\0" * 64)
    archive.chmod(0o555)
    done = _cli(tmp_path, "runs", "list", "--journal", str(archive / "j.sqlite"))
    assert done.returncode == 2 and "-wal" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
