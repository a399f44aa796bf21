"""User features at decision time: a failing one escalates its case, and they are code.

* A user feature that raises on one panel (any exception, ``SystemExit`` included) or
  returns no mapping of numbers escalates that case, its reason naming the feature and
  the exception (type and message, one line, bounded); the run's other cases are decided,
  and a resumed run gives the same records. ``KeyboardInterrupt`` goes through.
* The user features an acceptance file names (``settings.user``) are imported only when
  the deciding policy sets ``allow_code: true``: otherwise the run is refused before it
  starts, naming the file, the feature and the setting, and nothing is imported.
* A module that exits while it is imported is a configuration error, not an exit.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from cli_helpers import cli
from dissensus.errors import ConfigError
from dissensus.store.journal import Journal
from dissensus.types import Panel

REPO = Path(__file__).resolve().parent.parent
PANELS = REPO / "examples" / "llmbar-swap.jsonl"
N = 60
SPEC = "test_acceptance_user_features:knob"

KNOB: dict[str, Any] = {"raise": {}}
"""``raise``: panel id -> the exception :func:`knob` raises on that panel."""


def knob(panel: Panel) -> Any:
    """A user feature the tests steer: raises ``KNOB['raise'][panel.id]`` when set."""
    exc = KNOB["raise"].get(panel.id)
    if exc is not None:
        raise exc
    if panel.id == KNOB.get("odd"):
        return [1.0]  # not a mapping
    return {"x": len(panel.outputs[0].reasoning) / 1000}


@pytest.fixture(autouse=True)
def _reset_knob() -> Any:
    KNOB.clear()
    KNOB["raise"] = {}
    yield
    KNOB.clear()
    KNOB["raise"] = {}


def _panels() -> list[Panel]:
    return [Panel.model_validate_json(x) for x in PANELS.read_text().splitlines()[:N]]


POLICY = "reading:\n  similarity: tfidf\nseek_context:\n  followup: none\n"


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``A.json`` calibrated with the user feature :func:`knob` on the first 60 panels;
    ``code.yaml`` allows code, ``nocode.yaml`` does not."""
    from dissensus.acceptance import FeatureSettings, calibrate, save_acceptance
    from dissensus.acceptance.prepare import prepare_cases
    from dissensus.states import get_backend

    root = tmp_path_factory.mktemp("userfeat")
    panels = _panels()
    settings_ = FeatureSettings(similarity="tfidf", user=[SPEC])
    cases = prepare_cases(panels, settings=settings_, backend=get_backend("tfidf"))
    golds = [str(p.meta["gold"]) for p in panels]
    save_acceptance(
        calibrate(cases, golds, target=0.8, delta=0.2, min_accepted=10, settings=settings_),
        root / "A.json",
    )
    (root / "few.jsonl").write_text("".join(PANELS.read_text().splitlines(keepends=True)[:N]))
    (root / "code.yaml").write_text(POLICY + "allow_code: true\n")
    (root / "nocode.yaml").write_text(POLICY)
    return root


@pytest.fixture(autouse=True)
def _no_code_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DISSENSUS_ALLOW_CODE", raising=False)


def _rehashed(src: Path, dest: Path, user: list[str]) -> Path:
    """``src`` naming the user features ``user``, its sha256 recomputed."""
    from dissensus.acceptance import canonical_hash

    data = json.loads(src.read_text())
    data["settings"]["user"] = user
    data["sha256"] = canonical_hash(data)
    dest.write_text(json.dumps(data))
    return dest


