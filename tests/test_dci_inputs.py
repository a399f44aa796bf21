"""What ``deliberate`` does with participants that misbehave and arguments of the wrong
kind: the first end the participant's act as a failure (the run still ends in a packet),
the second are a ``ConfigError`` naming the argument before any participant is asked."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from dci_helpers import PANEL, ScriptedParticipant, panel
from dissensus.dci import FunctionParticipant
from dissensus.dci.flow import deliberate, deliberate_sync
from dissensus.dci.participant import ActReply, ActRequest
from dissensus.dci.task import DCIConfig, parse_task
from dissensus.errors import ConfigError
from dissensus.types import Usage
from test_dci_flow import check_packet

TASK = parse_task(
    {
        "question": "Which road should we take?",
        "options": [{"id": "north", "text": "Take the north road."}],
    }
)


def _raise_key_error(request: ActRequest) -> Any:
    raise KeyError("boom")


BAD_FUNCTIONS: dict[str, tuple[Callable[[ActRequest], Any], str, str]] = {
    # name: (function, failure kind recorded, text of the recorded problem)
    "raises": (_raise_key_error, "model_failure", "the participant raised KeyError: 'boom'"),
    "returns None": (lambda r: None, "invalid_act", "the reply is not a valid act: act:"),
    "returns a partial act": (
        lambda r: {"act": "support"},
        "invalid_act",
        "the reply is not a valid act: act.target: Field required",
    ),
    "returns a number": (lambda r: 5, "invalid_act", "the reply is not a valid act: act:"),
}


@pytest.mark.parametrize("name", sorted(BAD_FUNCTIONS))
def test_every_participant_misbehaving_still_ends_in_a_packet(name: str) -> None:
    fn, kind, problem = BAD_FUNCTIONS[name]
    result = deliberate_sync(TASK, [FunctionParticipant(pid, fn) for pid in PANEL])
    p = result.packet
    check_packet(p)
    assert p.status == "model_failure"
    assert p.status_detail is not None and "stage frame" in p.status_detail
    assert [(f.speaker, f.kind) for f in p.failures] == [("framer", kind)]
    assert p.failures[0].problems[-1].startswith(problem)
    # an invalid reply is re-asked like any invalid output; an exception is not
    outcomes = [t.outcome for t in result.trace]
    assert outcomes == (["model_failure"] if kind == "model_failure" else ["invalid_output"] * 2)


class _Flaky(ScriptedParticipant):
    """Plays valid acts, but raises in ``stage``."""

    def __init__(self, id: str, stage: str) -> None:
        super().__init__(id, scores={"o1": 0.9})
        self.stage = stage

    async def speak(self, request: ActRequest) -> ActReply:
        if request.stage == self.stage:
            raise RuntimeError(f"bug in {self.stage}")
        return await super().speak(request)


@pytest.mark.parametrize("stage", ["propose", "challenge", "score"])
def test_one_raising_participant_is_its_own_failure_and_the_run_completes(stage: str) -> None:
    agents: list[Any] = panel({"o1": 0.9})
    agents[1] = _Flaky("explorer", stage)
    p = deliberate_sync(TASK, agents).packet
    check_packet(p)
    mine = [f for f in p.failures if f.speaker == "explorer"]
    assert mine and {f.stage for f in mine} == {stage}
    assert {f.kind for f in mine} == {"model_failure"}
    assert all(f.problems == [f"the participant raised RuntimeError: bug in {stage}"] for f in mine)
    # the explorer has no duty (frame, synthesis): the others carry the run
    assert p.status == "complete" and p.selected is not None


class _Returns:
    """A participant of our own whose ``speak`` returns ``value``, not an :class:`ActReply`."""

    def __init__(self, id: str, value: object) -> None:
        self.id = id
        self.value = value

    async def speak(self, request: ActRequest) -> Any:
        return self.value


def test_a_reply_that_is_not_an_act_reply_is_an_invalid_output() -> None:
    agents: list[Any] = [_Returns(pid, {"act": "frame"}) for pid in PANEL]
    result = deliberate_sync(TASK, agents)
    assert result.packet.status == "model_failure"
    assert [t.outcome for t in result.trace] == ["invalid_output", "invalid_output"]
    assert result.packet.failures[0].problems == ["expected an ActReply, got dict"]


def test_a_participant_timing_out_on_its_own_is_its_failure_not_the_deadline() -> None:
    def times_out(request: ActRequest) -> Any:
        raise TimeoutError("read timed out")

    agents: list[Any] = panel({"o1": 0.9})
    agents[2] = FunctionParticipant("challenger", times_out)
    p = deliberate_sync(TASK, agents).packet
    assert p.status == "complete"
    mine = [f for f in p.failures if f.speaker == "challenger"]
    assert mine and all(f.kind == "model_failure" for f in mine)
    assert mine[0].problems == ["the participant raised TimeoutError: read timed out"]


@pytest.mark.parametrize("exc", [KeyboardInterrupt, SystemExit, asyncio.CancelledError])
def test_interrupts_exits_and_cancellation_still_propagate(exc: type[BaseException]) -> None:
    def stop(request: ActRequest) -> Any:
        raise exc()

    with pytest.raises(exc):
        deliberate_sync(TASK, [FunctionParticipant(pid, stop) for pid in PANEL])


def test_the_librarys_own_errors_stop_the_run() -> None:
    """A journal that is busy under a model call (a DissensusError) is the run's, not the
    participant's: it propagates (the run stops, resumable) instead of sending the case to
    review as a participant's failure."""
    from dissensus.store.errors import JournalBusy

    def busy(request: ActRequest) -> Any:
        raise JournalBusy("the journal is busy")

    with pytest.raises(JournalBusy):
        deliberate_sync(TASK, [FunctionParticipant(pid, busy) for pid in PANEL])


