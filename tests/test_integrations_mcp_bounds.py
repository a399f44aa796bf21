"""The MCP tools' bounds on their arguments, and what their errors name.

* ``route`` and ``vote`` refuse a panel or case over a bound of
  :mod:`dissensus.io.limits`, naming its place and field, as the CLI refuses the line;
* concurrent calls naming one new journal all open it;
* a client reading the server's answers off its stdout pipe sees every one of them.
"""

from __future__ import annotations

import asyncio
import json
import os
import select
from pathlib import Path
from typing import IO, Any

import pytest

from mcp_helpers import tool_data, tool_text
from pipeline_cases import panel


def _calls(root: Path, calls: list[tuple[str, dict[str, Any]]], **server: Any) -> list[Any]:
    """Each call's result, in order, from one in-process server serving ``root``."""
    pytest.importorskip("mcp")
    from mcp.client import Client

    from dissensus.integrations.mcp import build_server

    built = build_server(root=root, **server)

    async def go() -> list[Any]:
        async with Client(built) as client:
            return [await client.call_tool(name, args) for name, args in calls]

    return asyncio.run(asyncio.wait_for(go(), timeout=120))


def _vote(agent: str, answer: str = "yes", **extra: Any) -> dict[str, Any]:
    return {"agent": agent, "answer": answer, "evidence_source": "kb", "evidence_present": True,
            **extra}  # fmt: skip


def _case(cid: str, voters: int) -> dict[str, Any]:
    return {"id": cid, "votes": [_vote(f"a{i}") for i in range(voters)]}


def test_vote_and_route_refuse_a_record_over_a_bound_naming_its_place(tmp_path: Path) -> None:
    wide = panel("wide", ["1"] * 300, reasoning=["same"] * 300)
    long = panel("long", ["1", "1"], reasoning=["ok", "x" * 40_000])
    texts = [_vote("a"), _vote("b")]
    meta = {"id": "m", "votes": texts, "meta": {"note": "y" * 40_000}}
    many = {"id": "v", "votes": [_vote("a"), _vote("b")], "meta": {"n": [0] * 100_001}}
    sim = {"similarity": "tfidf"}
    results = _calls(
        tmp_path,
        [
            ("vote", {"cases": [_case("ok", 2), _case("big", 10_000)]}),
            ("vote", {"cases": [meta]}),
            ("vote", {"cases": [many]}),
            ("route", {"panels": [long], **sim}),
            ("route", {"panels": [panel("ok", ["1", "1"]), wide], **sim}),
            ("vote", {"cases": [_case("ok", 256)]}),
        ],
    )
    expected = [
        "cases.1: field 'votes': 10000 voters; at most 256 per case",
        "cases.0: field 'meta.note': 40000 characters; at most 32768 per field",
        "cases.0: field '<values>': 100021 JSON values; at most 100000 per record",
        "panels.0: field 'outputs.1.reasoning': 40000 characters; at most 32768 per field",
        "panels.1: field 'outputs': 300 agents; at most 256 per panel",
    ]
    for result, message in zip(results, expected, strict=False):
        assert result.is_error and tool_text(result).endswith(message), tool_text(result)
    (decision,) = tool_data(results[-1])
    assert decision["n_voters"] == 256


def _nested(record: dict[str, Any], depth: int) -> dict[str, Any]:
    """``record`` with a ``meta`` value making it nest exactly ``depth`` levels."""
    from dissensus.io.jsontext import json_depth

    value: Any = []
    for _ in range(depth - 3):  # the record, meta and the innermost list
        value = [value]
    deep = {**record, "meta": {"deep": value}}
    assert json_depth(deep) == depth
    return deep


def test_route_and_vote_refuse_a_record_nested_too_deep_as_the_cli(tmp_path: Path) -> None:
    """``route`` read a panel nested deeper than 64 levels, which ``dissensus route``
    rejects (``field '<depth>': JSON nested deeper than 64 levels``) and ``decide``
    refuses: ``route`` and ``vote`` refuse it naming its place, and take 64 levels."""
    from dissensus.io.jsontext import MAX_DEPTH

    sim = {"similarity": "tfidf"}
    ok = panel("ok", ["1", "1"])
    results = _calls(
        tmp_path,
        [
            ("route", {"panels": [ok, _nested(panel("deep", ["1", "1"]), MAX_DEPTH + 1)], **sim}),
            ("vote", {"cases": [_nested(_case("deep", 2), MAX_DEPTH + 1)]}),
            ("route", {"panels": [_nested(panel("at", ["1", "1"]), MAX_DEPTH)], **sim}),
            ("vote", {"cases": [_nested(_case("at", 2), MAX_DEPTH)]}),
        ],
    )
    deeper = f"field '<depth>': JSON nested deeper than {MAX_DEPTH} levels"
    assert results[0].is_error and tool_text(results[0]).endswith(f"panels.1: {deeper}")
    assert results[1].is_error and tool_text(results[1]).endswith(f"cases.0: {deeper}")
    assert tool_data(results[2])[0]["id"] == "at"
    assert tool_data(results[3])[0]["id"] == "at"


