"""What an MCP caller (an agent whose text is untrusted) cannot reach through the tools.

* a file or journal argument outside the directory the server serves (``--root``,
  symbolic links resolved) is refused naming the argument only;
* a file under it that is not a valid policy, rules file or calibration is refused
  without a key or a value of it (the CLI, whose user owns the file, still names them);
* ``decide`` imports no code a policy names unless the server allows functions.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from cli_helpers import cli
from dissensus.store import Journal
from mcp_helpers import tool_data, tool_text
from pipeline_cases import panel, write_jsonl

ROOT = Path(__file__).resolve().parents[1]
SECRET = "sk-SECRET-4242"


def _panel(pid: str = "p-conflict") -> dict[str, Any]:
    return panel(pid, ["1", "2", "1"], values=[{"a": 1.0}, {"b": 1.0}, {"a": 0.5}],
                 reasoning=["Option 1 is right."] * 3)  # fmt: skip


def _write(path: Path, data: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = data if isinstance(data, str) else yaml.safe_dump(data)
    path.write_text(text, encoding="utf-8")
    return path


def _calls(root: Path, calls: list[tuple[str, dict[str, Any]]], **server: Any) -> list[Any]:
    """Each call's result, in order, from one in-process server serving ``root``."""
    from mcp.client import Client

    from dissensus.integrations.mcp import build_server

    built = build_server(**{"journal": str(root / "j.sqlite"), "root": root, **server})

    async def go() -> list[Any]:
        async with Client(built) as client:
            return [await client.call_tool(name, args) for name, args in calls]

    return asyncio.run(asyncio.wait_for(go(), timeout=120))


def _outside(tmp: Path) -> tuple[Path, Path]:
    """A served directory, and a secret file beside it (outside it)."""
    served = tmp / "served"
    served.mkdir()
    secret = _write(tmp / "secret.yaml", {SECRET: "root:*:20228:0:99999:7::"})
    return served, secret


def _path_calls(path: str) -> list[tuple[str, dict[str, Any], str]]:
    return [
        ("decide", {"panels": [_panel()], "policy": path}, "policy"),
        ("decide", {"panels": [_panel()], "journal": path}, "journal"),
        ("route", {"panels": [_panel()], "similarity": "tfidf", "rules": path}, "rules"),
        ("vote", {"cases": [], "calibration": path}, "calibration"),
        ("runs_list", {"journal": path}, "journal"),
        ("review_list", {"journal": path}, "journal"),
    ]


def test_a_path_outside_the_served_directory_names_the_argument_only(tmp_path: Path) -> None:
    pytest.importorskip("mcp")
    served, secret = _outside(tmp_path)
    (served / "link.yaml").symlink_to(secret)  # a link inside, to a file outside
    (served / "up").symlink_to(tmp_path, target_is_directory=True)
    paths = [str(secret), "../secret.yaml", "link.yaml", "up/secret.yaml", "/etc/passwd"]
    calls = [(tool, args, field) for p in paths for tool, args, field in _path_calls(p)]
    results = _calls(served, [(tool, args) for tool, args, _ in calls])
    for (tool, _, field), result in zip(calls, results, strict=True):
        text = tool_text(result)
        assert result.is_error, (tool, field, text)
        assert f"field {field!r}: not a path under the directory the server serves" in text, text
        assert "secret" not in text and SECRET not in text and "root:" not in text, text
        assert "\n" not in text
    assert not (tmp_path / "j.sqlite").exists() and not secret.with_suffix(".sqlite").exists()
    with Journal(served / "j.sqlite") as journal:  # nothing was decided into the server's
        assert journal.runs() == []


def test_a_journal_argument_is_a_file_not_a_url(tmp_path: Path) -> None:
    pytest.importorskip("mcp")
    (bad,) = _calls(tmp_path, [("runs_list", {"journal": "postgresql://elsewhere/db"})])
    assert bad.is_error and "field 'journal'" in tool_text(bad) and "URL" in tool_text(bad)
    assert "elsewhere" not in tool_text(bad)


def test_a_journal_argument_is_never_an_empty_file_and_errors_name_it_as_given(
    tmp_path: Path,
) -> None:
    """An empty file (a package's ``__init__.py``) is not made a journal, and a file that
    is no journal is named as the caller named it, not by the server's own root."""
    pytest.importorskip("mcp")
    (tmp_path / "pkg").mkdir()
    init = tmp_path / "pkg" / "__init__.py"
    init.write_text("")
    (tmp_path / ".env").write_text("KEY=not-a-database\n" * 50)
    empty, other, missing = _calls(
        tmp_path,
        [
            ("decide", {"panels": [_panel()], "journal": "pkg/__init__.py"}),
            ("runs_list", {"journal": ".env"}),
            ("decide", {"panels": [_panel()], "journal": "nodir/j.sqlite"}),
        ],
    )
    assert empty.is_error and "empty file is not a journal" in tool_text(empty)
    assert init.read_bytes() == b""
    for result in (other, missing):
        text = tool_text(result)
        assert result.is_error and "field 'journal'" in text, text
        assert str(tmp_path) not in text and "not-a-database" not in text, text