def _raise_input_error(request: ActRequest) -> Any:
    from dissensus.guard import guard_votes

    guard_votes([])  # a library call the participant's code made wrongly: InputError


def _raise_model_call_error(request: ActRequest) -> Any:
    from dissensus.llm.base import ModelCallError

    raise ModelCallError("503 overloaded")


@pytest.mark.parametrize(
    ("fn", "problem"),
    [
        (_raise_input_error, "the participant raised InputError: the guard needs at least two"),
        (_raise_model_call_error, "the participant raised ModelCallError: 503 overloaded"),
    ],
)
def test_the_librarys_other_errors_under_a_participant_are_its_failure(
    fn: Callable[[ActRequest], Any], problem: str
) -> None:
    """Only a setting of the run and the journal's faults are the run's; any other
    DissensusError a participant raises is that participant's model_failure, with a packet."""
    agents: list[Any] = panel({"o1": 0.9})
    agents[1] = FunctionParticipant("explorer", fn)
    result = deliberate_sync(TASK, agents)
    p = result.packet
    check_packet(p)
    assert p.status == "complete"
    mine = [f for f in p.failures if f.speaker == "explorer"]
    assert mine and all(f.kind == "model_failure" for f in mine)
    assert mine[0].problems[0].startswith(problem)
    # every participant failing that way ends the run with model_failure, still a packet
    p = deliberate_sync(TASK, [FunctionParticipant(pid, fn) for pid in PANEL]).packet
    check_packet(p)
    assert p.status == "model_failure"
    assert [(f.speaker, f.kind) for f in p.failures] == [("framer", "model_failure")]


def test_the_model_clients_budget_refusal_stops_the_run_with_its_packet() -> None:
    from dissensus.llm.base import BudgetExceeded

    class Refused(ScriptedParticipant):
        async def speak(self, request: ActRequest) -> ActReply:
            if request.stage == "frame":
                return await super().speak(request)
            raise BudgetExceeded("the budget of 10 calls is spent")

    agents: list[Any] = [Refused(pid) for pid in PANEL]
    p = deliberate_sync(TASK, agents).packet
    check_packet(p)
    assert p.status == "budget_exhausted"
    assert p.failures[-1].kind == "budget_exhausted"
    assert p.failures[-1].problems == ["the budget of 10 calls is spent"]


def test_a_setting_of_the_run_raised_under_a_participant_stops_the_run() -> None:
    def misconfigured(request: ActRequest) -> Any:
        raise ConfigError("no model configured", field="model")

    with pytest.raises(ConfigError):
        deliberate_sync(TASK, [FunctionParticipant(pid, misconfigured) for pid in PANEL])


@pytest.mark.parametrize("name", ["JournalConflict", "RunLockLost", "JournalDamaged"])
def test_every_journal_fault_stops_the_run(name: str) -> None:
    import dissensus.store.errors as store_errors

    exc_type = getattr(store_errors, name)

    def fault(request: ActRequest) -> Any:
        raise exc_type("the journal failed")

    with pytest.raises(exc_type):
        deliberate_sync(TASK, [FunctionParticipant(pid, fault) for pid in PANEL])