def _records(out: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def _decide(workdir: Path, journal: Path, *extra: str | Path, policy: str = "code.yaml") -> Any:
    return cli(
        "decide", workdir / "few.jsonl", "--policy", workdir / policy, "--acceptance",
        workdir / "A.json", "--journal", journal, "--json", *extra,
    )  # fmt: skip


def _judged_ids(workdir: Path) -> list[str]:
    res = _decide(workdir, workdir / "base.sqlite")
    assert res.code == 0, res.err
    return [r["id"] for r in _records(res.out) if r["acceptance"] is not None]


# --- a user feature that fails on one panel ------------------------------------------


@pytest.mark.parametrize(
    ("exc", "shown"),
    [
        (KeyError("input"), "raised KeyError: 'input'"),
        (SystemExit(3), "raised SystemExit: 3"),
        (RuntimeError("long\nmessage " + "x" * 10_000), "raised RuntimeError: long message xxx"),
    ],
    ids=["KeyError", "SystemExit", "long-message"],
)
def test_a_user_feature_that_raises_escalates_its_case_and_the_run_goes_on(
    workdir: Path, tmp_path: Path, exc: BaseException, shown: str
) -> None:
    from dissensus.acceptance.prepare import ERROR_LIMIT

    base = _decide(workdir, tmp_path / "base.sqlite", "--run-id", "base")
    assert base.code == 0, base.err
    before = _records(base.out)
    target = next(r for r in before if r["acceptance"] is not None)
    KNOB["raise"][target["id"]] = exc
    res = _decide(workdir, tmp_path / "j.sqlite", "--run-id", "r")
    assert res.code == 0, res.err
    after = _records(res.out)
    assert len(after) == N
    for old, new in zip(before, after, strict=True):
        if old["id"] != target["id"]:
            assert (new["action"], new["decision"]) == (old["action"], old["decision"])
            continue
        assert new["action"] == "escalate" and not new["auto"]
        why = f"not judged by learned acceptance: user feature {SPEC} on panel {target['id']!r}: "
        assert why + shown in new["reason"]
        quoted = new["reason"].split(why, 1)[1]
        assert "\n" not in quoted and len(quoted) <= len("raised ") + ERROR_LIMIT
    # The escalation is journalled: resuming the run gives the same records.
    resumed = cli("runs", "resume", "r", "--journal", tmp_path / "j.sqlite", "--json")
    assert resumed.code == 0, resumed.err
    assert _records(resumed.out) == after


def test_a_run_interrupted_after_a_failing_feature_resumes_to_the_same_records(
    workdir: Path, tmp_path: Path
) -> None:
    """The probe's case: the run used to stop at the failing panel and stop there again
    on every resume. Now an interrupt later in the run leaves it resumable, and the
    resumed run escalates the failing case as the uninterrupted one did."""
    judged = _judged_ids(workdir)
    failing, later = judged[0], judged[-1]
    KNOB["raise"][failing] = KeyError("input")
    whole = _decide(workdir, tmp_path / "whole.sqlite", "--run-id", "w")
    assert whole.code == 0, whole.err
    KNOB["raise"][later] = KeyboardInterrupt()  # goes through: the run stops
    stopped = _decide(workdir, tmp_path / "j.sqlite", "--run-id", "r")
    assert stopped.code != 0
    with Journal(str(tmp_path / "j.sqlite")) as journal:
        assert journal.run_status("r") == "incomplete"
    del KNOB["raise"][later]
    resumed = cli("runs", "resume", "r", "--journal", tmp_path / "j.sqlite", "--json")
    assert resumed.code == 0, resumed.err
    got = {r["id"]: r for r in _records(stopped.out) + _records(resumed.out)}
    want = {r["id"]: r for r in _records(whole.out)}
    assert set(got) == set(want)
    assert {i: (r["action"], r["reason"]) for i, r in got.items()} == {
        i: (r["action"], r["reason"]) for i, r in want.items()
    }
    assert "raised KeyError: 'input'" in got[failing]["reason"]


def test_a_user_feature_that_returns_no_mapping_escalates_its_case(workdir: Path) -> None:
    from dissensus.acceptance.prepare import GuardInputs, LearnedAcceptance, acceptance_guard
    from dissensus.states import get_backend, read_panels

    backend = get_backend("tfidf")
    panel = _panels()[3]
    (reading,) = read_panels([panel], backend)
    learned = LearnedAcceptance.load(
        workdir / "A.json", similarity="tfidf", sim_backend=backend, allow_code=True
    )
    KNOB["odd"] = panel.id
    verdict, vector = learned.judge_case(
        panel, reading=reading, guard=acceptance_guard(panel, GuardInputs()), second={}
    )
    assert vector is None and not verdict.accepted
    assert f"user feature {SPEC} on panel {panel.id!r}: returned list" in verdict.reason


def test_keyboard_interrupt_in_a_user_feature_goes_through(workdir: Path) -> None:
    from dissensus.acceptance.prepare import GuardInputs, LearnedAcceptance, acceptance_guard
    from dissensus.states import get_backend, read_panels

    backend = get_backend("tfidf")
    panel = _panels()[3]
    (reading,) = read_panels([panel], backend)
    learned = LearnedAcceptance.load(
        workdir / "A.json", similarity="tfidf", sim_backend=backend, allow_code=True
    )
    KNOB["raise"][panel.id] = KeyboardInterrupt()
    with pytest.raises(KeyboardInterrupt):
        learned.judge_case(
            panel, reading=reading, guard=acceptance_guard(panel, GuardInputs()), second={}
        )


def test_calibration_stops_on_a_user_feature_that_raises(workdir: Path, tmp_path: Path) -> None:
    panel = _panels()[7].id
    KNOB["raise"][panel] = SystemExit(4)
    out = tmp_path / "A.json"
    res = cli(
        "calibrate-acceptance", workdir / "few.jsonl", "--policy", workdir / "code.yaml",
        "--feature", SPEC, "--out", out,
    )  # fmt: skip
    assert res.code == 2, res.err
    assert len(res.err.strip().splitlines()) == 1 and "Traceback" not in res.err
    assert SPEC in res.err and repr(panel) in res.err and "raised SystemExit: 4" in res.err
    assert not out.exists()


# --- an acceptance file's user features are code --------------------------------------

PLANTED = """
import pathlib
pathlib.Path({marker!r}).write_text("imported")

def feature(panel):
    return {{"x": 1.0}}
"""


@pytest.fixture
def planted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, Path]:
    """An importable module ``planted_feature_mod`` that leaves a marker when imported."""
    marker = tmp_path / "imported.txt"
    (tmp_path / "planted_feature_mod.py").write_text(PLANTED.format(marker=str(marker)))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "planted_feature_mod", raising=False)
    return "planted_feature_mod:feature", marker