def test_the_cli_rejects_what_route_refuses(tmp_path: Path) -> None:
    """The message ``route`` gives is the CLI's for the same line."""
    from cli_helpers import cli
    from dissensus.io.jsontext import MAX_DEPTH

    line = tmp_path / "deep.jsonl"
    line.write_text(json.dumps(_nested(panel("deep", ["1", "1"]), MAX_DEPTH + 1)) + "\n")
    done = cli("route", line, "--similarity", "tfidf")
    deeper = f"deep.jsonl:1: field '<depth>': JSON nested deeper than {MAX_DEPTH} levels"
    assert deeper in done.err, done.err


def test_concurrent_calls_may_all_create_the_same_new_journal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Twenty ``decide`` calls naming one journal that does not exist yet all succeed: the
    first to open it creates the file, empty until the schema is written, and the others
    must not take it for an empty file that is no journal. The window between the two is
    widened here (it is a few milliseconds in SQLite) so that every run meets it."""
    pytest.importorskip("mcp")
    import time

    from dissensus.integrations.mcp import build_server, settings
    from dissensus.store import Journal

    def slow_to_create(target: str) -> Journal:
        if not Path(target).exists():
            Path(target).touch()
            time.sleep(0.3)
        return Journal(target)

    monkeypatch.setattr(settings, "Journal", slow_to_create)
    from mcp.client import Client

    built = build_server(root=tmp_path)
    args = [{"panels": [panel(f"p{i}", ["1", "1"])], "journal": "new.sqlite"} for i in range(20)]

    async def go() -> list[Any]:
        async with Client(built) as client:
            return list(await asyncio.gather(*(client.call_tool("decide", a) for a in args)))

    results = asyncio.run(asyncio.wait_for(go(), timeout=120))
    assert [tool_text(r) for r in results if r.is_error] == []
    (listed,) = _calls(tmp_path, [("runs_list", {"journal": "new.sqlite"})])
    assert len(tool_data(listed)) == 20

    # A file already empty before any call opened it is still no journal.
    (tmp_path / "empty.sqlite").touch()
    (empty,) = _calls(
        tmp_path, [("decide", {"panels": args[0]["panels"], "journal": "empty.sqlite"})]
    )
    assert empty.is_error and "an existing empty file is not a journal" in tool_text(empty)


def test_errors_name_the_journal_as_the_caller_named_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A journal under the served directory is named in errors and rejects as the caller
    named it, never by its absolute path there; the server's own, as configured."""
    root = tmp_path / "served"
    root.mkdir()
    (root / "dl.yaml").write_text("reading: {similarity: tfidf}\ndeadline_s: 0.000001\n")
    one = {"panels": [panel("p", ["1", "2"])], "policy": "dl.yaml"}
    mine = {"journal": "mine.sqlite"}
    monkeypatch.chdir(tmp_path)  # the server's own journal, relative to where it started
    results = _calls(
        root,
        [
            ("decide", {**one, **mine}),
            ("runs_list", {**mine, "after": "nosuch"}),
            ("review_show", {**mine, "review_id": "nosuch.1"}),
            (
                "review_resolve",
                {
                    **mine,
                    "review_id": "nosuch.1",
                    "decision": "1",
                    "note": "n",
                    "content_sha256": "0" * 64,
                },
            ),
            ("runs_verify", {**mine, "run_id": "nosuch"}),
            ("decide", one),
            ("runs_list", {"after": "nosuch"}),
        ],
        journal="own.sqlite",
    )
    decided, *errors, own_decided, own_error = results
    (reject,) = decided.structured_content["rejects"]
    assert reject["error"].endswith(
        f"dissensus runs resume {reject['run_id']} --journal mine.sqlite"
    )
    for error in errors:
        text = tool_text(error)
        assert error.is_error and "mine.sqlite" in text and str(tmp_path) not in text, text
    (own_reject,) = own_decided.structured_content["rejects"]
    assert own_reject["error"].endswith("--journal own.sqlite"), own_reject
    text = tool_text(own_error)
    assert "no run 'nosuch' in journal own.sqlite" in text and str(tmp_path) not in text, text


