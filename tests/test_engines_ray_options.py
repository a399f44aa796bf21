"""The Ray engine's options are refused before Ray starts and before ``decide`` creates a
run, each with one line naming its field: an empty ``--ray-address`` (an unset variable,
which started a local instance instead of joining the cluster meant), ``--workers``
above 8 per CPU of this machine when a local instance is started (which started a process
per worker on the cores there are; a few more workers than cores is allowed: workers
waiting on model calls), and a library caller's ``RayOptions`` of 0 or fewer
workers or lines a block. No Ray instance is started: these run in the default suite."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dissensus.cli import main
from dissensus.engines import check_engine
from dissensus.engines.ray import RayOptions, cluster
from dissensus.errors import ConfigError

REPO = Path(__file__).resolve().parent.parent
SWAP = REPO / "examples" / "llmbar-swap.jsonl"


@pytest.fixture
def no_ray(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ray must not start: ``ray.init`` fails the test."""
    ray = pytest.importorskip("ray")

    def init(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("Ray was started")

    monkeypatch.setattr(ray, "init", init)
    monkeypatch.setattr(ray, "is_initialized", lambda: False)


def _decide(tmp_path: Path, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    journal = tmp_path / "j.sqlite"
    code = main(["decide", str(SWAP), "--similarity", "tfidf", "--journal", str(journal), *args])
    assert not journal.exists()  # no run created
    return code, capsys.readouterr().err


@pytest.mark.parametrize("address", ["", "  "])
def test_an_empty_ray_address_is_refused_before_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], no_ray: None, address: str
) -> None:
    code, err = _decide(tmp_path, capsys, "--engine", "ray", "--ray-address", address)
    assert code == 2, err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, err
    assert "field 'ray_address'" in errors[0] and "--ray-address is empty" in errors[0]


def test_more_workers_than_this_machines_cpus_is_refused_before_ray_starts(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    no_ray: None,
) -> None:
    monkeypatch.setattr(cluster, "_local_cpus", lambda: 2)
    code, err = _decide(tmp_path, capsys, "--engine", "ray", "--workers", "500")
    assert code == 2, err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, err
    assert "field 'workers'" in errors[0] and "--workers 500" in errors[0]
    assert "each of the 2 CPU(s) of this machine" in errors[0] and "--ray-address" in errors[0]
    assert "--workers 16 or fewer" in errors[0]


def test_a_few_more_workers_than_cpus_start_a_local_instance(
    monkeypatch: pytest.MonkeyPatch, no_ray: None
) -> None:
    """Workers mostly waiting on model calls may outnumber the cores: 16 on 2 CPUs (the
    most, 8 a CPU) reach ``ray.init`` with that many CPUs claimed."""
    monkeypatch.setattr(cluster, "_local_cpus", lambda: 2)
    with pytest.raises(AssertionError, match="Ray was started"):
        cluster.ensure_ray(RayOptions(workers=16))
    with pytest.raises(ConfigError, match="--workers 17 is more than 8 workers"):
        cluster.ensure_ray(RayOptions(workers=17))


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"workers": 0}, "workers"),
        ({"workers": -3}, "workers"),
        ({"lines_per_block": 0}, "lines_per_block"),
        ({"lines_per_block": -1}, "lines_per_block"),
        ({"address": ""}, "ray_address"),
    ],
)
def test_ray_options_refuse_what_the_command_line_refuses(
    options: dict[str, Any], field: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        RayOptions(**options)
    assert caught.value.field == field


def test_check_engine_refuses_an_empty_address() -> None:
    with pytest.raises(ConfigError) as caught:
        check_engine("ray", address="")
    assert caught.value.field == "ray_address"
    assert check_engine("RAY", workers=1) == "ray"


def test_sigterm_while_ray_starts_is_an_interrupt_not_rays_exit_15(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``ray.init`` installs a SIGTERM handler of its own (``sys.exit(15)``) as it starts;
    a SIGTERM landing before it returns ended ``decide`` with exit 15 and not a word.
    It is the command line's interrupt now: exit 130, one line, no run created."""
    import signal
    import sys

    ray = pytest.importorskip("ray")

    def init(*args: Any, **kwargs: Any) -> None:
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(signum))  # as Ray's
        signal.raise_signal(signal.SIGTERM)  # lands while Ray starts
        raise AssertionError("the signal did not land")

    monkeypatch.setattr(ray, "init", init)
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "shutdown", lambda: None)
    before = signal.getsignal(signal.SIGTERM)
    try:
        code, err = _decide(tmp_path, capsys, "--engine", "ray", "--workers", "1")
        assert signal.getsignal(signal.SIGTERM) is before  # the command line's, put back
    finally:
        signal.signal(signal.SIGTERM, before)
    assert code == 130, err
    assert "interrupted" in err and "Traceback" not in err


@pytest.mark.parametrize("workers", [[], ["--workers", "1"]])
def test_a_cluster_named_by_ray_address_variable_is_checked_as_the_option_is(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    no_ray: None,
    workers: list[str],
) -> None:
    """Ray joins the cluster ``$RAY_ADDRESS`` names when ``ray.init`` gets no address:
    with nothing there the command retried it for minutes (without ``--workers``) or
    ended in a raw ``ValueError`` traceback (with it, ``num_cpus`` given to a cluster
    joined). It is probed and named as ``--ray-address`` is: exit 2, no run created."""
    import socket

    with socket.socket() as free:  # a loopback port where nothing listens
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{port}")
    code, err = _decide(tmp_path, capsys, "--engine", "ray", *workers)
    assert code == 2, err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, err
    assert "field 'ray_address'" in errors[0] and "($RAY_ADDRESS)" in errors[0]
    assert f"127.0.0.1:{port}" in errors[0] and "Traceback" not in err


def test_an_input_gone_before_ray_reads_it_is_named_as_a_local_run_names_it(
    tmp_path: Path,
) -> None:
    """``route --engine ray`` looks at whether its input is a regular file before opening
    it; a file gone in between is no regular file, so the opening names it as a local
    run does (exit 2), never an ``OSError`` of its own."""
    from dissensus.cli.route import _regular_file

    gone = tmp_path / "gone.jsonl"
    assert not _regular_file(str(gone))
    assert not _regular_file("-")
    gone.write_text("{}\n", encoding="utf-8")
    assert _regular_file(str(gone))
