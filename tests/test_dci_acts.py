"""Acts, archetypes and task files as data, with validation (DCI deliverables 1, 5, 10)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dissensus.dci.acts import ACTS, ActFamily, RawAct, act_spec, check_act, parse_target
from dissensus.dci.archetypes import ARCHETYPES, archetype
from dissensus.dci.task import load_task, parse_task
from dissensus.errors import ConfigError

FAMILIES = {
    "orienting": {"frame", "clarify", "reframe"},
    "generative": {"propose", "extend", "spawn"},
    "critical": {"ask", "challenge"},
    "integrative": {"bridge", "synthesize", "recall"},
    "epistemic": {"ground", "update"},
    "decisional": {"recommend"},
}


def test_fourteen_acts_in_six_families_as_in_the_seed() -> None:
    got: dict[str, set[str]] = {}
    for spec in ACTS.values():
        got.setdefault(spec.family.value, set()).add(spec.name)
    assert got == FAMILIES
    assert len(ACTS) == 14 and len(ActFamily) == 6


def test_four_archetypes_prefer_known_acts() -> None:
    assert sorted(ARCHETYPES) == ["Challenger", "Explorer", "Framer", "Integrator"]
    for a in ARCHETYPES.values():
        assert a.preferred_acts and set(a.preferred_acts) <= set(ACTS)


def test_unknown_names_are_config_errors_naming_the_field() -> None:
    with pytest.raises(ConfigError, match="unknown act 'shout'") as e1:
        act_spec("shout", field="participants.0.preferred_acts.0")
    assert e1.value.field == "participants.0.preferred_acts.0"
    with pytest.raises(ConfigError, match="unknown archetype") as e2:
        archetype("Oracle")
    assert e2.value.field == "archetype"
    assert archetype("challenger").name == "Challenger"


KNOWN = frozenset({"a0", "a1", "o1", "o2", "t1"})


def test_valid_act_has_no_problems() -> None:
    raw = RawAct(act="challenge", target="o1", text="weak assumption", blocking=True)
    assert check_act(raw, allowed=frozenset({"challenge"}), known_targets=KNOWN) == []


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [
        (RawAct(act="shout", target="o1", text="x"), "unknown act"),
        (RawAct(act="propose", target="a0", text="x"), "not allowed in this stage"),
        (RawAct(act="challenge", target="t1", text="x"), "cannot target a tension"),
        (RawAct(act="challenge", target="o9", text="x"), "does not exist"),
        (RawAct(act="challenge", target="option 1", text="x"), "not an id"),
        (RawAct(act="challenge", target="o1", text="  "), "text must not be empty"),
        (
            RawAct(act="ask", target="o1", text="x", blocking=True),
            "only a challenge can be blocking",
        ),
    ],
)
def test_invalid_acts_are_reported_not_repaired(raw: RawAct, fragment: str) -> None:
    before = raw.model_copy()
    problems = check_act(raw, allowed=frozenset({"challenge", "ask"}), known_targets=KNOWN)
    assert any(fragment in p for p in problems)
    assert raw == before


def test_recommend_must_score_every_live_option_in_range() -> None:
    live = frozenset({"o1", "o2"})
    ok = RawAct(act="recommend", target="o1", text="x", scores={"o1": 0.9, "o2": 0.1})
    assert (
        check_act(ok, allowed=frozenset({"recommend"}), known_targets=KNOWN, live_options=live)
        == []
    )
    missing = RawAct(act="recommend", target="o1", text="x", scores={"o1": 0.9})
    assert "scores missing for o2" in check_act(
        missing, allowed=frozenset({"recommend"}), known_targets=KNOWN, live_options=live
    )
    bad = RawAct(act="recommend", target="o1", text="x", scores={"o1": 1.5, "o2": float("nan")})
    problems = check_act(
        bad, allowed=frozenset({"recommend"}), known_targets=KNOWN, live_options=live
    )
    assert any("[0, 1]" in p for p in problems)


def test_propose_needs_option_text() -> None:
    raw = RawAct(act="propose", target="a0", text="idea")
    assert any(
        "option text" in p
        for p in check_act(raw, allowed=frozenset({"propose"}), known_targets=KNOWN)
    )


@given(
    act=st.sampled_from([*ACTS, "yell", "Propose"]),
    target=st.sampled_from(["a0", "a1", "o1", "o2", "t1", "o7", "x", ""]),
    text=st.sampled_from(["", "a point"]),
    blocking=st.booleans(),
)
def test_check_act_accepts_exactly_the_grammar(
    act: str, target: str, text: str, blocking: bool
) -> None:
    raw = RawAct(
        act=act,
        target=target,
        text=text,
        blocking=blocking,
        option="opt",
        scores={"o1": 0.5, "o2": 0.5} if act == "recommend" else None,
    )
    problems = check_act(
        raw, allowed=frozenset(ACTS), known_targets=KNOWN, live_options=frozenset({"o1", "o2"})
    )
    parsed = parse_target(target)
    valid = (
        act in ACTS
        and parsed is not None
        and parsed[0] in ACTS[act].targets
        and target in KNOWN
        and bool(text.strip())
        and (not blocking or act == "challenge")
        and (act != "recommend" or target in {"o1", "o2"})
    )
    assert (problems == []) == valid


def test_task_needs_only_a_question(tmp_path: Path) -> None:
    path = tmp_path / "t.yaml"
    path.write_text("question: Which road?\n")
    task = load_task(path)
    assert task.id == "t" and task.options == () and task.dci.max_rounds == 2
    assert [p.archetype for p in task.participants] == [
        "Framer",
        "Explorer",
        "Challenger",
        "Integrator",
    ]


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"context": "no question"}, "question"),
        ({"question": "   "}, "question"),
        ({"question": "q", "dci": {"max_rounds": 0}}, "dci.max_rounds"),
        (
            {"question": "q", "participants": [{"id": "p", "archetype": "Oracle"}]},
            "participants.0.archetype",
        ),
        (
            {
                "question": "q",
                "participants": [{"id": "p", "archetype": "Framer", "preferred_acts": ["yell"]}],
            },
            "participants.0.preferred_acts.0",
        ),
        ({"question": "q", "options": [{"id": "a"}]}, "options.0.text"),
        ({"question": "q", "colour": "blue"}, "colour"),
    ],
)
def test_bad_task_files_name_the_field(data: dict[str, object], field: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_task(data, file="task.yaml")
    assert err.value.field == field
    assert "task.yaml" in str(err.value)


def test_example_tasks_cover_the_seven_task_types(repo_root: Path) -> None:
    types = {load_task(p).type for p in (repo_root / "examples" / "dci").glob("*.yaml")}
    assert types == {
        "hidden_profile",
        "late_evidence",
        "risk",
        "disagreement",
        "policy",
        "architecture",
        "routine",
    }


@pytest.mark.parametrize("module", ["acts", "archetypes", "outranking", "selection"])
def test_docstring_examples_run(module: str) -> None:
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module(f"dissensus.dci.{module}"))
    assert result.attempted > 0 and result.failed == 0