def test_run_arguments_are_named_and_limit_takes_integers_only(tmp_path: Path) -> None:
    """``runs_list``'s ``after`` and ``review_list``'s ``run`` are named in their errors
    (not the store's ``run_id``); ``limit`` is a JSON integer (``true``, ``"5"`` and
    ``2.0`` are refused naming it, as ``bound`` refuses them)."""
    long = "x" * 10_000
    calls: list[tuple[str, dict[str, Any]]] = [
        ("decide", {"panels": [panel("p", ["1", "2"])], "journal": "j.sqlite"}),
        ("runs_list", {"journal": "j.sqlite", "after": long}),
        ("review_list", {"journal": "j.sqlite", "run": long}),
        ("runs_list", {"journal": "j.sqlite", "after": "nosuchrun"}),
        ("review_list", {"journal": "j.sqlite", "run": "nosuchrun"}),
    ]
    bad_limits = [True, "5", 2.0, 0, 10_001]
    calls += [("runs_list", {"journal": "j.sqlite", "limit": v}) for v in bad_limits]
    calls.append(("runs_list", {"journal": "j.sqlite", "limit": 1}))
    _, *named, ok = _calls(tmp_path, calls, policy=None)
    fields = ["after", "run", "after", "run"] + ["limit"] * len(bad_limits)
    for result, field in zip(named, fields, strict=True):
        text = tool_text(result)
        assert result.is_error and f"field {field!r}:" in text and "'run_id'" not in text, text
    assert "field 'after': no run 'nosuchrun' in journal j.sqlite" in tool_text(named[2])
    assert len(tool_data(ok)) == 1


