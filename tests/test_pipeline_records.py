"""A case record's ``state``, ``route`` and ``rule`` are typed (the State and Action
enums, the RuleId newtype) and write the same JSON the plain strings wrote."""

from __future__ import annotations

import gzip
import typing
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dissensus.errors import ConfigError
from dissensus.pipeline.policy import PIPELINE_ACTIONS
from dissensus.pipeline.records import CaseRecord, PipelineAction
from dissensus.pipeline.runtime import _compiled_rules
from dissensus.states import Action, State
from dissensus.store import event_types as ev
from dissensus.store import open_journal

FIXTURES = Path(__file__).parent / "fixtures"


class _PlainRecord(CaseRecord):
    """The record as it was typed before: plain strings."""

    state: str  # type: ignore[assignment]
    route: str  # type: ignore[assignment]
    rule: str  # type: ignore[assignment]


def _names(alias: object) -> set[str]:
    names: set[str] = set()
    for part in typing.get_args(alias):
        if isinstance(part, type) and issubclass(part, Action):
            names.update(a.value for a in part)
        else:
            names.update(typing.get_args(part) or (part,))
    return names


def test_the_record_type_names_exactly_the_actions_a_policy_may_name() -> None:
    assert _names(PipelineAction) == set(PIPELINE_ACTIONS)


_RULES = st.one_of(
    st.sampled_from(["default-CA", "default-DA", "default-CD", "default-DD", "cd-without-values"]),
    st.from_regex(r"\A[A-Za-z0-9][A-Za-z0-9_.\-]{0,12}\Z"),
)


@given(
    st.sampled_from([s.value for s in State]),
    st.sampled_from(PIPELINE_ACTIONS),
    _RULES,
    st.sampled_from(["auto", "auto_explain", "concord", "escalate", "human"]),
)
def test_typed_fields_write_the_json_plain_strings_wrote(
    state: str, route: str, rule: str, action: str
) -> None:
    data = {
        "id": "p",
        "line": 3,
        "action": action,
        "decision": "A",
        "auto": action in ("auto", "auto_explain"),
        "reason": "why",
        "state": state,
        "route": route,
        "rule": rule,
        "path": [f"read:{state}", f"route:{route}"],
    }
    record = CaseRecord.model_validate(data)
    assert record.model_dump_json() == _PlainRecord.model_validate(data).model_dump_json()
    assert CaseRecord.model_validate_json(record.model_dump_json()) == record
    assert record.route == route and record.rule == rule
    if route in {a.value for a in Action}:
        assert record.route is Action(route)
    else:
        assert type(record.route) is str


def test_a_record_refuses_an_action_the_pipeline_does_not_run() -> None:
    with pytest.raises(ValueError, match="route"):
        CaseRecord.model_validate(
            {
                "id": "p",
                "line": 1,
                "action": "escalate",
                "decision": None,
                "auto": False,
                "reason": "why",
                "state": "CD",
                "route": "shrug",
                "rule": "r",
                "path": [],
            }
        )


def test_rules_naming_an_action_the_pipeline_does_not_run_are_refused_before_a_route() -> None:
    # check_policy refuses such a policy; a spec read back from a journal is refused here.
    document = '{"rules": [{"id": "odd", "condition": "state == \\"CD\\"", "action": "shrug"}]}'
    with pytest.raises(ConfigError, match="'odd' names action 'shrug'"):
        _compiled_rules(document)
    assert {r.action for r in _compiled_rules("{}").rules} <= set(PIPELINE_ACTIONS)


def test_records_of_a_02_journal_read_with_the_same_route_and_rule(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite"
    path.write_bytes(gzip.decompress((FIXTURES / "journal-0.2.sqlite.gz").read_bytes()))
    with open_journal(str(path)) as journal:
        payloads = [event.payload for event in journal.events_of_type(ev.CASE_RECORD)]
    assert payloads
    for payload in payloads:
        dumped = CaseRecord.model_validate(payload).model_dump(mode="json")
        for key in ("state", "route", "rule", "path", "action"):
            assert dumped[key] == payload[key]