def test_paths_inside_the_served_directory_are_served(tmp_path: Path) -> None:
    """Relative paths are taken from the served directory, absolute ones inside it too."""
    pytest.importorskip("mcp")
    policy = _write(tmp_path / "pol" / "policy.yaml", {"reading": {"similarity": "tfidf"}})
    rules = _write(tmp_path / "rules.yaml", {"rules": []})
    decided, routed, runs = _calls(
        tmp_path,
        [
            (
                "decide",
                {"panels": [_panel()], "policy": "pol/policy.yaml", "journal": "sub.sqlite"},
            ),
            ("route", {"panels": [_panel()], "similarity": "tfidf", "rules": str(rules)}),
            ("runs_list", {"journal": str(tmp_path / "sub.sqlite")}),
        ],
    )
    (record,) = tool_data(decided)
    assert record["action"] == "escalate"
    assert [r["state"] for r in tool_data(routed)] == ["CD"]
    assert len(tool_data(runs)) == 1
    with Journal(tmp_path / "sub.sqlite") as journal:
        (run,) = journal.runs()
        (started,) = journal.events(run.run_id, type="run.started")
        assert started.payload["policy_file"] == str(policy)


def test_the_served_directory_must_exist(tmp_path: Path) -> None:
    from dissensus.errors import ConfigError
    from dissensus.integrations.mcp import build_server

    pytest.importorskip("mcp")
    with pytest.raises(ConfigError, match="field '--root'"):
        build_server(root=tmp_path / "missing")
    out = cli("mcp", "--root", str(tmp_path / "missing"))
    assert out.code == 2 and "--root" in out.err


def _invalid_files(root: Path) -> list[tuple[str, dict[str, Any], str]]:
    """(tool, arguments, what the error may name) for files under ``root`` that are not
    what the argument takes, each holding the secret as a key or a value."""
    env = _write(root / ".env", f"OPENAI_API_KEY={SECRET}\nOTHER=x\n")
    key = _write(root / "key.yaml", {"OPENAI_API_KEY": SECRET, SECRET: 1})
    sim = _write(root / "sim.yaml", {"reading": {"similarity": SECRET}})
    acc = _write(root / "acc.yaml", {"acceptance": {"model": SECRET}})
    theta = _write(root / "theta.yaml", {"reading": {"theta_s": SECRET}})
    nested = _write(root / "nested.yaml", {"reading": {SECRET: 1}})
    options = _write(root / "options.yaml", {"guard": {"options": {SECRET: 1}}})
    cal = _write(root / "cal.json", json.dumps({"api_key": SECRET, "cases": SECRET}))
    rules = _write(root / "rules.yaml", {"rules": [{"id": SECRET, "when": SECRET}]})
    bad_yaml = _write(root / "bad.yaml", f"a: [{SECRET}\n")
    decide = [
        (env, "not a valid policy"),
        (key, "not a valid policy (an unknown field)"),
        (sim, "not a valid policy (field 'reading.similarity')"),
        (acc, "not a valid policy (field 'acceptance.model')"),
        (theta, "not a valid policy (field 'reading.theta_s')"),
        (nested, "not a valid policy (an unknown field)"),
        (options, "not a valid policy (field 'guard.options')"),
        (bad_yaml, "not a valid policy"),
    ]
    calls = [
        ("decide", {"panels": [_panel()], "policy": f.name}, f"field 'policy': {why}")
        for f, why in decide
    ]
    calls += [
        (
            "vote",
            {"cases": [], "calibration": f.name},
            "field 'calibration': not a valid calibration",
        )
        for f in (env, key, cal)
    ]
    calls += [
        ("route", {"panels": [_panel()], "similarity": "tfidf", "rules": f.name},
         "field 'rules': not a valid rules file")
        for f in (env, key, sim, rules, bad_yaml)
    ]  # fmt: skip
    return calls


def test_a_file_that_is_not_valid_is_refused_without_its_content(tmp_path: Path) -> None:
    pytest.importorskip("mcp")
    calls = _invalid_files(tmp_path)
    results = _calls(tmp_path, [(tool, args) for tool, args, _ in calls])
    for (tool, args, expected), result in zip(calls, results, strict=True):
        text = tool_text(result)
        assert result.is_error and expected in text, (tool, args, text)
        assert SECRET not in text and "OPENAI" not in text and "api_key" not in text, text
        assert "\n" not in text
    named = {
        args.get("calibration"): tool_text(r)
        for (_, args, _), r in zip(calls, results, strict=True)
    }
    # the schema's fields only, then how many more (the file's own key among them)
    assert "(field 'cases'; field 'labels'; " in named["cal.json"] and "more)" in named["cal.json"]


def test_the_cli_still_names_the_field_of_its_users_file(tmp_path: Path) -> None:
    """The local user owns the file: the CLI's message is unchanged."""
    key = _write(tmp_path / "key.yaml", {"OPENAI_API_KEY": SECRET})
    panels = write_jsonl(tmp_path / "p.jsonl", [_panel()])
    out = cli("decide", panels, "--policy", key, "--journal", tmp_path / "j.sqlite")
    assert out.code == 2 and "field 'OPENAI_API_KEY'" in out.err


