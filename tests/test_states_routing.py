"""Defeasible routing and its condition language."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dissensus.errors import ConfigError
from dissensus.states import Reading, RuleSet, State, Thresholds, read_from_matrix, route
from dissensus.states.conditions import parse_condition
from dissensus.states.exclusive import exclusive
from dissensus.types import Panel


def reading_in(state: State, *, decision: str = "x", tie: bool = False) -> Reading:
    agree = state.agreement
    labels = ["x", "x", "x"] if agree else (["x", "y", "z", "x"] if not tie else ["x", "y"])
    p = Panel.model_validate(
        {
            "id": "c",
            "outputs": [
                {"agent": f"a{i}", "decision": d, "reasoning": f"r{i}"}
                for i, d in enumerate(labels)
            ],
        }
    )
    n = len(labels)
    value = 0.9 if state.convergent else 0.1
    matrix = [[1.0 if i == j else value for j in range(n)] for i in range(n)]
    r = read_from_matrix(p, matrix, "m", Thresholds(theta_s=0.5, theta_a=0.8))
    assert r.state is state
    return r


@pytest.mark.parametrize(
    ("state", "action"),
    [
        (State.CONVERGENT_AGREEMENT, "auto"),
        (State.DIVERGENT_AGREEMENT, "auto_explain"),
        (State.DIVERGENT_DISAGREEMENT, "seek_context"),
        (State.CONVERGENT_DISAGREEMENT, "escalate"),
    ],
)
def test_defaults(state: State, action: str) -> None:
    r = route(reading_in(state), {})
    assert r.action == action
    assert r.rule == f"default-{state.value}"
    assert r.defeated == []


RULES = {
    "rules": [
        {
            "id": "legal",
            "condition": 'meta.category == "legal"',
            "action": "escalate",
            "priority": 5,
        },
        {
            "id": "risky-da",
            "condition": 'meta.risk == "high" and state == "DA"',
            "action": "escalate",
        },
        {
            "id": "trusted",
            "condition": "meta.trusted",
            "action": "auto",
            "defeats": ["legal", "risky-da"],
        },
    ]
}


def test_domain_rule_defeats_default() -> None:
    rs = RuleSet.from_dict(RULES)
    r = rs.route(reading_in(State.CONVERGENT_AGREEMENT), {"category": "legal"})
    assert (r.action, r.rule, r.defeated) == ("escalate", "legal", ["default-CA"])
    r = rs.route(reading_in(State.DIVERGENT_AGREEMENT), {"risk": "high"})
    assert (r.action, r.rule, r.defeated) == ("escalate", "risky-da", ["default-DA"])
    r = rs.route(reading_in(State.DIVERGENT_AGREEMENT), {"risk": "low"})
    assert r.rule == "default-DA"


def test_explicit_superiority_beats_priority() -> None:
    rs = RuleSet.from_dict(RULES)
    r = rs.route(reading_in(State.CONVERGENT_DISAGREEMENT), {"category": "legal", "trusted": True})
    assert (r.action, r.rule) == ("auto", "trusted")
    assert r.defeated == ["legal", "default-CD"]


def test_top_level_superiority_and_default_actions() -> None:
    rs = RuleSet.from_dict(
        {
            "defaults": {"CD": "concord"},
            "rules": [
                {"id": "a", "condition": "agreement >= 0.5", "action": "auto", "priority": 0},
            ],
            "superiority": [
                ["a", "default-CA"],
                ["a", "default-DA"],
                ["default-CD", "a"],
                ["default-DD", "a"],
            ],
        }
    )
    assert rs.route(reading_in(State.CONVERGENT_DISAGREEMENT), {}).action == "concord"
    r = rs.route(reading_in(State.DIVERGENT_AGREEMENT), {})
    assert (r.rule, r.defeated) == ("a", ["default-DA"])


def test_concurring_rules_are_reported() -> None:
    rs = RuleSet.from_dict(
        {
            "rules": [
                {"id": "one", "condition": "meta.x == 1", "action": "escalate"},
                {"id": "two", "condition": "meta.y == 2", "action": "escalate"},
            ]
        }
    )
    r = rs.route(reading_in(State.CONVERGENT_AGREEMENT), {"x": 1, "y": 2})
    assert (r.action, r.rule, r.concurring, r.defeated) == (
        "escalate",
        "one",
        ["two"],
        ["default-CA"],
    )


def test_equal_priority_conflict_rejected_at_load() -> None:
    with pytest.raises(ConfigError, match=r"'a'.*'b'"):
        RuleSet.from_dict(
            {
                "rules": [
                    {"id": "a", "condition": 'meta.category == "legal"', "action": "escalate"},
                    {"id": "b", "condition": 'meta.risk == "low"', "action": "auto"},
                ]
            }
        )


def test_equal_priority_exclusive_conditions_accepted() -> None:
    rs = RuleSet.from_dict(
        {
            "rules": [
                {"id": "a", "condition": 'meta.category == "legal"', "action": "escalate"},
                {
                    "id": "b",
                    "condition": 'meta.category == "sports" and state == "CA"',
                    "action": "auto",
                },
                {
                    "id": "c",
                    "condition": 'meta.category in ["news", "health"]',
                    "action": "seek_context",
                },
                {"id": "d", "condition": "agreement < 0.5", "action": "deliberate", "priority": 2},
                {
                    "id": "e",
                    "condition": "agreement >= 0.5",
                    "action": "auto_explain",
                    "priority": 2,
                },
            ]
        }
    )
    r = rs.route(reading_in(State.CONVERGENT_AGREEMENT), {"category": "sports"})
    assert r.action == "auto_explain"


def test_conflict_with_a_default_rejected() -> None:
    with pytest.raises(ConfigError, match="default-CA"):
        RuleSet.from_dict(
            {
                "rules": [
                    {"id": "x", "condition": "meta.urgent", "action": "escalate", "priority": 0}
                ]
            }
        )


def test_superiority_resolves_conflict() -> None:
    rs = RuleSet.from_dict(
        {
            "rules": [
                {"id": "a", "condition": 'meta.category == "legal"', "action": "escalate"},
                {"id": "b", "condition": 'meta.risk == "low"', "action": "auto"},
            ],
            "superiority": [["b", "a"]],
        }
    )
    r = rs.route(reading_in(State.DIVERGENT_DISAGREEMENT), {"category": "legal", "risk": "low"})
    assert (r.rule, r.defeated) == ("b", ["a", "default-DD"])


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"rules": [{"id": "a", "condition": "x ==", "action": "auto"}]}, "syntax"),
        (
            {
                "rules": [
                    {"id": "a", "condition": "__import__('os').system('true')", "action": "auto"}
                ]
            },
            "not allowed",
        ),
        ({"rules": [{"id": "a", "condition": "unknown == 1", "action": "auto"}]}, "unknown name"),
        ({"rules": [{"id": "a", "condition": "state.__class__", "action": "auto"}]}, "only meta"),
        ({"rules": [{"id": "a", "condition": "(lambda: 1)()", "action": "auto"}]}, "not allowed"),
        ({"rules": [{"id": "a", "condition": "meta.x == 1", "action": "Bad Action"}]}, "action"),
        (
            {"rules": [{"id": "a", "condition": "meta.x == 1", "action": "auto", "extra": 1}]},
            "extra",
        ),
        (
            {
                "rules": [
                    {"id": "a", "condition": "meta.x == 1", "action": "auto", "defeats": ["zz"]}
                ]
            },
            "unknown rule",
        ),
        (
            {"rules": [{"id": "default-CA", "condition": "meta.x == 1", "action": "auto"}]},
            "duplicate",
        ),
        (
            {
                "rules": [
                    {"id": "a", "condition": "meta.x == 1", "action": "auto", "defeats": ["b"]},
                    {"id": "b", "condition": "meta.y == 1", "action": "auto", "defeats": ["a"]},
                ]
            },
            "each declared superior",
        ),
        (
            {
                "rules": [
                    {"id": "a", "condition": "meta.x == 1", "action": "auto", "defeats": ["b"]},
                    {"id": "b", "condition": "meta.y == 1", "action": "auto", "defeats": ["c"]},
                    {"id": "c", "condition": "meta.z == 1", "action": "auto", "priority": 3},
                ]
            },
            "cycle",
        ),
        (["not", "a", "mapping"], "mapping"),
    ],
)
def test_bad_rules_rejected(data: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        RuleSet.from_dict(data)


def test_load_yaml_and_errors(tmp_path: Path) -> None:
    good = tmp_path / "rules.yaml"
    good.write_text(
        "rules:\n  - id: legal\n    condition: meta.category == 'legal'\n    action: escalate\n"
    )
    rs = RuleSet.load(good)
    assert rs.route(reading_in(State.CONVERGENT_AGREEMENT), {"category": "legal"}).rule == "legal"
    bad = tmp_path / "bad.yaml"
    bad.write_text("rules: [\n")
    with pytest.raises(ConfigError, match="invalid YAML"):
        RuleSet.load(bad)
    with pytest.raises(ConfigError, match="cannot read"):
        RuleSet.load(tmp_path / "missing.yaml")


# --- the condition language -------------------------------------------------------------

ENV: dict[str, Any] = {
    "state": "DA",
    "agreement": 0.75,
    "reasoning_similarity": 0.4,
    "min_similarity": 0.1,
    "decision": "keep",
    "tie": [],
    "meta": {
        "category": "legal",
        "risk": "high",
        "n": 3,
        "tags": ["a", "b"],
        "nested": {"k": "v"},
        "a b": 1,
    },
}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('meta.category == "legal"', True),
        ('meta.risk == "high" and state == "DA"', True),
        ('meta.risk == "high" and state == "CA"', False),
        ('state in ["CD", "DD"] or agreement < 0.8', True),
        ("not tie", True),
        ("tie", False),
        ('"a" in meta.tags', True),
        ('"c" not in meta.tags', True),
        ("0.5 <= agreement < 0.8", True),
        ("0.8 <= agreement", False),
        ("meta.missing == null", True),
        ('meta.missing != "x"', True),
        ("meta.missing > 1", False),
        ("meta.category > 1", False),
        ("meta.n >= 3", True),
        ("meta.n > -1", True),
        ('meta.nested.k == "v"', True),
        ('meta["a b"] == 1', True),
        ("true", True),
        ("false or decision == 'keep'", True),
    ],
)
def test_condition_semantics(text: str, expected: bool) -> None:
    assert parse_condition(text).holds(ENV) is expected


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ('state == "CA"', 'state == "DA"', True),
        ('state == "CA"', 'state in ["DA", "CD"]', True),
        ('state == "CA"', 'state in ["CA", "CD"]', False),
        ("meta.x == 1", "meta.x != 1", True),
        ("meta.x in [1, 2]", "meta.x not in [1, 2, 3]", True),
        ('meta.x == "a"', 'meta.y == "b"', False),
        ("agreement < 0.5", "agreement >= 0.5", True),
        ("agreement < 0.5", "agreement > 0.4", False),
        ("agreement <= 0.5", "agreement >= 0.5", False),
        ('meta.r == "high" and state == "DA"', 'state == "CA"', True),
        ('state == "CA" or state == "DA"', 'state == "CD"', True),
        ('state == "CA" or meta.x == 1', 'state == "CD"', False),
        ("meta.flag", "not meta.flag", True),
        ("meta.x == 5", "meta.x < 3", True),
        ("false", "meta.x == 1", True),
        ("meta.x == 1", "meta.x == 1", False),
        ("meta.x == true", "meta.x > 0.5", False),
        ("meta.x in [false]", "meta.x < 0.5", False),
        ("meta.x == true", "meta.x > 1", True),
    ],
)
def test_exclusivity(a: str, b: str, expected: bool) -> None:
    ca, cb = parse_condition(a), parse_condition(b)
    assert exclusive(ca, cb) is expected
    assert exclusive(cb, ca) is expected


VALUES = st.sampled_from([None, 0, 1, 2, 0.5, "a", "b", "legal"])


@given(
    st.sampled_from(["==", "!=", "<", "<=", ">", ">="]),
    VALUES,
    st.sampled_from(["==", "!=", "<", "<=", ">", ">="]),
    VALUES,
    VALUES,
)
def test_exclusive_is_sound(op1: str, c1: object, op2: str, c2: object, value: object) -> None:
    """Whenever exclusivity is claimed, no value satisfies both conditions."""
    a = parse_condition(f"meta.x {op1} {c1!r}".replace("None", "null"))
    b = parse_condition(f"meta.x {op2} {c2!r}".replace("None", "null"))
    if exclusive(a, b):
        env = {"meta": {"x": value}}
        assert not (a.holds(env) and b.holds(env))


_LITERALS = [None, True, False, 0, 1, 2, 0.5, 1.0, "a", "b"]
"""Literals of every kind, booleans among them: ``1 == true`` in the language."""


def _literal(value: object) -> str:
    return (
        "null"
        if value is None
        else "true"
        if value is True
        else "false"
        if value is False
        else repr(value)
    )


_OPS = ["==", "!=", "<", "<=", ">", ">=", "in", "not in"]


@settings(max_examples=400)
@given(
    st.sampled_from(_OPS),
    st.lists(st.sampled_from(_LITERALS), min_size=1, max_size=3),
    st.sampled_from(_OPS),
    st.lists(st.sampled_from(_LITERALS), min_size=1, max_size=3),
)
def test_exclusive_is_sound_over_booleans_and_lists(
    op1: str, c1: list[object], op2: str, c2: list[object]
) -> None:
    """Exclusivity is never claimed for two atoms one case value satisfies both of
    (every literal tried as the value): ``meta.x == true`` and ``meta.x > 0.5`` both
    hold for ``meta.x`` = 1."""

    def atom(op: str, constants: list[object]) -> str:
        if op in ("in", "not in"):
            return f"meta.x {op} [{', '.join(map(_literal, constants))}]"
        return f"meta.x {op} {_literal(constants[0])}"

    a, b = parse_condition(atom(op1, c1)), parse_condition(atom(op2, c2))
    if exclusive(a, b):
        for value in _LITERALS:
            env = {"meta": {"x": value}}
            assert not (a.holds(env) and b.holds(env)), (a, b, value)


def test_a_boolean_equality_and_a_number_range_are_not_exclusive() -> None:
    rules = {
        "rules": [
            {"id": "flagged", "condition": "meta.flag == true", "action": "escalate"},
            {"id": "scored", "condition": "meta.flag > 0.5", "action": "auto"},
        ]
    }
    with pytest.raises(ConfigError, match=r"'flagged' .* and 'scored' .* can both hold"):
        RuleSet.from_dict(rules)


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("meta.score < 1", "not (meta.score < true)"),
        ("meta.score >= 0", "not (meta.score >= false)"),
    ],
)
def test_a_negated_boolean_order_is_not_the_negation_of_a_number_order(
    first: str, second: str
) -> None:
    """``x < true`` never holds (a number is never ordered against a boolean), so
    ``not (x < true)`` always does: it is not the negation of ``x < 1``, though
    ``true == 1``, and the pair can both hold; refused at load, not a conflict mid-run."""
    rules = {
        "rules": [
            {"id": "low", "condition": first, "action": "escalate"},
            {"id": "notlow", "condition": second, "action": "auto"},
        ]
    }
    with pytest.raises(ConfigError, match=r"'low' .* and 'notlow' .* can both hold"):
        RuleSet.from_dict(rules)
    same = {
        "rules": [
            {"id": "low", "condition": "meta.score < 1", "action": "escalate"},
            {"id": "notlow", "condition": "not (meta.score < 1.0)", "action": "auto"},
        ]
    }
    RuleSet.from_dict(same)  # 1 and 1.0 are the same bound: exclusive as before


# --- determinism ------------------------------------------------------------------------

CONDITIONS = [
    'meta.category == "legal"',
    'meta.category == "news"',
    'meta.risk == "high"',
    'meta.risk == "high" and state == "DA"',
    "agreement < 0.5",
    "agreement >= 0.5",
    'state in ["CD", "DD"]',
    "tie",
]
ACTIONS = ["auto", "escalate", "seek_context"]
rule_specs = st.lists(
    st.tuples(st.sampled_from(CONDITIONS), st.sampled_from(ACTIONS), st.integers(0, 3)),
    min_size=0,
    max_size=5,
)
metas = st.fixed_dictionaries(
    {
        "category": st.sampled_from(["legal", "news", "sports"]),
        "risk": st.sampled_from(["high", "low"]),
    }
)


@given(rule_specs, metas, st.sampled_from(list(State)), st.randoms(use_true_random=False))
def test_routing_deterministic_and_independent_of_rule_order(
    specs: list[tuple[str, str, int]], meta: dict[str, str], state: State, rnd: Any
) -> None:
    rules = [
        {"id": f"r{i}", "condition": c, "action": a, "priority": p}
        for i, (c, a, p) in enumerate(specs)
    ]
    shuffled = list(rules)
    rnd.shuffle(shuffled)
    try:
        rs1 = RuleSet.from_dict({"rules": rules})
    except ConfigError:
        with pytest.raises(ConfigError):
            RuleSet.from_dict({"rules": shuffled})
        return
    rs2 = RuleSet.from_dict({"rules": shuffled})
    reading = reading_in(state)
    first = rs1.route(reading, meta)
    assert rs1.route(reading, meta) == first
    assert RuleSet.from_dict({"rules": rules}).route(reading, meta) == first
    second = rs2.route(reading, meta)
    assert second.action == first.action
    assert sorted([second.rule, *second.concurring]) == sorted([first.rule, *first.concurring])


# -- built-in rules ---------------------------------------------------------------------


def test_builtin_cd_without_values_is_a_named_rule() -> None:
    rs = RuleSet.from_dict({"builtins": ["cd-without-values"]})
    cd = reading_in(State.CONVERGENT_DISAGREEMENT)
    r = rs.route(cd, {}, value_profiles=0)
    assert (r.action, r.rule, r.defeated) == ("seek_context", "cd-without-values", ["default-CD"])
    # Agents that state values: a value conflict, the default stands.
    assert rs.route(cd, {}, value_profiles=2).rule == "default-CD"
    # Unknown (no fact given, as in `dissensus route`): the built-in never applies.
    assert rs.route(cd, {}).rule == "default-CD"
    # Other states are untouched.
    assert (
        rs.route(reading_in(State.DIVERGENT_DISAGREEMENT), {}, value_profiles=0).rule
        == "default-DD"
    )


def test_a_domain_rule_routing_cd_beats_the_builtin() -> None:
    rs = RuleSet.from_dict(
        {
            "builtins": ["cd-without-values"],
            "rules": [{"id": "cd-human", "condition": 'state == "CD"', "action": "escalate"}],
        }
    )
    r = rs.route(reading_in(State.CONVERGENT_DISAGREEMENT), {}, value_profiles=0)
    assert (r.action, r.rule) == ("escalate", "cd-human")
    assert "cd-without-values" in r.defeated


def test_unknown_builtin_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="unknown built-in rule 'nope'") as info:
        RuleSet.from_dict({"builtins": ["nope"]})
    assert info.value.field == "builtins.0"


# --- deep nesting is refused, never a RecursionError ------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "not " * 990 + "true",
        "agreement < " + "-" * 1500 + "1",
        "-" * 3990 + "1",
        "not " * 101 + "true",
        " or ".join(["(agreement < 0.5"] * 101) + ")" * 101,
    ],
)
def test_deep_unary_chains_are_a_config_error(tmp_path: Path, text: str) -> None:
    path = tmp_path / "rules.yaml"
    path.write_text(f"rules:\n  - id: x\n    condition: {text}\n    action: auto\n")
    with pytest.raises(ConfigError, match="nested more than 100 levels") as info:
        RuleSet.load(path)
    assert info.value.field == "rules.0.condition"
    assert str(path) in str(info.value) or path.name in str(info.value)


def test_moderate_nesting_still_parses() -> None:
    assert parse_condition("not " * 90 + "true").holds(ENV) is True
    assert parse_condition("agreement > " + "- " * 91 + "1").holds(ENV) is True


def test_route_with_a_deep_condition_is_one_line_exit_2(tmp_path: Path) -> None:
    from cli_helpers import cli

    panel = Path(__file__).parent.parent / "examples" / "llmbar-cot.jsonl"
    cases = tmp_path / "t.jsonl"
    cases.write_text(panel.read_text().splitlines()[0] + "\n")
    rules = tmp_path / "nd.yaml"
    rules.write_text(
        "rules:\n  - id: x\n    condition: " + "not " * 990 + "true\n    action: auto\n"
    )
    r = cli("route", cases, "--similarity", "tfidf", "--rules", rules)
    assert r.code == 2, r.err
    assert "Traceback" not in r.err and "RecursionError" not in r.err
    assert len(r.err.strip().splitlines()) == 1
    assert "rules.0.condition" in r.err and "nd.yaml" in r.err


_JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=3),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=6,
)


@settings(derandomize=True, max_examples=200, deadline=None)
@given(a=_JSON_VALUES, m=_JSON_VALUES)
def test_in_over_case_metadata_never_raises(a: object, m: object) -> None:
    """``x in meta.m`` is a test over the caller's data: a list or an object tested
    against an object's keys (no key is one) is false, never a TypeError out of
    routing (``dissensus route`` printed a traceback on such a panel)."""
    rs = RuleSet.from_dict(
        {
            "rules": [
                {
                    "id": "a-in",
                    "condition": "meta.a in meta.m",
                    "action": "escalate",
                    "priority": 9,
                },
                {
                    "id": "tie-in",
                    "condition": "tie not in meta.m",
                    "action": "escalate",
                    "priority": 9,
                },
            ]
        }
    )
    r = rs.route(reading_in(State.CONVERGENT_AGREEMENT), {"a": a, "m": m})
    if isinstance(m, dict) and isinstance(a, list | dict):
        assert r.rule == "tie-in"  # the list `tie` is no key: `not in` holds
    assert parse_condition("meta.a in meta.m").holds({"meta": {"a": a, "m": m}}) in (True, False)
    assert parse_condition("meta.a in meta.m").holds({"meta": {"a": [1], "m": {"x": 1}}}) is False


@pytest.mark.parametrize(
    ("text", "write"),
    [
        ("decision == 1", '"1"'),
        ("decision != 2.0", '"2"'),
        ('decision in ["1", 2]', '"2"'),
        ("1 == decision", '"1"'),
        ("1 in tie", '"1"'),
        ("state == true", '"true"'),
        ("agreement >= 0.8 and decision == 1", '"1"'),
    ],
)
def test_a_number_compared_with_a_label_is_refused_naming_the_string(
    text: str, write: str, tmp_path: Path
) -> None:
    """Decisions are labels, read as text (a decision 1 is "1"), so `decision == 1` never
    held: on the LLMBar panels (decisions "1" and "2") such a rule never fired, with
    nothing said. It is now refused at load, naming the file, the field and the string."""
    with pytest.raises(ConfigError, match=f"write {write}, not"):
        parse_condition(text)
    rules = tmp_path / "rules.yaml"
    rules.write_text(
        f"rules:\n  - id: r\n    condition: '{text}'\n    action: escalate\n    priority: 10\n"
    )
    with pytest.raises(ConfigError, match=r"rules\.yaml.*rules\.0\.condition"):
        RuleSet.load(rules)
    # The same tests written with strings, and numbers against numbers, are conditions.
    fixed = text.replace("2.0", '"2"').replace("2]", '"2"]').replace("true", '"true"')
    fixed = fixed.replace("== 1", '== "1"').replace("1 ==", '"1" ==').replace("1 in", '"1" in')
    parse_condition(fixed)
    parse_condition("agreement == 1 and agents in [3, 5] and abstentions != 0")