def test_decide_refuses_an_acceptance_file_s_user_features_without_allow_code(
    workdir: Path, tmp_path: Path, planted: tuple[str, Path]
) -> None:
    spec, marker = planted
    acc = _rehashed(workdir / "A.json", tmp_path / "U.json", [spec])
    journal = tmp_path / "j.sqlite"
    res = cli(
        "decide", workdir / "few.jsonl", "--policy", workdir / "nocode.yaml",
        "--acceptance", acc, "--journal", journal,
    )  # fmt: skip
    assert res.code == 2, res.err
    assert len(res.err.strip().splitlines()) == 1 and "Traceback" not in res.err
    for part in (str(acc), "field 'settings.user'", repr(spec), "allow_code: true"):
        assert part in res.err, (part, res.err)
    assert not marker.exists() and "planted_feature_mod" not in sys.modules
    if journal.exists():
        with Journal(str(journal)) as jr:
            assert jr.runs() == []
    # The same file with the opt-in: imported when the run is specified, and used.
    res = cli(
        "decide", workdir / "few.jsonl", "--policy", workdir / "code.yaml",
        "--acceptance", acc, "--journal", journal, "--json",
    )  # fmt: skip
    assert res.code == 0, res.err
    assert marker.exists() and len(_records(res.out)) == N


def test_sys_exit_named_by_an_acceptance_file_is_refused_or_escalates(
    workdir: Path, tmp_path: Path
) -> None:
    """``settings.user: ["sys:exit"]``: without the opt-in a one-line refusal (it was a
    silent exit 1 leaving a run behind); with it, every judged case escalates naming
    ``SystemExit`` and the run completes."""
    acc = _rehashed(workdir / "A.json", tmp_path / "X.json", ["sys:exit"])
    refused = cli(
        "decide", workdir / "few.jsonl", "--policy", workdir / "nocode.yaml",
        "--acceptance", acc, "--journal", tmp_path / "n.sqlite",
    )  # fmt: skip
    assert refused.code == 2 and "'sys:exit'" in refused.err and "allow_code" in refused.err
    allowed = cli(
        "decide", workdir / "few.jsonl", "--policy", workdir / "code.yaml",
        "--acceptance", acc, "--journal", tmp_path / "y.sqlite", "--json",
    )  # fmt: skip
    assert allowed.code == 0, allowed.err
    records = _records(allowed.out)
    judged = [r for r in records if r["acceptance"] is not None]
    assert len(records) == N and judged
    assert all(
        "user feature sys:exit" in r["reason"] and "raised SystemExit" in r["reason"]
        for r in judged
    )


