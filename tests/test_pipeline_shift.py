"""The run's label-free shift check: journalled at the end of a run, reported by the summary,
``runs show`` and ``GET /v1/acceptance``; ``on_shift: escalate`` holds the file afterwards."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cli_helpers import cli
from dissensus.pipeline.batch import execute_run, start_run
from dissensus.pipeline.shift import SHIFT_EVENT, latest_flag
from dissensus.pipeline.spec import RunSpec
from dissensus.store import Journal
from serve_helpers import auth, client_for, write_tokens
from shift_helpers import build_world

REPO = Path(__file__).resolve().parent.parent
PANELS = REPO / "examples" / "llmbar-swap.jsonl"


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_world(tmp_path_factory.mktemp("shift"))


def _run(journal: Journal, panels: Path, policy: Path, run_id: str) -> list[Any]:
    start_run(journal, str(panels), policy, run_id=run_id)

    async def go() -> list[Any]:
        return [r async for r in execute_run(journal, run_id)]

    return asyncio.run(go())


def test_a_run_like_the_calibration_is_not_flagged_and_a_shifted_one_is(
    world: Path, tmp_path: Path
) -> None:
    with Journal(tmp_path / "j.sqlite") as journal:
        _run(journal, world / "same.jsonl", world / "warn.yaml", "same")
        same = journal.get("same", "run/shift")
        assert same is not None and same.type == SHIFT_EVENT
        assert not same.payload["shifted"] and same.payload["deployed_n"] >= 10
        _run(journal, world / "shifted.jsonl", world / "warn.yaml", "moved")
        moved = journal.get("moved", "run/shift")
        assert moved is not None and moved.payload["shifted"], moved.payload
        assert moved.payload["auc"] > same.payload["auc"]
        # warn: reported, no hold on the file
        flag = latest_flag(journal, moved.payload["file_sha256"])
        assert flag is not None and flag["run_id"] == "moved"
    shown = cli("runs", "show", "moved", "--journal", tmp_path / "j.sqlite")
    assert shown.code == 0 and "New cases look different" in " ".join(shown.out.split())
    data = json.loads(
        cli("runs", "show", "moved", "--journal", tmp_path / "j.sqlite", "--json").out
    )
    assert data["shift"]["shifted"] is True


def test_on_shift_escalate_holds_the_file_for_later_runs(world: Path, tmp_path: Path) -> None:
    with Journal(tmp_path / "j.sqlite") as journal:
        before = _run(journal, world / "same.jsonl", world / "hold.yaml", "before")
        assert any(r.basis == "learned" for r in before)
        _run(journal, world / "shifted.jsonl", world / "hold.yaml", "moved")
        after = _run(journal, world / "same.jsonl", world / "hold.yaml", "after")
    assert not any(r.basis == "learned" for r in after)
    held = [r for r in after if "acceptance held" in r.reason]
    assert held and "run moved" in held[0].reason
    # acceptance status says held (it said active: the audits alone suspend nothing).
    status = cli("acceptance", "status", "--journal", tmp_path / "j.sqlite", env={"COLUMNS": "200"})
    assert status.code == 0 and "held: shift flagged by run moved" in status.out
    assert "active" not in status.out
    data = json.loads(cli("acceptance", "status", "--journal", tmp_path / "j.sqlite", "--json").out)
    (sha,) = {row["acceptance_sha256"] for row in data["strata"]}
    assert data["holds"][sha]["run_id"] == "moved"


def test_a_held_run_says_so_in_its_summary_and_in_runs_show(world: Path, tmp_path: Path) -> None:
    """A run held after a flagged check printed the guarantee sentence (or nothing of
    acceptance) and runs show --json had no field for the hold."""
    journal = tmp_path / "j.sqlite"
    common = ["--policy", world / "hold.yaml", "--journal", journal]
    assert cli("decide", world / "shifted.jsonl", *common, "--run-id", "moved").code == 0
    done = cli("decide", world / "same.jsonl", *common, "--run-id", "after")
    assert done.code == 0, done.err
    words = " ".join(done.out.split())
    assert "Learned acceptance is held after a flagged shift check: a shift check flagged" in words
    assert "in run moved" in words and "automatic decisions should be right" not in words
    data = json.loads(cli("runs", "show", "after", "--journal", journal, "--json").out)
    assert "in run moved" in data["acceptance"]["held"] and data["acceptance"]["suspended"] == []
    shown = cli("runs", "show", "after", "--journal", journal)
    assert "Learned acceptance is held after a flagged shift check" in " ".join(shown.out.split())
    earlier = json.loads(cli("runs", "show", "moved", "--journal", journal, "--json").out)
    assert earlier["acceptance"] == {
        "suspended": [],
        "held": None,
        "held_on_resume": False,
        "held_within_run": None,
    }
    # With --json the records go to standard output and the hold to a warning on stderr.
    again = cli("decide", world / "same.jsonl", *common, "--json")
    assert again.code == 0 and "warning: Learned acceptance is held" in again.err


def test_under_on_shift_warn_a_flagged_file_is_not_held(world: Path, tmp_path: Path) -> None:
    with Journal(tmp_path / "j.sqlite") as journal:
        _run(journal, world / "shifted.jsonl", world / "warn.yaml", "moved")
    data = json.loads(cli("acceptance", "status", "--journal", tmp_path / "j.sqlite", "--json").out)
    assert data["holds"] == {} and data["strata"]
    status = cli("acceptance", "status", "--journal", tmp_path / "j.sqlite")
    assert "active" in status.out and "held" not in status.out


def test_the_summary_and_the_service_report_the_check(world: Path, tmp_path: Path) -> None:
    journal = tmp_path / "j.sqlite"
    done = cli(
        "decide", world / "shifted.jsonl", "--policy", world / "warn.yaml", "--journal", journal
    )
    assert done.code == 0
    words = " ".join(done.out.split())
    assert "At least 80 of every 100 automatic decisions should be right (80% confidence)" in words
    assert "New cases look different from the 150 calibration cases" in words
    # The audits and the monitor, in words, with the number of audits the run opened.
    with Journal(journal) as store:
        run_id = store.runs()[-1].run_id
        opened = sum(1 for e in store.events(run_id) if e.type == "review.audit")
        rate = RunSpec.from_started(
            store.get(run_id, "run/started").payload
        ).policy.acceptance.audit_rate
    if rate > 0:
        assert (
            f"{rate:.0%} of automatic decisions are audited blind ({opened} opened in this run"
            in words
        )
        # The command it names runs as shown: it names the run and the journal.
        named = f"dissensus review audits --run {run_id} --journal {journal})"
        assert named in words, words
        assert cli("review", "audits", "--run", run_id, "--journal", journal).code == 0
    else:
        assert "audited blind" not in words

    async def ask() -> dict[str, Any]:
        from dissensus.serve import ServeSettings

        settings = ServeSettings(
            journal=str(journal),
            policy=str(world / "warn.yaml"),
            tokens=str(write_tokens(tmp_path / "tokens.txt")),
        )
        async with client_for(settings) as client:
            doc: dict[str, Any] = (await client.get("/v1/acceptance", headers=auth("sub"))).json()
            return doc

    doc = asyncio.run(ask())
    assert doc["file"]["calibration_n"] == 150 and doc["shift"]["shifted"] is True
    assert doc["hold"] is None  # warn: no hold


class _Log:
    """Stands for the server's logger: keeps its warnings, as lines."""

    def __init__(self) -> None:
        self.warnings: list[str] = []

    def warning(self, message: str, *args: object) -> None:
        self.warnings.append(message % args)