def test_the_reviewer_is_checked_before_the_server_serves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reviewer name no resolution could hold (an escape sequence) is a usage error on
    one line before anything is served, from ``--reviewer`` or the variable; an empty or
    blank ``--reviewer`` is unset, as an empty ``$DISSENSUS_REVIEWER`` is."""
    from cli_helpers import cli

    pytest.importorskip("mcp")
    bad = cli("mcp", "--reviewer", "kim\x1b[31mx", stdin=b"", cwd=tmp_path)
    assert bad.code == 2 and bad.err.count("\n") == 1, bad.err
    assert "--reviewer may not hold control or invisible characters" in bad.err
    env = cli("mcp", stdin=b"", cwd=tmp_path, env={"DISSENSUS_REVIEWER": "x" * 200})
    assert env.code == 2 and "$DISSENSUS_REVIEWER is 200 characters long" in env.err, env.err

    monkeypatch.delenv("DISSENSUS_REVIEWER", raising=False)
    conflict = panel("c", ["1", "2"], values=[{"a": 1.0}, {"b": 1.0}])
    _, listed = _calls(
        tmp_path,
        [
            ("decide", {"panels": [conflict], "journal": "j.sqlite"}),
            ("review_list", {"journal": "j.sqlite"}),
        ],
        reviewer=" ",
    )
    (item,) = tool_data(listed)
    (resolved,) = _calls(
        tmp_path,
        [("review_resolve", {"review_id": item["review_id"], "decision": "1", "note": "ok",
                             "content_sha256": item["content_sha256"], "journal": "j.sqlite"})],
        reviewer="",
    )  # fmt: skip
    assert tool_data(resolved)["resolution"]["reviewer"] is None


def _read_answers(stream: IO[bytes], wanted: int, *, timeout: float) -> dict[Any, Any]:
    """The JSON-RPC messages a server wrote to ``stream`` (its stdout pipe), by id, once
    ``wanted`` of them are read, or when ``timeout`` seconds pass with nothing new to read
    (a request left unanswered: the client would wait forever) or the pipe ends.

    The pipe's descriptor is read directly: a buffered ``readline`` takes every answer
    already in the pipe into its buffer at once, and ``select`` on the descriptor then
    waits for more while the answers it should return sit unread in that buffer (the
    server's answers arrive together whenever the client reads late, on a loaded host)."""
    fd = stream.fileno()
    answers: dict[Any, Any] = {}
    pending = b""
    while len(answers) < wanted:
        ready, _, _ = select.select([fd], [], [], timeout)
        if not ready:
            break
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            break
        *lines, pending = (pending + chunk).split(b"\n")
        for line in filter(bytes.strip, lines):
            message = json.loads(line)
            answers[message.get("id")] = message
    return answers


def test_answers_already_in_the_pipe_are_all_read() -> None:
    """Answers that reached the pipe together, before the client read the first, are all
    read (the pipe staying open, as a server's does while it serves): the reading of
    the lone-surrogate test below, which a loaded host left waiting for answers it had
    already taken from the pipe."""
    read_end, write_end = os.pipe()
    with open(read_end, "rb") as stream, open(write_end, "wb", buffering=0) as pipe:
        assert _read_answers(stream, 1, timeout=0) == {}  # nothing yet: not waited for
        pipe.write(b'{"id": 1}\n{"id": 50, "error": {}}\n\n{"id": 51}\n')
        answers = _read_answers(stream, 3, timeout=60)
        assert answers == {1: {"id": 1}, 50: {"id": 50, "error": {}}, 51: {"id": 51}}


def test_a_lone_surrogate_escape_is_answered_not_dropped(tmp_path: Path) -> None:
    """A request holding a lone surrogate escape (``"\\ud800"``, not valid Unicode) was
    dropped by the SDK's reader without a word, the client waiting forever: a request,
    a tool call or another, is now answered with a JSON-RPC error, a notification
    dropped, and stderr names the request and where the surrogate is. A valid pair of
    escapes is left as it is."""
    import subprocess
    import sys

    pytest.importorskip("mcp")
    root = Path(__file__).resolve().parents[1]
    init = {"protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "t", "version": "0"}}  # fmt: skip
    lines = [
        json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init}),
        '{"jsonrpc":"2.0","method":"notifications/initialized"}',
        '{"jsonrpc":"2.0","id":50,"method":"tools/call","params":{"name":"bound",'
        '"arguments":{"agents":"\\ud800","rounds":1}}}',
        '{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"reason":"\\udc00"}}',
        '{"jsonrpc":"2.0","id":51,"method":"tools/call","params":{"name":"bound",'
        '"arguments":{"agents":"\\ud83d\\ude00","rounds":1}}}',
        '{"jsonrpc":"2.0","id":52,"method":"tools/list","params":{"cursor":"\\udfff"}}',
    ]
    server = subprocess.Popen(
        [sys.executable, "-m", "dissensus", "mcp"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(root / "src")}, cwd=tmp_path,
    )  # fmt: skip
    assert server.stdin is not None and server.stdout is not None
    server.stdin.write(("\n".join(lines) + "\n").encode())
    server.stdin.flush()
    # Generous: the first answer waits for the server's start (its imports), which takes
    # long on a machine under load; only a request never answered ends this.
    answers = _read_answers(server.stdout, 4, timeout=240)
    if len(answers) < 4:
        server.kill()
    server.stdin.close()
    server.wait(timeout=60)
    assert server.stderr is not None
    err = server.stderr.read()
    server.stdout.close()
    server.stderr.close()
    assert set(answers) == {1, 50, 51, 52}, answers
    assert answers[50]["error"]["code"] == answers[52]["error"]["code"] == -32602, answers
    text = answers[51]["result"]["content"][0]["text"]
    assert answers[51]["result"]["isError"] and "field 'agents'" in text, text
    logged = err.decode()
    assert (
        "error: request '50': not valid Unicode (a lone surrogate escape) at "
        "params.arguments.agents: answered as invalid parameters" in logged
    ), logged
    assert (
        "error: notification 'notifications/cancelled': not valid Unicode (a lone surrogate "
        "escape) at params.reason: dropped" in logged
    ), logged
    assert "\ufffd" not in logged


def test_an_argument_a_tool_does_not_take_is_refused_naming_it(tmp_path: Path) -> None:
    """A misspelt argument (``jounral``) was ignored: the call decided into the server's
    default journal. It is an error naming the argument and what the tool takes, and
    nothing is journalled."""
    good = panel("ok", ["1", "1"])
    results = _calls(
        tmp_path,
        [
            ("decide", {"panels": [good], "jounral": "mine.sqlite"}),
            ("route", {"panels": [good], "similarity": "tfidf", "thetaS": 0.5}),
        ],
    )
    assert all(r.is_error for r in results), results
    first, second = (tool_text(r) for r in results)
    assert "unknown argument 'jounral'" in first and "journal" in first, first
    assert "unknown argument 'thetaS'" in second and "theta_s" in second, second
    assert not (tmp_path / "mine.sqlite").exists()
    assert not list(tmp_path.glob("*.sqlite")), list(tmp_path.iterdir())


