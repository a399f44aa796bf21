"""The OpenAI backend's configuration: base URLs and API keys it refuses when it is made,
before any request, naming the variable that holds them and never showing a secret."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest

from cli_helpers import cli
from dissensus.errors import ConfigError
from dissensus.llm import (
    ChatRequest,
    ClientSettings,
    Message,
    ModelCallError,
    ModelClient,
    OpenAIBackend,
    make_backend,
    resolve_model,
)
from dissensus.llm.fakeserver import FakeServer, FaultPlan, ServerSettings
from dissensus.llm.openai_backend import Transport, aiohttp_available, redact
from dissensus.llm.resolve import check_model_spec
from dissensus.llm.scripted import parse_script
from dissensus.panels.fanout import Members
from dissensus.pipeline.policy import PanelSettings
from llm_helpers import refused

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
KEY = "sk-SECRETKEY1234567890abcdef"
PASSWORD = "pAsSw0rdXYZ"


@pytest.fixture
def server() -> Iterator[FakeServer]:
    """A loopback server answering every request with a 401 that quotes the
    ``Authorization`` header it was sent (``auth_error``)."""
    plan = FaultPlan(rate=1.0, kinds=["auth_error"])
    with FakeServer(parse_script({"default": "ok"}), ServerSettings(faults=plan)) as srv:
        yield srv


def _with_userinfo(url: str) -> str:
    return url.replace("http://", f"http://alice:{PASSWORD}@")


def test_a_base_url_with_userinfo_is_refused_naming_the_variable_before_any_request(
    server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The HTTP client would send user-info as ``Basic`` authentication in place of the key
    (and a server echoing it would show the password): refused when the backend is made."""
    monkeypatch.setenv("OPENAI_BASE_URL", _with_userinfo(server.base_url))
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    for make in (
        lambda: make_backend("openai:m"),
        lambda: resolve_model("openai:m"),
        lambda: check_model_spec("openai:m"),
        lambda: OpenAIBackend("m"),  # the SDK would read $OPENAI_BASE_URL itself
    ):
        with pytest.raises(ConfigError) as caught:
            make()
        text = str(caught.value)
        assert "$OPENAI_BASE_URL carries credentials (user-info before the host)" in text
        assert PASSWORD not in text and "alice" not in text and KEY not in text
    assert server.requests_received == 0


def test_a_base_url_argument_with_credentials_names_the_argument() -> None:
    with pytest.raises(ConfigError) as caught:
        OpenAIBackend("m", base_url=f"http://bob:{PASSWORD}@127.0.0.1:9/v1", api_key=KEY)
    assert caught.value.field == "base_url" and PASSWORD not in str(caught.value)
    assert "carries credentials" in str(caught.value)
    with pytest.raises(ConfigError, match=r"carries a credential in its query \('api-key'\)"):
        OpenAIBackend("m", base_url="http://127.0.0.1:9/v1?api-key=zzz", api_key=KEY)
    with pytest.raises(ConfigError, match="is not an http"):
        OpenAIBackend("m", base_url="127.0.0.1:9/v1", api_key=KEY)
    # A parameter of a path segment (``;name=value``) is a query by another name.
    with pytest.raises(ConfigError, match=r"carries a credential in its path \('token'\)"):
        OpenAIBackend("m", base_url=f"http://127.0.0.1:9/v1;token={PASSWORD}", api_key=KEY)
    # A fragment is never sent: the paths the SDK appends would be lost in it.
    with pytest.raises(ConfigError, match="has a fragment") as caught:
        OpenAIBackend("m", base_url=f"http://127.0.0.1:9/v1#{PASSWORD}", api_key=KEY)
    assert PASSWORD not in str(caught.value)
    assert OpenAIBackend("m", base_url="http://127.0.0.1:9/v1;v=2", api_key=KEY).model_id == "m"


def test_base_url_problem_is_the_panel_members_rule() -> None:
    from dissensus.llm.openai_backend import base_url_problem
    from dissensus.pipeline.policy import member_url_problem

    for url in (
        "http://127.0.0.1:8000/v1",
        "https://api.example.com/v1?api-version=2024-06-01",
        "http://u:p@h/v1",
        "http://u@h/v1",
        "http://h/v1?access_token=x",
        "http://h/v1?sig=x&a=1",
        "ftp://h/v1",
        "http:///v1",
        "http://h:port/v1",
        "http://h/v1;api_key=x",
        "http://h/a;x=1/v1;session-token=y",
        "http://h/v1;v=2",
        "http://h/v1#frag",
        "http://h/v1#",
    ):
        assert base_url_problem(url) == member_url_problem(url), url