def test_a_run_decided_through_the_service_carries_its_shift_check(
    world: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A flag of a run decided through POST /v1/decide reached no client: neither the
    batch answer nor GET /v1/runs/{id} had it, and the server's log was silent."""
    import dissensus.serve.runs

    # The module's logger itself (what reaches a handler depends on every other test's
    # logging set-up: logging is global).
    log = _Log()
    monkeypatch.setattr(dissensus.serve.runs, "log", log, raising=False)
    _service_runs(world, tmp_path, log)


def _service_runs(world: Path, tmp_path: Path, log: _Log) -> None:
    from dissensus.serve import ServeSettings

    async def ask() -> list[dict[str, Any]]:
        settings = ServeSettings(
            journal=str(tmp_path / "j.sqlite"),
            policy=str(world / "warn.yaml"),
            tokens=str(write_tokens(tmp_path / "tokens.txt")),
        )
        out = []
        async with client_for(settings) as client:
            for name in ("shifted.jsonl", "same.jsonl"):
                rows = [json.loads(x) for x in (world / name).read_text().splitlines()]
                got = await client.post("/v1/decide", json=rows, headers=auth("sub"))
                assert got.status_code == 200, got.text
                answer = got.json()
                doc = await client.get(f"/v1/runs/{answer['run_id']}", headers=auth("sub"))
                out += [answer, doc.json()]
        return out

    moved, moved_doc, same, same_doc = asyncio.run(ask())
    assert moved["shift"]["shifted"] is True and moved_doc["shift"] == moved["shift"]
    assert same["shift"]["shifted"] is False and same_doc["shift"] == same["shift"]
    warned = log.warnings
    assert len(warned) == 1, warned
    assert warned[0].startswith(f"run {moved['run_id']}: New cases look different")


def test_a_check_of_too_few_cases_is_not_said_to_pass() -> None:
    from dissensus.pipeline.shift import shift_words

    words = shift_words(
        {"auc": 0.5, "p_value": 1.0, "shifted": False, "calibration_n": 326, "deployed_n": 7}
    )
    assert words == "Not checked yet: 7 judged case(s), and the shift check needs at least 10."
    assert shift_words(
        {"auc": 0.5, "p_value": 0.4, "shifted": False, "calibration_n": 326, "deployed_n": 70}
    ).startswith("No shift detected (shift check p = 0.4")


@settings(max_examples=60)
@given(
    p=st.floats(1e-12, 1.0),
    alpha=st.floats(1e-6, 0.1),
    auc=st.floats(0.0, 1.0),
    deployed=st.integers(10, 5000),
)
def test_a_check_that_does_not_flag_claims_no_resemblance(
    p: float, alpha: float, auc: float, deployed: int
) -> None:
    """A check that does not flag says no shift was detected, with p and its level; it
    said the new cases resembled the calibration cases, although another split of the
    same cases could flag them."""
    from dissensus.pipeline.shift import shift_words

    shifted = p <= alpha and auc > 0.5
    outcome = {
        "auc": auc, "p_value": p, "shifted": shifted, "alpha": alpha, "file_alpha": 0.1,
        "check": 3, "calibration_n": 326, "deployed_n": deployed,
    }  # fmt: skip
    words = shift_words(outcome)
    if shifted:
        assert words.startswith("New cases look different")
        return
    assert words.startswith("No shift detected (shift check p = ") and "resemble" not in words
    assert "level" in words and f"over {deployed} cases and the 326 calibration cases" in words
    shown_p = words.removeprefix("No shift detected (shift check p = ").split(" ")[0]
    assert float(shown_p) == pytest.approx(p, rel=0.06)  # significant digits, never 0.000


def test_a_hold_quotes_the_flag_s_p_value_in_significant_digits(tmp_path: Path) -> None:
    """A flag at p = 9.4e-06 was quoted as p = 0.000 in every held case's reason."""
    from dissensus.pipeline.batch import _with_shift_hold

    spec = RunSpec.from_policy(None).model_copy(update={"acceptance": {"sha256": "f" * 64}})
    spec = spec.model_copy(
        update={
            "policy": spec.policy.model_copy(
                update={
                    "acceptance": spec.policy.acceptance.model_copy(update={"on_shift": "escalate"})
                }
            )
        }
    )
    with Journal(tmp_path / "j.sqlite") as journal:
        journal.create_run("moved", kind="decide", meta={})
        payload = {"auc": 0.71, "p_value": 9.4e-06, "shifted": True, "file_sha256": "f" * 64}
        journal.append("moved", SHIFT_EVENT, payload, key="run/shift")
        hold = _with_shift_hold(journal, spec).shift_hold
    assert hold is not None and "p = 9.4e-06" in hold and "run moved" in hold, hold


def _fake_check(journal: Journal, run_id: str, sha: str | None, **extra: Any) -> None:
    journal.create_run(run_id, kind="decide", meta={})
    payload = {"auc": 0.5, "p_value": 0.5, "shifted": False, "alpha": 0.1, "file_sha256": sha}
    journal.append(run_id, SHIFT_EVENT, {**payload, **extra}, key="run/shift")


def test_a_journal_with_n_earlier_checks_of_the_file_tests_the_next_at_level_n_plus_1(
    world: Path, tmp_path: Path
) -> None:
    from dissensus.acceptance.shift import check_level
    from dissensus.pipeline.shift import run_check_index

    sha = RunSpec.from_policy(world / "warn.yaml").acceptance["sha256"]  # type: ignore[index]
    with Journal(tmp_path / "j.sqlite") as journal:
        for i in range(6):  # six runs' own checks of this file (one of the permutation test)
            _fake_check(journal, f"old{i}", sha, **({"permutations": 200} if i == 0 else {}))
        _fake_check(journal, "watch", sha, across_runs=40)  # the watch's: the other sequence
        _fake_check(journal, "other", "another file")  # another file's
        assert run_check_index(journal, sha, "next") == 7
        _run(journal, world / "shifted.jsonl", world / "warn.yaml", "next")
        outcome = journal.get("next", "run/shift")
        assert outcome is not None
        got = outcome.payload
        assert got["check"] == 7 and got["file_alpha"] == 0.1
        assert got["alpha"] == check_level(0.1, 7)
        assert got["shifted"] and got["p_value"] <= got["alpha"], got
        # The run's own journalled check does not count for itself.
        assert run_check_index(journal, sha, "next") == 7
        assert run_check_index(journal, sha, "later") == 8
    from dissensus.pipeline.shift import shift_words

    words = shift_words(got)
    assert f"≤ level {got['alpha']:.2g} of check 7" in words
    assert "flagged with probability at most 0.1 over its life" in words
    assert "p = 0.00" not in words and f"p = {got['p_value']:.2g}" in words


def test_two_runs_finishing_at_once_take_consecutive_check_indices(
    world: Path, journal_target: str
) -> None:
    """A run's check counts the file's earlier checks under a lock named after the file:
    a run finishing while another writer holds that lock (an uncommitted check of the
    same file) waits for it and takes the next index. Without the lock, PostgreSQL's
    second run counted the same earlier checks and spent check 1's level again."""
    import threading

    sha = RunSpec.from_policy(world / "warn.yaml").acceptance["sha256"]  # type: ignore[index]
    with Journal(journal_target) as first, Journal(journal_target) as second:
        done = threading.Event()
        failed: list[BaseException] = []

        def finish_second() -> None:
            try:
                _run(second, world / "shifted.jsonl", world / "warn.yaml", "second")
            except BaseException as exc:  # reported by the assertion below
                failed.append(exc)
            finally:
                done.set()

        with first.transaction():
            first.lock_name(f"shift-check:{sha}")
            _fake_check(first, "first", sha)
            worker = threading.Thread(target=finish_second)
            worker.start()
            # The second run reads its cases, then waits for the lock to count checks.
            assert not done.wait(2.0), failed
        worker.join(60)
        assert done.is_set() and not failed, failed
        got = second.get("second", "run/shift")
        assert got is not None and got.payload["check"] == 2, got


def test_lock_name_needs_a_transaction(tmp_path: Path) -> None:
    with (
        Journal(tmp_path / "j.sqlite") as journal,
        pytest.raises(RuntimeError, match="transaction"),
    ):
        journal.lock_name("x")


def test_a_resumed_run_journals_the_check_an_uninterrupted_run_does(
    world: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dissensus.pipeline import batch

    def journal_with_one_earlier_check(name: str) -> Journal:
        journal = Journal(tmp_path / name)
        _run(journal, world / "same.jsonl", world / "warn.yaml", "first")
        return journal

    with journal_with_one_earlier_check("base.sqlite") as base:
        _run(base, world / "shifted.jsonl", world / "warn.yaml", "r")
        expected = base.get("r", "run/shift")
    with journal_with_one_earlier_check("cut.sqlite") as journal:
        start_run(journal, str(world / "shifted.jsonl"), world / "warn.yaml", run_id="r")
        monkeypatch.setattr(batch, "BLOCK_CASES", 5)  # records come in blocks of 5

        async def interrupted() -> None:
            async for _ in execute_run(journal, "r"):
                break  # the run is left unfinished after its first record

        asyncio.run(interrupted())
        assert journal.get("r", "run/shift") is None
        assert journal.run_status("r") != "finished"
        assert 0 < journal.count_of_type("case.acceptance") - 60 < 60  # part of its cases
        monkeypatch.undo()

        async def resumed() -> None:
            async for _ in execute_run(journal, "r"):
                pass

        asyncio.run(resumed())
        got = journal.get("r", "run/shift")
    assert expected is not None and got is not None
    assert got.payload == expected.payload and got.payload["check"] == 2


def test_an_outcome_journalled_by_the_permutation_test_still_reads(tmp_path: Path) -> None:
    from dissensus.pipeline.shift import shift_words

    old = {
        "auc": 0.71,
        "p_value": 0.03,
        "shifted": True,
        "alpha": 0.1,
        "calibration_n": 150,
        "deployed_n": 60,
        "permutations": 200,
        "reason": "the deployed cases look different from the calibration cases (AUC 0.71, p = 0.030)",
        "file_sha256": "abc",
    }
    with Journal(tmp_path / "j.sqlite") as journal:
        journal.create_run("old", kind="decide", meta={})
        journal.append("old", SHIFT_EVENT, old, key="run/shift")
        flag = latest_flag(journal, "abc")
    assert flag is not None and flag["permutations"] == 200 and flag["run_id"] == "old"
    words = shift_words(flag)
    assert words.startswith(
        "New cases look different from the 150 calibration cases (shift check p = 0.03 ≤ "
        "level 0.1, AUC 0.71)"
    )
    assert "over its life" not in words  # it was not tested at a lifetime level


def test_a_sampled_check_is_the_same_in_any_order_and_says_how_many_it_tested() -> None:
    """More judged cases than a check tests: the sample is drawn from the cases' values, so
    the same cases in another order (a resumed run) give the same check, and the words
    name both numbers."""
    import numpy as np

    from dissensus.acceptance.shift import ShiftReference
    from dissensus.pipeline.shift import MAX_DEPLOYED, check_vectors, shift_words

    rng = np.random.default_rng(4)
    ref = ShiftReference(features=["a", "b"], rows=rng.normal(size=(60, 2)).tolist())
    cases = [{"a": float(x), "b": float(y)} for x, y in rng.normal(size=(MAX_DEPLOYED + 500, 2))]
    acceptance = {"shift_reference": ref.model_dump(), "sha256": "f"}
    first = check_vectors(acceptance, cases, alpha=0.1)
    again = check_vectors(acceptance, list(reversed(cases)), alpha=0.1)
    assert first is not None and first == again
    assert first["deployed_n"] == MAX_DEPLOYED and first["judged_n"] == MAX_DEPLOYED + 500
    assert f"over {MAX_DEPLOYED} of {MAX_DEPLOYED + 500} cases" in shift_words(first)