def test_every_request_with_a_lone_surrogate_is_answered() -> None:
    """Only a tool call holding a lone surrogate was answered: ``tools/list`` or
    ``initialize`` with one was dropped, and its client waited forever. Every request,
    whatever its method, is answered ``Invalid params`` under its id (``Invalid
    Request`` with id null when the id is the string holding it); what waits for no
    answer (a notification, a response to the server) is dropped."""
    pytest.importorskip("mcp")
    from dissensus.integrations.mcp.messages import _refusal

    requests = {
        "init": '{"jsonrpc":"2.0","id":"init","method":"initialize","params":{'
        '"protocolVersion":"2025-06-18","capabilities":{},'
        '"clientInfo":{"name":"\\ud800","version":"0"}}}',
        7: '{"jsonrpc":"2.0","id":7,"method":"tools/list","params":{"cursor":"\\udc00"}}',
        8: '{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"\\ud800"}}',
        9: '{"jsonrpc":"2.0","id":9,"method":"no/such","params":{"\\ud800":1}}',
    }
    for ident, line in requests.items():
        refusal = _refusal(line + "\n")
        answer = refusal.answer() if refusal is not None else None
        assert answer is not None and (answer.id, answer.error.code) == (ident, -32602), line
        assert "not valid Unicode (a lone surrogate escape) at params" in answer.error.message
    unreadable = _refusal('{"jsonrpc":"2.0","id":"\\ud800","method":"tools/list"}\n')
    answer = unreadable.answer() if unreadable is not None else None
    assert answer is not None and (answer.id, answer.error.code) == (None, -32600)
    waits_for_nothing = [
        '{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"reason":"\\ud800"}}',
        '{"jsonrpc":"2.0","id":3,"result":{"content":"\\ud800"}}',
    ]
    for line in waits_for_nothing:
        refusal = _refusal(line + "\n")
        assert refusal is not None and refusal.answer() is None, line


@pytest.mark.parametrize(
    ("answer", "says"),
    [
        ({"note": ""}, "field 'note': the note must not be empty"),
        ({"note": " \u200b "}, "field 'note': the note must not be empty"),
        ({"decision": "  "}, "field 'decision': the decision must not be empty"),
        ({"note": "a\x00b"}, "field 'note': the note holds the control character U+0000"),
        ({"note": "n" * 32_769}, "field 'note': the note is 32769 characters long; at most"),
    ],
)
def test_review_resolve_names_the_field_of_a_note_or_decision_it_refuses(
    tmp_path: Path, answer: dict[str, str], says: str
) -> None:
    """An empty note was refused as ``the note must not be empty``, naming no field where
    every other argument error of the tool does (``field 'decision': String should have
    at least 1 character``); the service gives ``note`` as the field of the same words."""
    conflict = panel("c", ["1", "2"], values=[{"a": 1.0}, {"b": 1.0}])
    _, listed = _calls(
        tmp_path,
        [
            ("decide", {"panels": [conflict], "journal": "j.sqlite"}),
            ("review_list", {"journal": "j.sqlite"}),
        ],
    )
    (item,) = tool_data(listed)
    args = {
        "review_id": item["review_id"],
        "decision": "1",
        "note": "ok",
        "content_sha256": item["content_sha256"],
        "journal": "j.sqlite",
        **answer,
    }
    (refused,) = _calls(tmp_path, [("review_resolve", args)])
    assert refused.is_error and tool_text(refused).startswith(
        f"Error executing tool review_resolve: {says}"
    ), tool_text(refused)


def test_two_servers_may_both_create_the_same_new_journal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each MCP client runs a server of its own: a call of one server naming a new journal
    while another server is creating it (the file made, its header not yet written) opens
    the journal, never refused as an existing empty file; a file empty for longer is
    still refused. The window is widened here so that the second call always meets it."""
    pytest.importorskip("mcp")
    import threading
    import time

    from dissensus.integrations.mcp import settings

    real = settings.open_journal
    made = threading.Event()

    def slow_to_create(target: str, **kwargs: Any) -> Any:
        if not Path(target).exists():
            Path(target).touch()
            made.set()
            time.sleep(0.3)
        return real(target, **kwargs)

    monkeypatch.setattr(settings, "open_journal", slow_to_create)
    first, second = (settings._Settings(None, None, None, root=tmp_path) for _ in range(2))
    errors: list[str] = []

    def use(server: Any) -> None:
        try:
            with server.using("new.sqlite", must_exist=False) as (store, _):
                store.close()
        except Exception as exc:
            errors.append(f"{type(exc).__name__}: {exc}")

    creating = threading.Thread(target=use, args=(first,))
    creating.start()
    assert made.wait(10)
    use(second)
    creating.join()
    assert errors == []

    old = tmp_path / "old.sqlite"
    old.touch()
    monkeypatch.setattr(settings, "NEW_JOURNAL_WAIT", 0.05)
    time.sleep(0.1)
    with (
        pytest.raises(Exception, match="an existing empty file is not a journal"),
        second.using("old.sqlite", must_exist=False),
    ):
        pass