def test_the_library_refuses_user_features_without_allow_code(
    workdir: Path, tmp_path: Path, planted: tuple[str, Path]
) -> None:
    from dissensus.acceptance.prepare import LearnedAcceptance
    from dissensus.pipeline import RunSpec

    spec, marker = planted
    acc = _rehashed(workdir / "A.json", tmp_path / "U.json", [spec])
    with pytest.raises(ConfigError, match=r"field 'settings\.user'") as err:
        LearnedAcceptance.load(acc, similarity="tfidf")
    assert str(acc) in str(err.value)
    with pytest.raises(ConfigError, match="allow_code: true"):
        RunSpec.from_policy(workdir / "nocode.yaml", acceptance=acc)
    assert not marker.exists()
    assert RunSpec.from_policy(workdir / "code.yaml", acceptance=acc).acceptance is not None
    assert marker.exists()


def test_an_unloadable_user_feature_is_refused_before_the_run(
    workdir: Path, tmp_path: Path
) -> None:
    acc = _rehashed(workdir / "A.json", tmp_path / "U.json", ["this:no_such_feature"])
    journal = tmp_path / "j.sqlite"
    res = cli(
        "decide", workdir / "few.jsonl", "--policy", workdir / "code.yaml",
        "--acceptance", acc, "--journal", journal,
    )  # fmt: skip
    assert res.code == 2, res.err
    assert "user feature 'this:no_such_feature'" in res.err and "field 'settings.user'" in res.err
    if journal.exists():
        with Journal(str(journal)) as jr:
            assert jr.runs() == []


def test_a_module_that_exits_while_imported_is_a_config_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dissensus.loading import load_callable

    (tmp_path / "exits_on_import.py").write_text("import sys\nsys.exit(5)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ConfigError, match="cannot import module 'exits_on_import': SystemExit"):
        load_callable("exits_on_import:f", field="settings.user")
    assert "exits_on_import" not in sys.modules


def test_mcp_decide_refuses_user_features_without_allow_code(workdir: Path, tmp_path: Path) -> None:
    """User features import code: over MCP only from a server started with
    --allow-functions, and then only with the policy's allow_code."""
    pytest.importorskip("mcp")
    from mcp.client import Client

    from dissensus.integrations.mcp import build_server
    from mcp_helpers import tool_text

    acc = _rehashed(workdir / "A.json", tmp_path / "X.json", ["sys:exit"])
    for name, allow in (("nocode.yaml", ""), ("code.yaml", "allow_code: true\n")):
        (tmp_path / name).write_text(POLICY + allow + f"acceptance:\n  model: {acc}\n")
    panels = [p.model_dump(mode="json") for p in _panels()[:3]]

    def calls(allow_functions: bool) -> list[Any]:
        built = build_server(
            journal=str(tmp_path / "j.sqlite"), root=tmp_path, allow_functions=allow_functions
        )

        async def go() -> list[Any]:
            async with Client(built) as client:
                return [
                    await client.call_tool("decide", {"panels": panels, "policy": p})
                    for p in ("nocode.yaml", "code.yaml")
                ]

        return asyncio.run(asyncio.wait_for(go(), timeout=120))

    for gated in calls(allow_functions=False):
        text = tool_text(gated)
        assert gated.is_error and "field 'policy'" in text and "--allow-functions" in text, text
    refused, decided = calls(allow_functions=True)
    # The library refuses them without allow_code; the caller is told which file, not its content.
    assert refused.is_error and "field 'policy'" in tool_text(refused), tool_text(refused)
    assert "a file it names" in tool_text(refused) and "sys:exit" not in tool_text(refused)
    assert not decided.is_error, tool_text(decided)
    assert len(decided.structured_content["result"]) == 3
    with Journal(str(tmp_path / "j.sqlite")) as jr:
        assert len(jr.runs()) == 3  # the refused calls made none