def _code_module(root: Path) -> tuple[str, Path]:
    """A module under ``root`` whose similarity function leaves a marker when it runs."""
    name = f"probe_sim_{uuid.uuid4().hex[:8]}"
    marker = root / f"{name}.ran"
    _write(
        root / f"{name}.py",
        "import pathlib\n"
        f"pathlib.Path({str(marker)!r}).write_text('ran')\n"
        "def sim(texts):\n"
        "    import numpy as np\n"
        "    return np.eye(len(texts))\n",
    )
    return name, marker


def test_decide_imports_no_policy_code_unless_the_server_allows_functions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("mcp")
    name, marker = _code_module(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))  # where `python -m` would find it: the cwd
    code = {"reading": {"similarity": f"{name}:sim", "theta_s": 0.3}, "allow_code": True}
    _write(tmp_path / "code.yaml", code)
    _write(tmp_path / "allow.yaml", {"allow_code": True})
    _write(tmp_path / "env.yaml", {"reading": {"similarity": f"{name}:sim"}})
    monkeypatch.setenv("DISSENSUS_ALLOW_CODE", "1")  # the library would allow env.yaml's
    calls = [
        ("decide", {"panels": [_panel()], "policy": p})
        for p in ("code.yaml", "allow.yaml", "env.yaml")
    ]
    results = _calls(tmp_path, calls)
    for result, setting in zip(
        results, ("allow_code", "allow_code", "reading.similarity"), strict=True
    ):
        text = tool_text(result)
        assert result.is_error and "field 'policy'" in text and f"{setting!r}" in text, text
        assert "--allow-functions" in text, text
    # The server's own policy alike: one code gate at the MCP door, met when the server
    # is built, before any client connects.
    from dissensus.errors import ConfigError
    from dissensus.integrations.mcp import build_server

    with pytest.raises(ConfigError, match="--allow-functions"):
        build_server(journal=str(tmp_path / "j.sqlite"), policy=str(tmp_path / "code.yaml"))
    assert not marker.exists(), "the policy's code ran"
    with Journal(tmp_path / "j.sqlite") as journal:
        assert journal.runs() == []

    (decided,) = _calls(tmp_path, calls[:1], allow_functions=True)
    (record,) = tool_data(decided)
    assert record["id"] == "p-conflict" and marker.exists()


async def _stdio(cwd: Path, root: Path, policy: str) -> tuple[Any, Any]:
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]),
    }
    args = ["-m", "dissensus", "mcp", "--root", str(root), "--journal", str(root / "j.sqlite")]
    params = StdioServerParameters(command=sys.executable, args=args, env=env, cwd=str(cwd))
    async with stdio_client(params) as (read, write), ClientSession(read, write) as s:
        await s.initialize()
        panels = [_panel()]
        inside = await s.call_tool("decide", {"panels": panels, "policy": policy})
        outside = await s.call_tool("decide", {"panels": panels, "policy": f"../{policy}"})
        return inside, outside


def test_dissensus_mcp_serves_the_root_it_is_given(tmp_path: Path) -> None:
    """``dissensus mcp --root DIR`` from another working directory: relative paths are
    DIR's, and the working directory's files are outside."""
    pytest.importorskip("mcp")
    root, cwd = tmp_path / "root", tmp_path / "cwd"
    _write(root / "policy.yaml", {"reading": {"similarity": "tfidf", "theta_s": 0.3}})
    _write(tmp_path / "policy.yaml", {"reading": {"similarity": "tfidf"}})
    cwd.mkdir()
    inside, outside = asyncio.run(asyncio.wait_for(_stdio(cwd, root, "policy.yaml"), timeout=120))
    (record,) = tool_data(inside)
    assert record["action"] == "escalate"
    assert outside.is_error and "field 'policy': not a path under" in tool_text(outside)


def test_a_policy_or_rules_argument_naming_no_regular_file_says_what_is_there(
    tmp_path: Path,
) -> None:
    """A directory or a named pipe under the served directory is there, but no file to
    read: the error says so, naming the argument, not ``no such file``."""
    pytest.importorskip("mcp")
    (tmp_path / "policies").mkdir()
    os.mkfifo(tmp_path / "pipe.yaml")
    folder, pipe, rules, missing = _calls(
        tmp_path,
        [
            ("decide", {"panels": [_panel()], "policy": "policies"}),
            ("decide", {"panels": [_panel()], "policy": "pipe.yaml"}),
            ("route", {"panels": [_panel()], "similarity": "tfidf", "rules": "pipe.yaml"}),
            ("decide", {"panels": [_panel()], "policy": "gone.yaml"}),
        ],
    )
    assert folder.is_error and "field 'policy': not a regular file (a directory)" in tool_text(
        folder
    )
    assert pipe.is_error and "field 'policy': not a regular file (a named pipe)" in tool_text(pipe)
    assert rules.is_error and "field 'rules': not a regular file (a named pipe)" in tool_text(rules)
    assert missing.is_error and "no such file under the directory" in tool_text(missing)
