"""The MCP ``decide`` tool's rejects, and the journal arguments of every tool.

* a panel the run refuses is a reject (index, id, field path) beside every record made,
  never an error that hides them;
* ``journal: ":memory:"`` and a path holding a NUL character are refused naming the field;
* an argument that does not validate is one line naming the field;
* a journal locked by another process holds up the call that writes to it, not the server.

The in-process client (:class:`mcp.client.Client`) serves most tests; the lock test runs
the server as ``dissensus mcp`` over stdio, as a client would, since the loop it must not
block is the server's own.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from cli_helpers import cli
from dissensus.store import Journal
from mcp_helpers import tool_data, tool_text
from pipeline_cases import panel, write_jsonl

ROOT = Path(__file__).resolve().parents[1]
LOCK_SECONDS = 8.0


def _policy(tmp: Path) -> Path:
    policy = tmp / "policy.yaml"
    policy.write_text(
        yaml.safe_dump({"reading": {"similarity": "tfidf", "theta_s": 0.3}}), encoding="utf-8"
    )
    return policy


def _conflict(pid: str = "p-conflict") -> dict[str, Any]:
    return panel(pid, ["1", "2", "1"], values=[{"a": 1.0}, {"b": 1.0}, {"a": 0.5}],
                 reasoning=["Option 1 is right."] * 3)  # fmt: skip


def _agree(pid: str = "p-agree") -> dict[str, Any]:
    return panel(pid, ["1", "1", "1"], evidence=[[{"source": f"kb:{i}"}] for i in range(3)],
                 reasoning=["Option 1 states the refund window of 30 days."] * 3)  # fmt: skip


def _big(pid: str = "big") -> dict[str, Any]:
    return panel(pid, ["1", "1", "1"], reasoning=["x" * 40_000, "ok", "ok"])


def _calls(tmp: Path, calls: list[tuple[str, dict[str, Any]]], **server: Any) -> list[Any]:
    """Each call's result, in order, from one in-process server on ``tmp``'s journal."""
    from mcp.client import Client

    from dissensus.integrations.mcp import build_server

    policy = str(_policy(tmp))
    settings = {"journal": str(tmp / "j.sqlite"), "policy": policy, "root": tmp, **server}
    built = build_server(**settings)

    async def go() -> list[Any]:
        async with Client(built) as client:
            return [await client.call_tool(name, args) for name, args in calls]

    return asyncio.run(asyncio.wait_for(go(), timeout=120))


def test_a_refused_panel_is_a_reject_beside_every_record(tmp_path: Path) -> None:
    pytest.importorskip("mcp")
    panels = [_conflict(), _big(), _agree()]
    decided, listed = _calls(tmp_path, [("decide", {"panels": panels}), ("review_list", {})])
    assert not decided.is_error, tool_text(decided)
    answer = decided.structured_content
    # The records stay where the tool always put them (``result``); rejects beside them.
    assert set(answer) == {"result", "rejects"}
    assert [(r["id"], r["action"]) for r in answer["result"]] == [
        ("p-conflict", "escalate"),
        ("p-agree", "auto"),
    ]
    (reject,) = answer["rejects"]
    assert {k: v for k, v in reject.items() if k != "run_id"} == {
        "index": 1,
        "id": "big",
        "field": "outputs.0.reasoning",
        "error": "40000 characters; at most 32768 per field",
    }
    # The good panels' review item, once: nothing to decide again.
    (entry,) = tool_data(listed)
    assert entry["review_id"] == answer["result"][0]["review_id"]
    with Journal(tmp_path / "j.sqlite") as journal:
        runs = {r.run_id for r in journal.runs()}
        assert len(runs) == 3 and reject["run_id"] in runs  # a run each, as adecide makes
        assert all(journal.verify(run).ok for run in runs)
        (event,) = journal.events(reject["run_id"], type="input.rejected")
        assert event.payload["field"] == "outputs.0.reasoning"

    # The CLI, on the same panels as a file: the same records, the same reject.
    source = write_jsonl(tmp_path / "panels.jsonl", panels)
    out = cli("decide", str(source), "--policy", str(tmp_path / "policy.yaml"),
              "--journal", str(tmp_path / "cli.sqlite"), "--json")  # fmt: skip
    assert out.code == 3
    rows = [json.loads(line) for line in out.out.splitlines() if line.strip()]
    keys = ("id", "action", "decision", "auto", "reason", "state", "route", "rule", "path")
    assert [{k: r[k] for k in keys} for r in rows] == [
        {k: r[k] for k in keys} for r in answer["result"]
    ]
    assert "field 'outputs.0.reasoning': 40000 characters; at most 32768 per field" in out.err


def test_a_call_without_a_reject_answers_the_records_alone(tmp_path: Path) -> None:
    pytest.importorskip("mcp")
    (decided,) = _calls(tmp_path, [("decide", {"panels": [_agree()]})])
    assert not decided.is_error and set(decided.structured_content) == {"result"}
    (record,) = decided.structured_content["result"]
    assert record["review_id"] is None and record["action"] == "auto"


def test_every_panel_refused_is_still_an_answer(tmp_path: Path) -> None:
    pytest.importorskip("mcp")
    (decided,) = _calls(tmp_path, [("decide", {"panels": [_big("b1"), _big("b2")]})])
    assert not decided.is_error, tool_text(decided)
    answer = decided.structured_content
    assert answer["result"] == []
    assert [(r["index"], r["id"], r["field"]) for r in answer["rejects"]] == [
        (0, "b1", "outputs.0.reasoning"),
        (1, "b2", "outputs.0.reasoning"),
    ]


def test_an_in_memory_journal_is_refused_naming_the_field(tmp_path: Path) -> None:
    pytest.importorskip("mcp")
    results = _calls(
        tmp_path,
        [
            ("decide", {"panels": [_conflict()], "journal": ":memory:"}),
            ("review_list", {"journal": ":memory:"}),
        ],
    )
    for bad in results:
        assert bad.is_error and "field 'journal'" in tool_text(bad), tool_text(bad)
        assert "review item" in tool_text(bad)
    assert not (tmp_path / "j.sqlite").exists()  # nor was it decided into the server's
    from dissensus.errors import ConfigError
    from dissensus.integrations.mcp import build_server

    with pytest.raises(ConfigError, match="field 'journal'"):
        build_server(journal=":memory:")


@pytest.mark.parametrize(
    ("tool", "args", "field"),
    [
        ("decide", {"panels": [_agree()], "journal": "a\x00b"}, "journal"),
        ("decide", {"panels": [_agree()], "policy": "a\x00b"}, "policy"),
        ("review_show", {"review_id": "r.1", "journal": "a\x00b"}, "journal"),
        ("runs_list", {"journal": "a\x00b"}, "journal"),
        ("route", {"panels": [_agree()], "similarity": "tfidf", "rules": "a\x00b"}, "rules"),
        ("vote", {"cases": [], "calibration": "a\x00b"}, "calibration"),
    ],
)
def test_a_path_with_a_nul_character_names_its_field(
    tmp_path: Path, tool: str, args: dict[str, Any], field: str
) -> None:
    pytest.importorskip("mcp")
    (bad,) = _calls(tmp_path, [(tool, args)])
    assert bad.is_error and f"field {field!r}" in tool_text(bad), tool_text(bad)
    assert "\x00" not in tool_text(bad)


def test_argument_errors_are_one_line_naming_the_field(tmp_path: Path) -> None:
    pytest.importorskip("mcp")
    one_output = {"id": "x", "outputs": [_agree()["outputs"][0]]}
    cal = tmp_path / "cal.json"
    cal.write_text(json.dumps({"not": "a calibration"}), encoding="utf-8")
    results = _calls(
        tmp_path,
        [
            ("bound", {"agents": "five", "rounds": 6}),
            ("decide", {"panels": [_agree(), one_output]}),
            ("review_resolve", {"review_id": "r.1", "decision": "1", "note": ""}),
            ("vote", {"cases": [], "calibration": str(cal)}),
        ],
    )
    expected = ["field 'agents'", "field 'panels.1.outputs'", "field 'content_sha256'",
                "field 'calibration'"]  # fmt: skip
    for bad, field in zip(results, expected, strict=True):
        text = tool_text(bad)
        assert bad.is_error and field in text, text
        assert "\n" not in text and "pydantic.dev" not in text, text


async def _locked_session(tmp: Path, journal: Path) -> tuple[float, bool, Any, Any]:
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]),
        "DISSENSUS_JOURNAL_BUSY_TIMEOUT": "60",
    }
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "dissensus", "mcp", "--journal", str(journal), "--policy", str(_policy(tmp))],
        env=env,
        cwd=str(tmp),
    )
    locked = threading.Event()
    release = threading.Event()

    def hold() -> None:
        db = sqlite3.connect(journal, isolation_level=None, timeout=60)
        try:
            db.execute("BEGIN EXCLUSIVE")
            locked.set()
            release.wait(LOCK_SECONDS)
            db.execute("ROLLBACK")
        finally:
            db.close()

    async with stdio_client(params) as (read, write), ClientSession(read, write) as s:
        await s.initialize()
        tool_data(await s.call_tool("bound", {"agents": 2, "rounds": 1}))  # the server is up
        holder = threading.Thread(target=hold)
        holder.start()
        try:
            assert await asyncio.to_thread(locked.wait, 10)
            decide = asyncio.create_task(s.call_tool("decide", {"panels": [_conflict()]}))
            await asyncio.sleep(0.5)  # the decide call is in flight, waiting on the lock
            assert not decide.done()
            start = time.monotonic()
            quick = await s.call_tool("bound", {"agents": 5, "rounds": 6})
            waited = time.monotonic() - start
            held = not decide.done()  # still waiting for the journal's lock
        finally:
            release.set()
            await asyncio.to_thread(holder.join)
        return waited, held, quick, await decide


def test_a_locked_journal_holds_up_its_call_not_the_server(tmp_path: Path) -> None:
    pytest.importorskip("mcp")
    journal = tmp_path / "j.sqlite"
    with Journal(journal):
        pass  # the file exists, with its tables, before another process locks it
    waited, held, quick, decided = asyncio.run(
        asyncio.wait_for(_locked_session(tmp_path, journal), timeout=120)
    )
    assert tool_data(quick)["evaluations"] == 55
    assert waited < 3.0, f"bound waited {waited:.1f} s behind a decide on a locked journal"
    assert held  # the decide call was still waiting for the lock when bound answered
    (record,) = tool_data(decided)  # decided once the lock was released
    assert record["action"] == "escalate"


def test_the_review_and_runs_tools_open_a_journal_on_either_back_end(
    tmp_path: Path, journal_target: str
) -> None:
    """A PostgreSQL URL is no file: the tools that need an existing journal open it
    rather than calling it not found."""
    decided, listed, runs = _calls(
        tmp_path,
        [("decide", {"panels": [_conflict()]}), ("review_list", {}), ("runs_list", {})],
        journal=journal_target,
    )
    (record,) = tool_data(decided)
    (entry,) = tool_data(listed)
    assert entry["review_id"] == record["review_id"]
    assert len(tool_data(runs)) == 1


def test_the_library_names_the_field_of_a_refused_panel() -> None:
    from dissensus.errors import InputError
    from dissensus.pipeline import decide

    with pytest.raises(InputError) as refused:
        decide(_big(), {"reading": {"similarity": "tfidf"}})
    assert "field 'outputs.0.reasoning': 40000 characters" in str(refused.value)


def test_a_journal_failing_mid_list_names_the_panels_already_decided(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The journal goes away at the second panel: the call is an error, and it says the
    first panel was decided (its run), so a retry sends only the rest."""
    import dissensus.integrations.mcp.tools_decide as mcp
    from dissensus.store.errors import JournalBusy

    real = mcp.start_run
    calls: list[int] = []

    def flaky(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 2:
            raise JournalBusy("the journal is busy (another writer holds its lock)")
        return real(*args, **kwargs)

    monkeypatch.setattr(mcp, "start_run", flaky)
    (failed,) = _calls(tmp_path, [("decide", {"panels": [_conflict(), _agree(), _agree("p3")]})])
    assert failed.is_error
    text = tool_text(failed)
    with Journal(tmp_path / "j.sqlite") as journal:
        (run,) = journal.runs()
    assert "panel 1 ('p-agree') and those after it were not decided" in text
    assert f"panels 0-0 were (runs {run.run_id}): send only the rest again" in text


def _failing_at_second_run(monkeypatch: pytest.MonkeyPatch, error: Exception) -> None:
    """``execute_run`` raises ``error`` for the second panel's run."""
    import dissensus.integrations.mcp.tools_decide as mcp

    real = mcp.execute_run
    calls: list[int] = []

    def failing(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) != 2:
            return real(*args, **kwargs)

        async def stopped() -> Any:
            raise error
            yield  # an async generator, as execute_run

        return stopped()

    monkeypatch.setattr(mcp, "execute_run", failing)


def test_a_run_stopped_by_a_library_error_is_a_reject_beside_the_others(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An error of the library's own stops one panel's run (a configuration its case met,
    say): that panel is a reject naming the field, and the panels after it are decided."""
    pytest.importorskip("mcp")
    from dissensus.errors import ConfigError

    _failing_at_second_run(monkeypatch, ConfigError("cannot go on", field="acceptance.features"))
    (decided,) = _calls(tmp_path, [("decide", {"panels": [_conflict(), _agree(), _agree("p3")]})])
    assert not decided.is_error, tool_text(decided)
    answer = decided.structured_content
    assert [r["id"] for r in answer["result"]] == ["p-conflict", "p3"]
    (reject,) = answer["rejects"]
    assert (reject["index"], reject["id"], reject["field"]) == (1, "p-agree", "acceptance.features")
    assert "cannot go on" in reject["error"] and reject["run_id"]


def test_an_unexpected_error_mid_list_names_the_panels_already_decided(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("mcp")
    _failing_at_second_run(monkeypatch, RuntimeError("the program's own fault"))
    (failed,) = _calls(tmp_path, [("decide", {"panels": [_conflict(), _agree(), _agree("p3")]})])
    assert failed.is_error
    text = tool_text(failed)
    with Journal(tmp_path / "j.sqlite") as journal:
        first = journal.runs()[0].run_id
    assert "RuntimeError: the program's own fault" in text
    assert "panel 1 ('p-agree') and those after it were not decided" in text
    assert f"panels 0-0 were (runs {first}): send only the rest again" in text


def test_a_long_id_is_quoted_back_by_its_first_characters(tmp_path: Path) -> None:
    pytest.importorskip("mcp")
    long = "a" * 10_000
    results = _calls(
        tmp_path,
        [
            ("decide", {"panels": [_conflict()]}),
            ("runs_verify", {"run_id": long}),
            ("review_list", {"run": long}),
            ("review_show", {"review_id": long + ".1"}),
            ("review_resolve", {"review_id": long, "decision": "1", "note": "n",
                                "content_sha256": "0" * 64}),
        ],
    )  # fmt: skip
    for result in results[1:]:
        text = tool_text(result)
        assert result.is_error and len(text) < 600, text[:300]
        assert "'" + "a" * 80 + "'…" in text and "a" * 81 not in text


def test_a_rejected_panels_long_id_is_quoted_by_its_first_characters(tmp_path: Path) -> None:
    """The answer names a rejected panel by its index; its id is not echoed back whole."""
    pytest.importorskip("mcp")
    long = _conflict("x" * 100_000)
    big = _big("y" * 100_000)
    (decided,) = _calls(tmp_path, [("decide", {"panels": [long, big, _agree()]})])
    assert not decided.is_error, tool_text(decided)[:300]
    answer = decided.structured_content
    assert [r["id"] for r in answer["result"]] == ["p-agree"]
    assert [(r["index"], r["id"], r["field"]) for r in answer["rejects"]] == [
        (0, "x" * 80 + "…", "id"),
        (1, "y" * 80 + "…", "id"),
    ]
    assert len(tool_text(decided)) < 4_000


def test_bound_takes_integers_only(tmp_path: Path) -> None:
    pytest.importorskip("mcp")
    bad = [{"agents": True, "rounds": 1}, {"agents": 2.0, "rounds": 1},
           {"agents": 2, "rounds": False}, {"agents": "2", "rounds": 1}]  # fmt: skip
    results = _calls(tmp_path, [("bound", args) for args in [*bad, {"agents": 2, "rounds": 1}]])
    for args, result in zip(bad, results[:-1], strict=True):
        field = "agents" if type(args["agents"]) is not int else "rounds"
        text = tool_text(result)
        assert result.is_error and f"field {field!r}: Input should be a valid integer" in text, (
            args,
            text,
        )
    assert tool_data(results[-1])["candidates"] == 3


def test_bound_takes_the_ranges_of_the_cli(tmp_path: Path) -> None:
    """``bound`` had no upper limits: ``10**30`` agents answered a 61-digit figure, and
    ``10**2500`` integers no JSON reader of Python takes. It refuses what ``dissensus
    bound`` refuses (1 to 256 agents, 0 to 1,000 rounds), naming the field."""
    pytest.importorskip("mcp")
    from dissensus.cli.concord import MAX_AGENTS, MAX_ROUNDS

    over = [({"agents": 10**30, "rounds": 1}, "agents", "less than or equal to 256"),
            ({"agents": MAX_AGENTS + 1, "rounds": 0}, "agents", "less than or equal to 256"),
            ({"agents": 2, "rounds": MAX_ROUNDS + 1}, "rounds", "less than or equal to 1000"),
            ({"agents": 2, "rounds": 10**2500}, "rounds", "less than or equal to 1000"),
            ({"agents": 0, "rounds": 1}, "agents", "greater than or equal to 1")]  # fmt: skip
    at_most = {"agents": MAX_AGENTS, "rounds": MAX_ROUNDS}
    results = _calls(tmp_path, [("bound", args) for args, _, _ in over] + [("bound", at_most)])
    for (_, field, why), result in zip(over, results[:-1], strict=True):
        text = tool_text(result)
        assert result.is_error and f"field {field!r}: Input should be {why}" in text, text
        assert len(text) < 200, text
    assert tool_data(results[-1])["candidates"] == MAX_AGENTS + MAX_ROUNDS


def test_the_servers_own_policy_and_journal_are_checked_before_it_serves(tmp_path: Path) -> None:
    """``dissensus mcp --policy missing.yaml`` and ``--journal notes.jsonl`` started and
    served; each call then failed. Both are usage errors before anything is served."""
    from cli_helpers import cli

    pytest.importorskip("mcp")
    notes = tmp_path / "notes.jsonl"
    notes.write_text("not a journal\n", encoding="utf-8")
    missing = cli("mcp", "--policy", tmp_path / "missing.yaml", stdin=b"")
    assert missing.code == 2 and "cannot read policy" in missing.err, missing.err
    foreign = cli("mcp", "--journal", notes, stdin=b"")
    assert foreign.code == 2 and "not a dissensus journal" in foreign.err, foreign.err


def test_a_run_stopped_after_its_record_is_named_unfinished(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A panel whose record was made but whose run then stopped (its deadline passed
    after the record) is decided and journalled; the answer says its run is unfinished
    and how to end it, where it used to return the record as if the run had ended."""
    pytest.importorskip("mcp")
    from dissensus.integrations.mcp import tools_decide
    from dissensus.pipeline import DeadlineReached

    real = tools_decide.execute_run

    async def stops_after_the_record(store: Any, run_id: str, **kwargs: Any) -> Any:
        async for record in real(store, run_id, **kwargs):
            yield record
            if record.id == "p-agree":
                raise DeadlineReached(
                    f"run {run_id} reached its deadline (0.5 s): resume with: "
                    f"dissensus runs resume {run_id}"
                )

    monkeypatch.setattr(tools_decide, "execute_run", stops_after_the_record)
    (decided,) = _calls(tmp_path, [("decide", {"panels": [_conflict(), _agree()]})])
    assert not decided.is_error, tool_text(decided)
    answer = decided.structured_content
    assert set(answer) == {"result", "unfinished"}
    assert [r["id"] for r in answer["result"]] == ["p-conflict", "p-agree"]
    (unfinished,) = answer["unfinished"]
    assert unfinished["index"] == 1 and unfinished["id"] == "p-agree"
    assert unfinished["error"].endswith(f"dissensus runs resume {unfinished['run_id']}")


def test_every_run_with_a_record_has_ended_or_is_named_unfinished(tmp_path: Path) -> None:
    """Under deadlines around a panel's decision time, a record's run either ended or is
    in ``unfinished``, never a record answered from a run left partial unsaid."""
    pytest.importorskip("mcp")
    from dissensus.integrations.mcp.tools_decide import _decide_panels
    from dissensus.pipeline import RunSpec
    from dissensus.types import Panel

    panels = [Panel.model_validate(_agree())]
    for i in range(30):
        deadline = 10 ** (-4 + i / 10)  # 0.1 ms to 80 ms
        policy = tmp_path / f"p{i}.yaml"
        policy.write_text(
            yaml.safe_dump({"reading": {"similarity": "tfidf"}, "deadline_s": deadline}),
            encoding="utf-8",
        )
        store = Journal(str(tmp_path / f"j{i}.sqlite"))
        answer = asyncio.run(_decide_panels(store, RunSpec.from_policy(str(policy)), panels, str))
        unfinished = {u.run_id for u in answer.unfinished}
        rejected = {r.run_id for r in answer.rejects}
        for run in store.runs():
            ended = any(e.type == "run.finished" for e in store.events(run.run_id))
            if answer.result and run.run_id not in rejected:
                assert ended or run.run_id in unfinished, (deadline, answer)
            else:
                assert not ended and run.run_id not in unfinished


def _failing_after(monkeypatch: pytest.MonkeyPatch, panel_id: str, error: Exception) -> None:
    """``execute_run`` raising ``error`` once the record of ``panel_id`` is made."""
    from dissensus.integrations.mcp import tools_decide

    real = tools_decide.execute_run

    async def fails(store: Any, run_id: str, **kwargs: Any) -> Any:
        async for record in real(store, run_id, **kwargs):
            yield record
            if record.id == panel_id:
                raise error

    monkeypatch.setattr(tools_decide, "execute_run", fails)


@pytest.mark.parametrize("last", [True, False])
def test_a_journal_failing_after_a_record_counts_that_panel_as_decided(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, last: bool
) -> None:
    """The journal failing after a panel's record was made said that panel 'was not
    decided' and should be sent again, which decides it twice."""
    pytest.importorskip("mcp")
    from dissensus.store import JournalError

    _failing_after(monkeypatch, "p-agree", JournalError("the journal is busy"))
    panels = [_conflict(), _agree()] + ([] if last else [_agree("p-more")])
    (decided,) = _calls(tmp_path, [("decide", {"panels": panels})])
    assert decided.is_error
    said = tool_text(decided)
    if last:
        assert "every panel was decided" in said and "send none again" in said
    else:
        assert "panel 2 ('p-more') and those after it were not decided" in said
        assert "panels 0-1 were" in said
    assert "of panel 1 may not have ended" in said and "dissensus runs resume" in said


def test_an_unfinished_run_s_error_always_says_how_to_end_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("mcp")
    from dissensus.errors import DissensusError

    _failing_after(monkeypatch, "p-agree", DissensusError("the shift check could not be written"))
    (decided,) = _calls(tmp_path, [("decide", {"panels": [_agree()]})])
    (unfinished,) = decided.structured_content["unfinished"]
    assert unfinished["error"].startswith("the shift check could not be written")
    assert f"dissensus runs resume {unfinished['run_id']} --journal" in unfinished["error"]