def test_a_journalled_step_that_no_longer_reads_stops_the_run() -> None:
    from dissensus.pipeline.durable import JOURNAL_FAULTS, UnreadableStep

    def unreadable(request: ActRequest) -> Any:
        raise UnreadableStep("step no longer reads")

    with pytest.raises(UnreadableStep):
        deliberate_sync(TASK, [FunctionParticipant(pid, unreadable) for pid in PANEL])
    # the flow names (never imports) the journal's faults: every one of them is named
    from dissensus.dci.flow import _JOURNAL_FAULTS

    assert {f"{c.__module__}.{c.__qualname__}" for c in JOURNAL_FAULTS} == _JOURNAL_FAULTS


def test_the_budget_refusal_the_flow_names_is_the_model_clients() -> None:
    from dissensus.dci.flow import _BUDGET_REFUSED
    from dissensus.llm.base import BudgetExceeded

    assert f"{BudgetExceeded.__module__}.{BudgetExceeded.__qualname__}" == _BUDGET_REFUSED


def test_cancelling_the_run_cancels_it() -> None:
    async def main() -> None:
        started = asyncio.Event()

        async def hang(request: ActRequest) -> Any:
            started.set()
            await asyncio.sleep(60)

        run = asyncio.ensure_future(
            deliberate(TASK, [FunctionParticipant(pid, hang) for pid in PANEL])
        )
        await started.wait()
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run

    asyncio.run(main())


def _boom() -> Usage:
    raise ZeroDivisionError("division by zero")


class _Spy(ScriptedParticipant):
    pass


BAD_ARGUMENTS: dict[str, tuple[dict[str, Any], str, str]] = {
    # name: (keyword arguments over the good ones, field, message part)
    "task None": ({"task": None}, "task", "expected a Task"),
    "task dict": ({"task": {"question": "q?"}}, "task", "got dict"),
    "agents None": ({"agents": None}, "agents", "expected a sequence of participants"),
    "agents str": ({"agents": "framer"}, "agents", "got str"),
    "agents dicts": ({"agents": [{"id": p} for p in PANEL]}, "agents.0", "got dict"),
    "agent id int": ({"agents": "int id"}, "agents.0.id", "a participant id is a string"),
    "duplicate id": ({"agents": "duplicate"}, "agents.4.id", "'framer' is given twice"),
    "config dict": ({"config": {"max_rounds": 1}}, "config", "expected a DCIConfig"),
    "policy dict": ({"policy": {}}, "policy", "expected a CompactionPolicy"),
    "meter not callable": ({"meter": 5}, "meter", "expected a callable"),
    "meter raises": ({"meter": _boom}, "meter", "the meter raised ZeroDivisionError"),
    "meter returns junk": ({"meter": lambda: "x"}, "meter", "must return a Usage, got str"),
    "clock not callable": ({"clock": None}, "clock", "expected a callable"),
    # a Task built in code is not held to a task file's checks; deliberate is
    "no participant": (
        {"task": TASK.model_copy(update={"participants": ()})},
        "participants",
        "at least one participant is needed",
    ),
    "a participant twice": (
        {
            "task": TASK.model_copy(
                update={"participants": (*TASK.participants, TASK.participants[0])}
            )
        },
        "participants.4.id",
        "duplicate participant id 'framer'",
    ),
}


@pytest.mark.parametrize("name", sorted(BAD_ARGUMENTS))
def test_an_argument_of_the_wrong_kind_is_refused_before_anyone_speaks(name: str) -> None:
    overrides, field, message = BAD_ARGUMENTS[name]
    spies = [_Spy(p) for p in PANEL]
    kwargs: dict[str, Any] = {"task": TASK, "agents": spies, **overrides}
    if kwargs["agents"] == "int id":
        odd = _Spy("x")
        odd.id = 7  # type: ignore[assignment]
        kwargs["agents"] = [odd, *spies]
    elif kwargs["agents"] == "duplicate":
        kwargs["agents"] = [*spies, _Spy("framer")]
    with pytest.raises(ConfigError) as info:
        asyncio.run(deliberate(**kwargs))
    assert info.value.field == field
    assert message in str(info.value)
    assert all(s.calls == 0 for s in spies)


def test_a_meter_failing_at_the_end_keeps_the_packet_and_says_so() -> None:
    reads = 0

    def meter() -> Usage:
        nonlocal reads
        reads += 1
        if reads > 1:
            raise OSError("meter gone")
        return Usage()

    agents = panel({"o1": 0.9})
    p = deliberate_sync(TASK, agents, meter=meter, config=DCIConfig()).packet
    check_packet(p)
    assert p.status == "complete"
    assert p.status_detail is not None
    assert "field 'meter': the meter raised OSError: meter gone" in p.status_detail
    assert "usage is the flow's own count" in p.status_detail
    assert p.metrics.calls == sum(a.calls for a in agents)