def test_a_panel_members_base_url_from_the_environment_is_refused_too(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", f"http://alice:{PASSWORD}@127.0.0.1:9/v1")
    monkeypatch.setenv("MEMBER_KEY", KEY)
    members = [
        {"name": "a", "model": "openai:m"},
        {"name": "b", "model": "openai:m", "api_key_env": "MEMBER_KEY"},
    ]
    for member in members:
        settings = PanelSettings.model_validate({"members": [member, {**member, "name": "z"}]})
        with pytest.raises(ConfigError, match=r"\$OPENAI_BASE_URL carries credentials") as caught:
            Members.open(settings)
        assert PASSWORD not in str(caught.value)


def test_the_cli_refuses_a_base_url_with_userinfo_before_the_run(
    server: FakeServer, tmp_path: Path
) -> None:
    env = {
        "OPENAI_BASE_URL": _with_userinfo(server.base_url),
        "OPENAI_API_KEY": KEY,
        "DISSENSUS_MODEL": None,
    }
    res = cli(
        "negotiate", EXAMPLES / "concord" / "llm-checkout.yaml", "--model", "openai:m", env=env
    )
    assert res.code == 2, res.err
    assert "$OPENAI_BASE_URL carries credentials" in res.err
    assert PASSWORD not in res.err + res.out and "Basic" not in res.err + res.out
    assert server.requests_received == 0


def test_basic_credentials_are_scrubbed_from_errors_as_bearer_tokens_are() -> None:
    text = "Incorrect API key provided: Basic YWxpY2U6cEFzU3cwcmRYWVo= (also basic dG9rZW4=)"
    out = redact(text)
    assert "YWxp" not in out and "dG9r" not in out and out.count("[REDACTED]") == 2


class _EchoBasic(BaseHTTPRequestHandler):
    """Answers ``status`` quoting ``Basic`` credentials, as a proxy in front of a server may."""

    status: ClassVar[int] = 401

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = json.dumps(
            {"error": {"message": "bad credentials: Basic YWxpY2U6cEFzU3cwcmRYWVo="}}
        ).encode()
        self.send_response(self.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.mark.parametrize("status", [401, 407])
def test_a_refusal_quoting_basic_credentials_is_scrubbed(status: int) -> None:
    """A 401's message is not shown at all; a 407's is, its ``Basic`` credentials scrubbed."""
    handler = type("_Echo", (_EchoBasic,), {"status": status})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
        backend = OpenAIBackend("m", base_url=url, api_key=KEY, timeout_s=5)

        error = refused(backend)
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert error.status == status and "YWxp" not in str(error)
    if status == 401:
        assert "the server refused the API key given as the api_key argument" in str(error)
        assert "bad credentials" not in str(error)
    else:
        assert "bad credentials: [REDACTED]" in str(error)


UNSENDABLE_KEYS = {
    " padded-key ": "has leading or trailing whitespace",
    "padded-key\n": "has leading or trailing whitespace",
    "\tpadded-key": "has leading or trailing whitespace",
    "padded\u201dkey": r"character 7 is U\+201D",
    "padded key": "character 7 is a space",
    "padded\x00key": r"character 7 is U\+0000",
}


@pytest.mark.parametrize("key", list(UNSENDABLE_KEYS))
def test_a_key_that_cannot_be_sent_is_refused_naming_the_variable_before_any_request(
    key: str, server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whitespace around a key made every attempt a retried ``connection`` error (the HTTP
    client refused the header) charged to the budget; a non-ASCII one a
    ``UnicodeEncodeError``. Neither said the key was at fault."""
    if "\x00" in key:  # no environment variable can hold a NUL: the argument only
        with pytest.raises(ConfigError, match=UNSENDABLE_KEYS[key]) as caught:
            OpenAIBackend("m", base_url=server.base_url, api_key=key)
        assert caught.value.field == "api_key" and "padded" not in str(caught.value)
        return
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", key)
    for make in (
        lambda: make_backend("openai:m"),
        lambda: resolve_model("openai:m"),
        lambda: check_model_spec("openai:m"),
        lambda: OpenAIBackend("m"),  # the SDK would read $OPENAI_API_KEY itself
    ):
        with pytest.raises(ConfigError, match=UNSENDABLE_KEYS[key]) as caught:
            make()
        assert str(caught.value).count("$OPENAI_API_KEY ") == 1
        assert "padded" not in str(caught.value)
    monkeypatch.delenv("OPENAI_API_KEY")  # given as an argument: named as the argument
    with pytest.raises(ConfigError, match=UNSENDABLE_KEYS[key]) as caught:
        OpenAIBackend("m", base_url=server.base_url, api_key=key)
    assert caught.value.field == "api_key" and "padded" not in str(caught.value)
    assert server.requests_received == 0


def test_an_empty_key_argument_is_refused() -> None:
    with pytest.raises(ConfigError, match="the API key is empty") as caught:
        OpenAIBackend("m", base_url="http://127.0.0.1:9/v1", api_key="")
    assert caught.value.field == "api_key"


def test_a_panel_members_unsendable_key_names_its_api_key_env(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("MEMBER_B_KEY", " padded-key ")
    url = "http://127.0.0.1:9/v1"
    settings = PanelSettings.model_validate(
        {
            "members": [
                {"name": "a", "model": "openai:m", "base_url": url},
                {"name": "b", "model": "openai:m", "base_url": url, "api_key_env": "MEMBER_B_KEY"},
            ]
        }
    )
    with pytest.raises(ConfigError, match=r"\$MEMBER_B_KEY has leading or trailing") as caught:
        Members.open(settings)
    assert "padded" not in str(caught.value)


def test_the_cli_refuses_a_padded_key_before_the_run(server: FakeServer) -> None:
    env = {
        "OPENAI_BASE_URL": server.base_url,
        "OPENAI_API_KEY": " padded-key ",
        "DISSENSUS_MODEL": None,
    }
    res = cli(
        "negotiate", EXAMPLES / "concord" / "llm-checkout.yaml", "--model", "openai:m", env=env
    )
    assert res.code == 2, res.err
    assert "$OPENAI_API_KEY has leading or trailing whitespace" in res.err
    assert "padded" not in res.err + res.out and len(res.err.strip().splitlines()) == 1
    assert server.requests_received == 0


def _as_a_word(key: str, text: str) -> bool:
    return re.search(rf"(?<![A-Za-z0-9_-]){re.escape(key)}(?![A-Za-z0-9_-])", text) is not None


def test_a_short_key_is_scrubbed_where_it_stands_as_a_word() -> None:
    assert redact("Incorrect API key provided: x", ("x",)) == (
        "Incorrect API key provided: [REDACTED]"
    )
    assert redact("HTTP 401: key '1' (1)", ("1",)) == "HTTP 401: key '[REDACTED]' ([REDACTED])"
    assert redact("x-request-id max ab abc", ("ab",)) == "x-request-id max [REDACTED] abc"
    assert redact("key=ab&x=1", ("ab",)) == "key=[REDACTED]&x=1"


@pytest.mark.parametrize("key", ["x", "ab", "1", "-", "k3y"])
def test_a_401_echoing_a_short_key_does_not_show_it(
    key: str, server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Keys under four characters were not scrubbed: ``OPENAI_API_KEY=x`` read back as
    ``Incorrect API key provided: x`` in the CLI's error, the record and the journal."""
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", key)
    client = resolve_model("openai:m", settings=ClientSettings(max_retries=0))
    with pytest.raises(ModelCallError) as caught:
        client.chat_sync(ChatRequest(messages=[Message(role="user", content="hi")]))
    client.close()
    assert server.faults["auth_error"] == 1  # the server did echo the key back
    # the client's own count ("after 1 attempt(s)") is not the key
    text = f"{caught.value} {caught.value.attempts}".replace("after 1 attempt(s)", "")
    assert "HTTP 401: the server refused the API key in $OPENAI_API_KEY" in text
    assert "Incorrect API key provided" not in text  # the server's message is not shown
    assert not _as_a_word(key, text), text
    if key == "1":
        assert "401" in str(caught.value)  # a number holding the key is left as it is


def test_the_cli_does_not_show_a_short_key_a_server_echoes(server: FakeServer) -> None:
    """The evaluations a model call failed show its error (the key ``x`` was echoed)."""
    env = {
        "OPENAI_BASE_URL": server.base_url,
        "OPENAI_API_KEY": "x",
        "DISSENSUS_MODEL": None,
        "COLUMNS": "400",
    }
    res = cli(
        "negotiate", EXAMPLES / "concord" / "llm-checkout.yaml", "--model", "openai:m", env=env
    )
    assert server.faults["auth_error"] >= 1
    shown = res.out + res.err
    assert "the server refused the API key in $OPENAI_API_KEY" in shown, shown
    assert "provided: x" not in shown


class _Completions(BaseHTTPRequestHandler):
    """Answers every POST with a chat completion, keeping the request targets it saw."""

    seen: ClassVar[list[str]] = []

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.seen.append(self.path)
        body = json.dumps(
            {"choices": [{"message": {"content": "ok"}, "finish_reason": "stop"}], "model": "m"}
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


TRANSPORTS: list[Transport] = ["httpx", "aiohttp"] if aiohttp_available() else ["httpx"]


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_base_urls_query_is_kept_after_the_endpoint_path(
    transport: Transport, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``OPENAI_BASE_URL=http://HOST/v1?api-version=V`` asked ``/v1/`` (the SDK's merge put
    the endpoint's path into the query) and got a 404: the path goes before the query."""
    handler = type("Seen", (_Completions,), {"seen": []})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        port = httpd.server_address[1]
        monkeypatch.setenv("OPENAI_BASE_URL", f"http://127.0.0.1:{port}/v1?api-version=2024-06-01")
        monkeypatch.setenv("OPENAI_API_KEY", KEY)
        backend = OpenAIBackend("m", transport=transport)
        client = ModelClient(backend, settings=ClientSettings(max_retries=0))
        answer = client.chat_sync(ChatRequest(messages=[Message(role="user", content="hi")]))
        client.close()
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert answer.text == "ok"
    assert handler.seen == ["/v1/chat/completions?api-version=2024-06-01"]


def test_a_base_url_with_a_query_reaches_the_loopback_server(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with FakeServer(parse_script({"default": "fine"})) as srv:
        monkeypatch.setenv("OPENAI_BASE_URL", f"{srv.base_url}?api-version=1&x=%2F")
        monkeypatch.setenv("OPENAI_API_KEY", KEY)
        client = resolve_model("openai:m", settings=ClientSettings(max_retries=0))
        answer = client.chat_sync(ChatRequest(messages=[Message(role="user", content="hi")]))
        client.close()
        assert answer.text == "fine" and srv.requests_received == 1


def test_a_refused_key_names_only_the_variable_it_came_from(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An error about a key names the variable the key was read from, never another that
    happens to hold the same text (an empty ``$MAKEFLAGS`` under ``make`` was named as
    the source of an empty key given as an argument)."""
    monkeypatch.setenv("SOME_EMPTY", "")
    monkeypatch.setenv("SOME_PADDED", " padded ")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    for key in ("", " padded "):
        with pytest.raises(ConfigError) as caught:
            OpenAIBackend("m", base_url="http://127.0.0.1:9/v1", api_key=key)
        assert caught.value.field == "api_key" and "$SOME" not in str(caught.value)
    with pytest.raises(ConfigError) as caught:
        OpenAIBackend(
            "m", base_url="http://127.0.0.1:9/v1", api_key=" padded ", key_env="SOME_PADDED"
        )
    assert str(caught.value).startswith("$SOME_PADDED has leading or trailing whitespace")


@pytest.mark.parametrize("base_url", [True, False], ids=["with-base-url", "without"])
def test_an_empty_key_variable_is_refused_as_empty_not_taken_as_unset(
    base_url: bool, server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``OPENAI_API_KEY=''`` was read as no key at all: with a base URL the placeholder key
    ``unused`` was sent, without one the error said the variable "is not set"."""
    if base_url:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    else:
        monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "")
    for make in (
        lambda: make_backend("openai:m"),
        lambda: resolve_model("openai:m"),
        lambda: check_model_spec("openai:m"),
        lambda: OpenAIBackend("m"),
    ):
        with pytest.raises(ConfigError, match=r"\$OPENAI_API_KEY is empty$"):
            make()
    settings = PanelSettings.model_validate(
        {
            "members": [
                {"name": "a", "model": "openai:m", "base_url": server.base_url},
                {"name": "b", "model": "openai:m", "base_url": server.base_url},
            ]
        }
    )
    with pytest.raises(ConfigError, match=r"member a: \$OPENAI_API_KEY is empty") as caught:
        Members.open(settings)
    assert caught.value.field == "panel.members.0.model"
    assert server.requests_received == 0


def test_a_404_from_a_base_url_without_v1_says_the_v1_is_most_likely_missing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``OPENAI_BASE_URL=http://host:8000`` (no ``/v1``) asked ``/chat/completions``, which
    an OpenAI-compatible server does not serve: the 404 says what most likely went wrong.
    A 404 under ``/v1/`` (a model the server lacks) says nothing more."""
    with FakeServer(parse_script({"default": "fine"})) as srv:
        root = srv.base_url.removesuffix("/v1")
        assert root != srv.base_url
        monkeypatch.setenv("OPENAI_API_KEY", KEY)
        said = []
        for url in (root, srv.base_url + "/nothing/v2", root + "/v1beta/openai"):
            monkeypatch.setenv("OPENAI_BASE_URL", url)
            client = resolve_model("openai:m", settings=ClientSettings(max_retries=0))
            with pytest.raises(ModelCallError) as exc:
                client.chat_sync(ChatRequest(messages=[Message(role="user", content="hi")]))
            client.close()
            said.append(str(exc.value))
    assert "HTTP 404" in said[0]
    assert "the request went to /chat/completions" in said[0]
    assert "the base URL most likely lacks its /v1" in said[0]
    assert "HTTP 404" in said[1] and "lacks its /v1" not in said[1]
    assert "HTTP 404" in said[2] and "lacks its /v1" not in said[2]  # another version
