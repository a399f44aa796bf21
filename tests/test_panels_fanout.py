"""The fan-out with in-process members: every member in the panel, in order; failures as
abstentions; calls per member bounded across requests."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dissensus.llm.base import BackendError, BackendResponse, ChatRequest, Message
from dissensus.panels import Members, PanelUnavailable
from dissensus.pipeline.policy import PanelSettings
from dissensus.types import Panel


class _Counting:
    """An in-process member that records how many of its calls overlap."""

    provider = "test"

    def __init__(self) -> None:
        self.model_id = "counting"
        self.now = 0
        self.most = 0

    async def send(self, request: Any, *, json_mode: Any) -> Any:
        self.now += 1
        self.most = max(self.most, self.now)
        try:
            await asyncio.sleep(0.01)
        finally:
            self.now -= 1
        return BackendResponse(text='{"decision": "yes", "reasoning": "r"}', model="counting")

    async def aclose(self) -> None:
        return None


@pytest.mark.parametrize("limit", [1, 3])
def test_member_concurrency_bounds_calls_across_requests(limit: int) -> None:
    settings = PanelSettings.model_validate(
        {
            "options": ["yes", "no"],
            "member_concurrency": limit,
            "members": [{"name": "a", "model": "scripted:x"}, {"name": "b", "model": "scripted:y"}],
        }
    )
    backends = {"a": _Counting(), "b": _Counting()}
    members = Members(settings, backends)  # type: ignore[arg-type]

    async def many() -> list[Any]:
        ask = [Message(role="user", content="q")]
        return list(await asyncio.gather(*(members.fan_out(f"p{i}", ask) for i in range(8))))

    fans = asyncio.run(many())
    assert all(r.status == "answered" for fan in fans for r in fan.reports)
    assert {b.most for b in backends.values()} == {limit}


class _Scripted:
    """An in-process member that answers, rambles or fails, as told."""

    provider = "test"

    def __init__(self, fate: str) -> None:
        self.model_id = f"member-{fate}"
        self.fate = fate

    async def send(self, request: Any, *, json_mode: Any) -> Any:
        if self.fate == "fail":
            raise BackendError("boom", kind="client_error", retryable=False, status=400)
        text = "no idea" if self.fate == "ramble" else f"The answer is {self.fate}."
        return BackendResponse(text=text, model=self.model_id)

    async def aclose(self) -> None:
        return None


@settings(max_examples=30)  # each example runs an event loop
@given(
    fates=st.lists(st.sampled_from(["1", "2", "ramble", "fail"]), min_size=2, max_size=6),
    min_answers=st.integers(min_value=1, max_value=3),
)
def test_the_panel_keeps_every_member_in_order(fates: list[str], min_answers: int) -> None:
    """Every member is in the panel, in policy order; failures are abstentions without
    reasoning; the panel is refused exactly when fewer than ``min_answers`` spoke."""
    names = [f"m{i}" for i in range(len(fates))]
    settings = PanelSettings.model_validate(
        {
            "answer": "number",
            "min_answers": min(min_answers, len(fates)),
            "members": [
                {"name": n, "model": "scripted:x", "family": f"Family {i % 2}"}
                for i, n in enumerate(names)
            ],
        }
    )
    members = Members(settings, {n: _Scripted(f) for n, f in zip(names, fates, strict=True)})  # type: ignore[misc]
    spoke = sum(f != "fail" for f in fates)
    try:
        fan = asyncio.run(members.fan_out("p", [Message(role="user", content="q")]))
    except PanelUnavailable as exc:
        assert spoke < settings.min_answers
        assert [r.name for r in exc.reports] == names
        return
    assert spoke >= settings.min_answers
    assert [o.agent for o in fan.panel.outputs] == names
    # Built without validation: exactly the panel validation makes of it.
    assert Panel.model_validate(fan.panel.model_dump()) == fan.panel
    for out, fate, report in zip(fan.panel.outputs, fates, fan.reports, strict=True):
        if fate == "fail":
            assert (out.decision, out.reasoning, report.status) == (None, "", "failed")
        elif fate == "ramble":
            assert (out.decision, report.status) == (None, "abstained")
        else:
            assert (out.decision, report.status) == (fate, "answered")


def test_openai_members_take_the_sdks_aiohttp_client_where_installed() -> None:
    from dissensus.llm.openai_backend import OpenAIBackend, aiohttp_available

    settings = PanelSettings.model_validate(
        {
            "members": [
                {"name": "a", "model": "openai:m", "base_url": "http://127.0.0.1:9/v1"},
                {"name": "b", "model": "openai:m", "base_url": "http://127.0.0.1:9/v1"},
            ]
        }
    )
    members = Members.open(settings)
    backends = list(members.backends.values())
    assert all(isinstance(b, OpenAIBackend) for b in backends)
    expected = "aiohttp" if aiohttp_available() else "httpx"
    assert [b.transport for b in backends if isinstance(b, OpenAIBackend)] == [expected] * 2
    # The key never reaches the backend's repr, whichever transport it uses.
    assert all("unused" not in repr(b) and expected in repr(b) for b in backends)


@pytest.mark.parametrize(
    "panel",
    [
        {"answer": "number"},
        {"answer": "structured", "options": ["yes", "no"], "instructions": "Be brief."},
        {"answer": "regex", "pattern": "A: (\\w+)", "instructions": "Say A: x."},
    ],
)
def test_the_requests_built_once_per_panel_are_member_requests(panel: dict[str, Any]) -> None:
    """What the fan-out sends each member is :func:`member_request` (a recording's key),
    though built without validating its parts again."""
    from dissensus.panels.fanout import _Requests, member_request

    two = [{"name": "a", "model": "x:y"}, {"name": "b", "model": "x:z"}]
    settings = PanelSettings.model_validate({**panel, "members": two})
    asked = [Message(role="system", content="s"), Message(role="user", content="q")]
    requests = _Requests(settings)
    for temperature, seed, cap in [(None, None, None), (0.5, 3, 64)]:
        built = requests.of("a", asked, temperature=temperature, seed=seed, max_tokens=cap)
        want = member_request(
            "a", asked, settings, temperature=temperature, seed=seed, max_tokens=cap
        )
        assert built == want
        assert built.model_dump() == want.model_dump()
        assert ChatRequest.model_validate(built.model_dump()) == built
    # Each request its own list of messages: a re-ask appending to one leaves the others.
    first = requests.of("a", asked, temperature=None, seed=None, max_tokens=None)
    assert (
        first.messages
        is not requests.of("a", asked, temperature=None, seed=None, max_tokens=None).messages
    )


@given(
    why=st.none() | st.text(max_size=5),
    family=st.none() | st.text(max_size=3),
    status=st.sampled_from(["answered", "abstained", "failed"]),
)
def test_a_members_meta_entry_is_its_report_without_the_decision(
    why: str | None, family: str | None, status: str
) -> None:
    from dissensus.panels.fanout import _report_meta
    from dissensus.panels.shapes import MemberReport

    report = MemberReport(
        name="m", family=family, model="x", status=status, decision="d", why=why, attempts=2
    )  # type: ignore[arg-type]
    entry = _report_meta(report)
    want = report.model_dump(mode="json", exclude={"decision"})
    assert entry == want and list(entry) == list(want)


class _Capped:
    """An in-process member that answers at once and keeps the completion cap it was sent."""

    provider = "test"

    def __init__(self) -> None:
        self.model_id = "capped"
        self.caps: list[int | None] = []

    async def send(self, request: ChatRequest, *, json_mode: Any) -> BackendResponse:
        self.caps.append(request.max_tokens)
        await asyncio.sleep(0)  # every member's attempt is in flight at once
        return BackendResponse(
            text="The answer is 7.", model="capped", prompt_tokens=20, completion_tokens=5
        )

    async def aclose(self) -> None:
        return None


@settings(max_examples=40)  # each example runs an event loop
@given(
    n=st.integers(min_value=2, max_value=8),
    budget=st.integers(min_value=1, max_value=20_000),
    cap=st.one_of(st.none(), st.integers(min_value=1, max_value=4_096)),
)
def test_a_request_token_budget_is_shared_so_every_member_is_asked(
    n: int, budget: int, cap: int | None
) -> None:
    """With ``request_max_tokens``, the members' first attempts fit in the budget at once
    (each capped to its share less its prompt) whenever a share covers a prompt: no member
    is refused by the budget for the others' reservations; the policy's cap is never raised."""
    from dissensus.llm.client import prompt_estimate

    names = [f"m{i}" for i in range(n)]
    settings = PanelSettings.model_validate(
        {
            "answer": "number",
            "min_answers": 1,
            "max_tokens": cap,
            "request_max_tokens": budget,
            "members": [{"name": m, "model": "scripted:x"} for m in names],
        }
    )
    backends = {m: _Capped() for m in names}
    members = Members(settings, backends)  # type: ignore[arg-type]
    ask = [Message(role="user", content="Tom has 3 apples and buys 4 more. How many?")]
    prompt = prompt_estimate(
        members._requests.of("m0", ask, temperature=None, seed=None, max_tokens=1)
    )
    try:
        fan = asyncio.run(members.fan_out("p", ask))
        reports = fan.reports
    except PanelUnavailable as exc:
        reports = exc.reports
    share = budget // n - prompt
    sent = [c for b in backends.values() for c in b.caps]
    assert all(c is not None and (cap is None or c <= cap) for c in sent)
    if share >= 1:
        assert [r.status for r in reports] == ["answered"] * n
        assert all(c is not None and c <= share for c in sent)
        assert sum(prompt + c for c in sent if c is not None) <= budget


def test_a_member_key_comes_from_the_variable_its_api_key_env_names(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from dissensus.errors import ConfigError
    from dissensus.llm.openai_backend import OpenAIBackend

    monkeypatch.setenv("OPENAI_API_KEY", "shared-key")
    monkeypatch.setenv("MEMBER_B_KEY", "b-own-key")
    url = "http://127.0.0.1:9/v1"
    settings = PanelSettings.model_validate(
        {
            "members": [
                {"name": "a", "model": "openai:m", "base_url": url},
                {"name": "b", "model": "openai:m", "base_url": url, "api_key_env": "MEMBER_B_KEY"},
            ]
        }
    )
    backends = Members.open(settings).backends
    assert isinstance(backends["a"], OpenAIBackend) and isinstance(backends["b"], OpenAIBackend)
    assert (backends["a"]._api_key, backends["b"]._api_key) == ("shared-key", "b-own-key")
    assert "b-own-key" not in repr(backends["b"])
    monkeypatch.delenv("MEMBER_B_KEY")
    with pytest.raises(ConfigError, match=r"member b: \$MEMBER_B_KEY is not set"):
        Members.open(settings)
    with pytest.raises(ValueError, match="api_key_env is only read for openai: members"):
        PanelSettings.model_validate(
            {"members": [{"name": "a", "model": "scripted:x", "api_key_env": "K"}]}
        )


class _Gated:
    """An in-process member that answers once its gate opens, noting which members'
    answers the panel had read by then."""

    provider = "test"

    def __init__(self, answer: str, gate: asyncio.Event | None, seen: list[str]) -> None:
        self.model_id = f"gated-{answer}"
        self.answer, self.gate, self.seen = answer, gate, seen
        self.read_before: list[str] | None = None

    async def send(self, request: Any, *, json_mode: Any) -> Any:
        if self.gate is not None:
            await self.gate.wait()
            self.read_before = list(self.seen)
        return BackendResponse(text=f"The answer is {self.answer}.", model=self.model_id)

    async def aclose(self) -> None:
        return None


def test_answers_are_read_as_they_arrive(monkeypatch: pytest.MonkeyPatch) -> None:
    """A member's answer is read while the slower members are still answering, so only
    the last answer's reading is left between the slowest member and the decision; the
    panel is the one reading every answer at the end made."""
    import dissensus.panels.fanout as fanout

    seen: list[str] = []
    read = fanout._read

    def noting(text: str, settings: PanelSettings) -> Any:
        seen.append(text)
        return read(text, settings)

    monkeypatch.setattr(fanout, "_read", noting)
    settings = PanelSettings.model_validate(
        {
            "answer": "number",
            "members": [{"name": n, "model": "scripted:x"} for n in ("fast", "other", "slow")],
        }
    )

    async def ask() -> tuple[Any, _Gated]:
        gate = asyncio.Event()
        slow = _Gated("8", gate, seen)
        backends = {"fast": _Gated("7", None, seen), "other": _Gated("7", None, seen), "slow": slow}
        members = Members(settings, backends)  # type: ignore[arg-type]
        fanning = asyncio.ensure_future(members.fan_out("p", [Message(role="user", content="q")]))
        for _ in range(20):  # the fast members' tasks run to their end
            await asyncio.sleep(0)
        gate.set()
        return await fanning, slow

    fan, slow = asyncio.run(ask())
    assert slow.read_before == ["The answer is 7.", "The answer is 7."]
    assert [o.decision for o in fan.panel.outputs] == ["7", "7", "8"]
    assert [r.status for r in fan.reports] == ["answered"] * 3
    assert fan.answers == {
        "fast": "The answer is 7.",
        "other": "The answer is 7.",
        "slow": "The answer is 8.",
    }
