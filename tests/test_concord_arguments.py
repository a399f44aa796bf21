"""The Python API of CONCORD refuses arguments of the wrong kind before any agent is
called: a ``ConfigError`` naming the argument, never every agent faulting on a view it
cannot be shown, an internal error, or a run that fails to record."""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

import pytest

from concord_helpers import IDEAL, REJECTED, HashAgent
from dissensus.baselines.compare import compare_rules
from dissensus.concord import Negotiation, Outcome, TableAgent, negotiate, negotiate_sync
from dissensus.errors import ConfigError

OPTIONS = [Outcome(id="o0", text="option zero")]


def _agents() -> list[HashAgent]:
    return [HashAgent("a0", 1), HashAgent("a1", 2)]


class _Odd(HashAgent):
    """A hash agent whose id is not a string."""

    def __init__(self, odd_id: object) -> None:
        super().__init__("odd", 3)
        self._odd_id = odd_id

    @property
    def id(self) -> Any:
        return self._odd_id


BAD: dict[str, tuple[dict[str, Any], str, str]] = {
    # name: (arguments over the good ones, field, message part)
    "rejected str": ({"rejected": "R0"}, "rejected", "expected an Outcome, got str"),
    "rejected None": ({"rejected": None}, "rejected", "expected an Outcome, got NoneType"),
    "rejected dict": ({"rejected": {"id": "R0", "text": "r"}}, "rejected", "got dict"),
    "ideal str": ({"ideal": "I0"}, "ideal", "expected an Outcome, got str"),
    "ideal is rejected": ({"ideal": REJECTED}, "ideal", "the two anchors must differ"),
    "anchors share an id": (
        {"ideal": Outcome(id="R0", text="other text")},
        "ideal",
        "the two anchors must differ",
    ),
    "floor str": ({"floor": "0.5"}, "floor", "floor must be a number, got str"),
    "floor None": ({"floor": None}, "floor", "floor must be a number, got NoneType"),
    "floor bool": ({"floor": True}, "floor", "floor must be a number, got bool"),
    "margin str": ({"margin": "0.1"}, "margin", "margin must be a number, got str"),
    "deadline str": ({"deadline_s": "5"}, "deadline_s", "deadline_s must be a number"),
    "rounds str": ({"rounds": "3"}, "rounds", "rounds must be an integer, got str"),
    "rounds float": ({"rounds": 2.5}, "rounds", "rounds must be an integer, got float"),
    "rounds whole float": ({"rounds": 2.0}, "rounds", "got float"),
    "floor huge int": ({"floor": 10**400}, "floor", "floor must lie in [0, 1]"),
    "margin huge int": ({"margin": -(10**400)}, "margin", "margin must lie in [0, 1]"),
    "deadline huge int": ({"deadline_s": 10**400}, "deadline_s", "finite number >= 0"),
    "rounds None": ({"rounds": None}, "rounds", "got NoneType"),
    "agents None": ({"agents": None}, "agents", "expected a sequence of agents"),
    "agents str": ({"agents": "a0a1"}, "agents", "got str"),
    "agents dicts": ({"agents": [{"id": "a0"}]}, "agents.0", "expected a NegotiationAgent"),
    "agent id None": ({"agents": [_Odd(None)]}, "agents.0.id", "got NoneType"),
    "agent id int": ({"agents": [HashAgent("a0", 1), _Odd(1)]}, "agents.1.id", "got int"),
    "options None": ({"options": None}, "options", "expected a sequence of Outcome"),
    "options str": ({"options": "o0"}, "options", "got str"),
    "options dicts": ({"options": [{"id": "o0", "text": "x"}]}, "options.0", "got dict"),
    "rule bogus": ({"rule": "bogus"}, "rule", "unknown selection rule 'bogus'"),
    "problem None": ({"problem": None}, "problem", "expected a string"),
    "edges str": ({"edges": "ab"}, "edges", "expected a sequence of agent id pairs"),
    "edge not a pair": ({"edges": [5]}, "edges.0", "an edge names exactly two agents"),
    "edge end a list": ({"edges": [("a0", ["a1"])]}, "edges.0", "unknown agent"),
    "clock None": ({"clock": None}, "clock", "expected a callable"),
}


def _call(door: str, overrides: dict[str, Any]) -> None:
    kwargs: dict[str, Any] = {
        "agents": _agents(),
        "rejected": REJECTED,
        "ideal": IDEAL,
        "floor": 0.5,
        "options": OPTIONS,
        **overrides,
    }
    agents = kwargs.pop("agents")
    if door == "negotiate":
        asyncio.run(negotiate(agents, **kwargs))
    elif door == "negotiate_sync":
        negotiate_sync(agents, **kwargs)
    else:
        Negotiation(agents, **kwargs)


