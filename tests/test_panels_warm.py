"""What the chat door does before and around a member call: the request's text checked
at parse (the panel is built from it unvalidated), the member clients opened at start-up,
and the SDK given the absolute URL it would have merged itself."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dissensus.llm.openai_backend import OpenAIBackend
from dissensus.panels import ChatError, Members
from dissensus.panels.door import parse_request
from dissensus.pipeline.policy import PanelSettings

openai = pytest.importorskip("openai")

_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=30)


@given(
    texts=st.lists(_TEXT, min_size=1, max_size=4),
    bad=st.one_of(st.none(), st.tuples(st.integers(0, 3), st.integers(0xD800, 0xDFFF))),
)
def test_a_lone_surrogate_in_a_message_is_a_400_naming_it(
    texts: list[str], bad: tuple[int, int] | None
) -> None:
    """Text a panel cannot carry is refused at parse, naming the message; other text passes."""
    if bad is not None:
        index = bad[0] % len(texts)
        texts[index] += chr(bad[1])
    body = {"model": "m", "messages": [{"role": "user", "content": t} for t in texts]}
    if bad is None:
        assert [m.text() for m in parse_request(body).messages] == texts
        return
    with pytest.raises(ChatError) as caught:
        parse_request(body)
    assert caught.value.status == 400
    assert caught.value.param == f"messages.{index}.content"


@given(
    path=st.lists(st.from_regex(r"[a-z0-9]{1,6}", fullmatch=True), max_size=3),
    slash=st.booleans(),
)
def test_the_endpoint_is_the_sdks_own_merge(path: list[str], slash: bool) -> None:
    """The absolute URL handed to the SDK is the URL it would build from the relative path."""
    base = "http://127.0.0.1:9/" + "/".join(path) + ("/" if slash and path else "")
    backend = OpenAIBackend("m", base_url=base, api_key="k")

    async def check() -> tuple[str, str]:
        client = backend._client()
        return backend._endpoint(client), str(client._prepare_url("/chat/completions"))

    mine, sdk = asyncio.run(check())
    assert mine == sdk


class _Plain:
    model_id = "plain"

    async def aclose(self) -> None:
        return None


def test_members_open_their_clients_when_warmed() -> None:
    settings = PanelSettings.model_validate(
        {
            "members": [
                {"name": "a", "model": "openai:m", "base_url": "http://127.0.0.1:9/v1"},
                {"name": "b", "model": "scripted:x"},
            ]
        }
    )
    # ``b``: a backend without ``awarm`` (nothing to open) is left alone.
    backend = OpenAIBackend("m", base_url="http://127.0.0.1:9/v1", api_key="k")
    members = Members(settings, {"a": backend, "b": _Plain()})  # type: ignore[dict-item]

    async def warm() -> bool:
        await members.awarm()
        opened = asyncio.get_running_loop() in backend._clients
        await members.aclose()
        return opened

    assert asyncio.run(warm())


def _three_questions(query: str) -> list[str]:
    """The answers to three calls of one backend (warmed first) to a loopback server
    (its base URL followed by ``query``), each asking its own question with its own token
    limit, which the bodies the server got are checked to hold."""
    from dissensus.llm.base import ChatRequest, Message
    from dissensus.llm.fakeserver import FakeServer

    with FakeServer() as server:
        backend = OpenAIBackend("m", base_url=server.base_url + query, api_key="k")

        async def ask() -> list[str]:
            await backend.awarm()
            texts = []
            for n in range(3):
                request = ChatRequest(
                    messages=[Message(role="user", content=f"question {n}")],
                    agent=f"agent {n}",
                    max_tokens=10 + n,
                )
                texts.append((await backend.send(request, json_mode="none")).text)
            await backend.aclose()
            return texts

        texts = asyncio.run(ask())
        bodies = list(server.bodies)
    assert [b["messages"] for b in bodies] == [
        [{"role": "user", "content": f"question {n}"}] for n in range(3)
    ]
    assert [b["max_tokens"] for b in bodies] == [10, 11, 12]
    return texts


def test_the_sdks_request_options_are_built_once_per_client(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each call copies the client's options with its own body and headers: the SDK's
    constructor runs once, and every call still sends what it was asked."""
    from openai._models import FinalRequestOptions

    built: list[object] = []
    construct = FinalRequestOptions.construct

    def counted(**values: object) -> FinalRequestOptions:
        built.append(values)
        return construct(**values)

    monkeypatch.setattr(FinalRequestOptions, "construct", counted)
    texts = _three_questions("")
    assert len(built) == 1
    assert texts == ["ok"] * 3


def _no_options_module(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "openai._models", None)


def _no_options_class(monkeypatch: pytest.MonkeyPatch) -> None:
    import openai._models

    monkeypatch.delattr(openai._models, "FinalRequestOptions")


def _other_constructor(monkeypatch: pytest.MonkeyPatch) -> None:
    """A class of that name whose constructor takes other arguments (the SDK's own
    ``client.post`` still uses the SDK's class)."""

    def construct(**values: object) -> None:
        raise TypeError("construct() got an unexpected keyword argument 'json_data'")

    options = SimpleNamespace(construct=construct)
    monkeypatch.setitem(sys.modules, "openai._models", SimpleNamespace(FinalRequestOptions=options))


@pytest.mark.parametrize("change", [_no_options_module, _no_options_class, _other_constructor])
def test_an_sdk_without_the_request_options_used_here_is_asked_through_its_public_post(
    monkeypatch: pytest.MonkeyPatch, change: Callable[[pytest.MonkeyPatch], None]
) -> None:
    """The request options are the SDK's own, outside its public interface: an SDK release
    that moved them, or whose constructor takes other arguments, is asked through
    ``client.post``, sending what each call asks; never an ImportError out of ``send``."""
    posted: list[str] = []
    post = openai.AsyncOpenAI.post

    async def counted(self: Any, path: str, **kwargs: Any) -> Any:
        posted.append(path)
        return await post(self, path, **kwargs)

    monkeypatch.setattr(openai.AsyncOpenAI, "post", counted)
    change(monkeypatch)
    texts = _three_questions("?api-version=1")
    assert texts == ["ok"] * 3
    assert len(posted) == 3
    assert all(p.endswith("/v1/chat/completions?api-version=1") for p in posted), posted