@pytest.mark.parametrize("door", ["negotiate", "negotiate_sync", "Negotiation"])
@pytest.mark.parametrize("name", sorted(BAD))
def test_a_wrong_argument_is_a_config_error_before_any_agent_is_called(
    name: str, door: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    overrides, field, message = BAD[name]
    called: list[str] = []

    async def spy(self: HashAgent, *args: Any) -> Any:
        called.append(self.id)
        raise AssertionError("an agent was called")

    for method in ("score", "propose", "repair"):
        monkeypatch.setattr(HashAgent, method, spy)
    with pytest.raises(ConfigError) as info:
        _call(door, overrides)
    assert info.value.field == field
    assert message in str(info.value)
    assert called == []


def test_a_string_anchor_no_longer_spends_the_agents_calls() -> None:
    """The reported case: before, every agent faulted on a pydantic dump and the run
    ended best_effort after calling them all."""
    agents = [
        TableAgent("a", {"R": 0, "I": 10, "o0": 5}),
        TableAgent("b", {"R": 0, "I": 10, "o0": 9}),
    ]
    with pytest.raises(ConfigError, match="field 'rejected'"):
        negotiate_sync(
            agents,
            rejected="R",  # type: ignore[arg-type]
            ideal=Outcome(id="I", text="i"),
            floor=0.5,
            options=[Outcome(id="o0", text="x")],
        )


def test_good_arguments_still_run() -> None:
    cert = negotiate_sync(
        _agents(), rejected=REJECTED, ideal=IDEAL, floor=0.0, rounds=1, options=OPTIONS
    )
    assert cert.status == "certified"
    assert set(cert.covered) == {"a0", "a1"}


def test_negotiate_names_its_keyword_arguments() -> None:
    """Explicit keywords (not ``**kwargs``), so a type checker catches a misspelt one;
    the same names and defaults as :class:`Negotiation`."""
    init = inspect.signature(Negotiation.__init__).parameters
    for fn in (negotiate, negotiate_sync):
        params = inspect.signature(fn).parameters
        assert all(p.kind is not inspect.Parameter.VAR_KEYWORD for p in params.values())
        assert list(params) == [n for n in init if n != "self"]
        assert all(params[n].default == init[n].default for n in params)
    with pytest.raises(TypeError, match="bogus"):
        negotiate_sync(_agents(), rejected=REJECTED, ideal=IDEAL, floor=0.5, bogus=1)  # type: ignore[call-arg]


def test_numpy_and_fraction_controls_are_numbers_and_the_record_is_plain_json() -> None:
    """A floor computed with NumPy (``np.float32(0.5)``), a ``Fraction`` margin and a
    NumPy round budget are taken as the numbers they are; they were refused as not
    numbers, though scores take any real number. The certificate holds plain floats."""
    import json
    from fractions import Fraction

    import numpy as np

    agents = [
        TableAgent("a", {"R": 0, "I": 10, "o0": 8}),
        TableAgent("b", {"R": 0, "I": 10, "o0": 9}),
    ]
    kwargs: dict[str, Any] = {
        "rejected": Outcome(id="R", text="r"),
        "ideal": Outcome(id="I", text="i"),
        "options": [Outcome(id="o0", text="o")],
    }
    plain = negotiate_sync(agents, floor=0.5, margin=0.25, rounds=2, deadline_s=60.0, **kwargs)
    numpy = negotiate_sync(
        agents,
        floor=np.float32(0.5),
        margin=Fraction(1, 4),
        rounds=np.int64(2),
        deadline_s=np.float64(60.0),
        **kwargs,
    )
    assert numpy.status == plain.status
    assert json.dumps(numpy.model_dump(mode="json")) == json.dumps(plain.model_dump(mode="json"))


def test_two_agents_proposing_one_text_without_ids_table_one_candidate() -> None:
    """Two LLM agents writing the same plan, without ids, used to table two candidates,
    and every agent scored the one outcome twice (each score a paid call)."""
    from concord_helpers import HashAgent as Base

    class Same(Base):
        async def propose(self, view: Any) -> Outcome | None:
            return Outcome(text="Roll back the release and page the owner.")

    agents = [Same("a0", 1), Same("a1", 2), Same("a2", 3)]
    record = negotiate_sync(agents, rejected=REJECTED, ideal=IDEAL, floor=0.0, rounds=0, options=[])
    tabled = [c for c in record.candidates if c.text.startswith("Roll back")]
    assert [c.author for c in tabled] == ["a0"]
    notes = [n for step in record.trajectory for n in step.notes]
    assert "a1 proposed C1, already tabled by a0; merged" in notes
    assert "a2 proposed C1, already tabled by a0; merged" in notes
    from dissensus.concord import verify

    assert verify(record.model_dump(mode="json")).valid
    # each agent scored the plan once
    assert record.spent.evaluations == len(agents) * len(record.candidates)


def test_owner_decides_picks_the_owners_plan_merged_into_another_agents() -> None:
    """An owner whose plan another agent tabled first proposed that candidate: the
    comparison's "Owner decides" read it as having tabled no proposal and committed
    nothing."""

    class Same(HashAgent):
        async def propose(self, view: Any) -> Outcome | None:
            return Outcome(text="Roll back the release and page the owner.")

    agents = [Same("a0", 1), Same("a1", 2)]
    record = negotiate_sync(agents, rejected=REJECTED, ideal=IDEAL, floor=0.0, rounds=0, options=[])
    for owner in ("a0", "a1"):
        row = {r.strategy: r for r in compare_rules(record, owner)}["Owner decides"]
        assert row.selected == "C1", (owner, row.result)


@pytest.mark.parametrize(
    "overrides",
    [
        {"floor": 10**5000},
        {"margin": -(10**5000)},
        {"deadline_s": 10**5000},
        {"rounds": 10**5000},
        {"floor": __import__("fractions").Fraction(10**5000, 3)},
    ],
)
def test_a_number_too_long_to_write_is_refused_by_its_size(overrides: dict[str, Any]) -> None:
    """An integer of more digits than Python writes out raised ValueError while its own
    refusal's message was made."""
    with pytest.raises(ConfigError) as info:
        _call("Negotiation", overrides)
    assert info.value.field == next(iter(overrides))
    assert len(str(info.value)) < 200
