"""A server echoing the API key encoded shows it nowhere.

* A refused key (401, 403) keeps its status and a fixed message naming the variable the
  key came from; the server's message is dropped whole, so no encoding of the key in it
  reaches an error, the journal or the chat door's ``dissensus.members[].why``.
* Any other error message passed on is scrubbed of the key encoded: base64 (standard and
  URL-safe, with and without padding), hex and percent-encoding of the whole key, and
  the key's base64 inside a longer base64 string (``Basic base64(user:key)``) at each
  alignment it can have there.

Before, a 401 quoting ``base64(key)`` read back in ``decide``'s error, in ``runs
export`` (``model.failed``, ``case.followup``) and in the door's response.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import threading
from collections.abc import Iterator
from contextlib import ExitStack
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from chat_helpers import live_server
from cli_helpers import cli
from dissensus.llm.fakeserver import FakeServer, FaultPlan, ServerSettings
from dissensus.llm.openai_backend import PLACEHOLDER_KEY, SECRET_RUN, OpenAIBackend, redact
from dissensus.llm.scripted import ScriptedRules
from dissensus.serve import ServeSettings, create_app
from dissensus.store.journal import Journal
from llm_helpers import key_echoing, refused
from serve_helpers import write_tokens

KEY = "zq-SuperSecretKeyValue-0123456789abcdef"
MEMBER_KEY = "mk-AnotherMemberSecret_9876543210ZYXWV"
KEY_CHARS = st.characters(min_codepoint=0x21, max_codepoint=0x7E)  # a key's: printable ASCII
B64_RUN = re.compile(r"[A-Za-z0-9+/_-]{4,}")


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode("ascii")


def _forms(key: str) -> dict[str, str]:
    """``key`` plainly and in every encoding redacted."""
    raw = key.encode()
    return {
        "plain": key,
        "b64": _b64(raw),
        "b64-unpadded": _b64(raw).rstrip("="),
        "b64url": _b64url(raw),
        "b64url-unpadded": _b64url(raw).rstrip("="),
        "hex": raw.hex(),
        "HEX": raw.hex().upper(),
        "percent": "".join(f"%{b:02X}" for b in raw),
        "percent-lower": "".join(f"%{b:02x}" for b in raw),
        "quoted": quote(key, safe=""),
        # the key inside a longer base64 string, at each of its three alignments
        "basic": f"Basic {_b64(f'alice:{key}'.encode())}",
        "wrapped0": _b64(f"u1:{key}:tail".encode()),
        "wrapped1": _b64url(f"u:{key}!x".encode()),
        "wrapped2": _b64(f"u234:{key}".encode()),
    }


def _echoes(key: str) -> str:
    """A server's message quoting ``key`` in every form of :func:`_forms`."""
    forms = _forms(key)
    return "Incorrect API key provided. " + " ".join(f"{k}={v}" for k, v in forms.items())


def _decodings(run: str) -> Iterator[bytes]:
    """``run`` (base64 characters) decoded from each of its first four characters."""
    run = run.replace("-", "+").replace("_", "/")
    for start in range(4):
        piece = run[start:]
        piece = piece[: len(piece) - len(piece) % 4]
        try:
            yield base64.b64decode(piece)
        except (binascii.Error, ValueError):
            continue


def leaks(text: str, key: str) -> list[str]:
    """How ``text`` still shows ``key``: a :data:`SECRET_RUN`-character piece of it in any
    case, its hex or percent-encoding, or 8 of its bytes in a base64 run at any alignment."""
    found = []
    lowered = text.lower()
    pieces = {key[i : i + SECRET_RUN].lower() for i in range(len(key) - SECRET_RUN + 1)}
    if any(p in lowered for p in pieces):
        found.append("plain")
    if key.encode().hex() in lowered:
        found.append("hex")
    if "".join(f"%{b:02x}" for b in key.encode()) in lowered:
        found.append("percent")
    windows = {key.encode()[i : i + 8] for i in range(len(key) - 7)}
    for run in B64_RUN.findall(text):
        if any(w in decoded for decoded in _decodings(run) for w in windows):
            found.append(f"base64 {run[:12]}...")
    return found


def test_the_oracle_sees_every_form_the_server_sends() -> None:
    """The check below is not vacuous: unredacted, every form is found."""
    for name, form in _forms(KEY).items():
        assert leaks(form, KEY), name


def test_every_encoding_of_the_key_is_redacted() -> None:
    out = redact(_echoes(KEY), (KEY,))
    assert leaks(out, KEY) == [], out
    assert "Incorrect API key provided." in out
    assert out.count("[REDACTED]") == 14, out


@given(
    secret=st.text(KEY_CHARS, min_size=SECRET_RUN, max_size=60),
    before=st.binary(max_size=20),
    after=st.binary(max_size=20),
    urlsafe=st.booleans(),
    padded=st.booleans(),
)
def test_a_key_inside_a_longer_base64_string_is_redacted_at_any_alignment(
    secret: str, before: bytes, after: bytes, urlsafe: bool, padded: bool
) -> None:
    """Whatever bytes surround the key (drawn outside ASCII, so none is a byte of the
    key), its base64 leaves no 8 of its bytes decodable at any alignment, nor its hex."""
    before, after = bytes(b | 0x80 for b in before), bytes(b | 0x80 for b in after)
    encoded = (_b64url if urlsafe else _b64)(before + secret.encode() + after)
    if not padded:
        encoded = encoded.rstrip("=")
    out = redact(f"token {encoded} and {secret.encode().hex().upper()}", (secret,))
    assert "[REDACTED]" in out
    windows = {secret.encode()[i : i + 8] for i in range(len(secret) - 7)}
    for run in B64_RUN.findall(out):
        assert not any(w in d for d in _decodings(run) for w in windows), (run, out)
    assert secret.encode().hex() not in out.lower()


@given(text=st.text(st.sampled_from("acdefx .:'=%"), max_size=80))
def test_text_without_an_encoding_of_the_key_keeps_its_words(text: str) -> None:
    assert redact(text, (KEY,)) == text


# --- a loopback server echoing the key -----------------------------------------------


def _echoing(status: int) -> type[BaseHTTPRequestHandler]:
    """Answers every POST with ``status``, its message quoting the key it was sent."""
    return key_echoing(status, _echoes)


def _serve(stack: ExitStack, status: int) -> str:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _echoing(status))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    stack.callback(httpd.server_close)
    stack.callback(httpd.shutdown)
    return f"http://127.0.0.1:{httpd.server_address[1]}/v1"


@pytest.fixture(params=[401, 403, 400])
def echoing(request: pytest.FixtureRequest) -> Iterator[tuple[int, str]]:
    with ExitStack() as stack:
        yield request.param, _serve(stack, request.param)


def _check_message(status: int, text: str, variable: str) -> None:
    if status == 401:
        assert f"HTTP 401: the server refused the API key in ${variable}" in text, text
    if status == 403:  # not blamed on the key: a valid key may lack access to a model
        assert f"HTTP 403: permission denied to the API key in ${variable}" in text, text
        assert "does not allow this request" in text
    if status in (401, 403):
        assert "Incorrect API key provided" not in text  # the server's message is dropped
    else:
        assert f"HTTP {status}" in text and "Incorrect API key provided" in text, text
        assert "[REDACTED]" in text


def test_the_backend_error_shows_no_encoding_of_the_key(
    echoing: tuple[int, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    status, url = echoing
    monkeypatch.setenv("MEMBER_KEY", MEMBER_KEY)
    backend = OpenAIBackend("m", base_url=url, api_key=MEMBER_KEY, key_env="MEMBER_KEY")

    error = refused(backend)
    assert error.status == status and error.kind == "client_error" and not error.retryable
    _check_message(status, str(error), "MEMBER_KEY")
    assert leaks(str(error), MEMBER_KEY) == []


def _panel_file(path: Path) -> Path:
    outputs = [
        {"agent": "a", "decision": "1", "reasoning": "apples oranges bananas"},
        {"agent": "b", "decision": "2", "reasoning": "quantum chromodynamics lattice gauge"},
        {"agent": "c", "decision": "1", "reasoning": "zebra giraffe elephant savanna"},
    ]
    line = {
        "id": "p1",
        "meta": {"question": "Which is better?", "options": {"1": "one", "2": "two"}},
        "outputs": outputs,
    }
    path.write_text(json.dumps(line) + "\n", encoding="utf-8")
    return path


def test_decide_shows_no_encoding_of_the_key_in_its_error_or_journal(
    echoing: tuple[int, str], tmp_path: Path
) -> None:
    """A live re-ask against a server echoing the key: ``decide``'s error output and the
    run's export (``model.failed``, ``case.followup``) hold no form of the key."""
    status, url = echoing
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        yaml.safe_dump(
            {
                "reading": {"similarity": "tfidf"},
                "seek_context": {"followup": "reask", "use_recorded": False, "max_followups": 1},
            }
        ),
        encoding="utf-8",
    )
    journal = str(tmp_path / "j.sqlite")
    env = {"OPENAI_API_KEY": KEY, "OPENAI_BASE_URL": url, "DISSENSUS_MODEL": None}
    res = cli(
        "decide", _panel_file(tmp_path / "p.jsonl"), "--policy", policy,
        "--model", "openai:gpt-x", "--journal", journal, "--run-id", "R", env=env,
    )  # fmt: skip
    assert res.code == 1, res.err  # every follow-up failed
    _check_message(status, res.err, "OPENAI_API_KEY")
    exported = cli("runs", "export", "R", "--journal", journal)
    assert exported.code == 0, exported.err
    types = {json.loads(line)["type"] for line in exported.out.splitlines()}
    assert {"model.failed", "case.followup"} <= types
    _check_message(status, exported.out, "OPENAI_API_KEY")
    for shown in (res.out, res.err, exported.out, exported.err):
        assert leaks(shown, KEY) == [], shown


YES = {"decision": "yes", "reasoning": "The statement holds for every case we checked."}
ASK = {"model": "m", "messages": [{"role": "user", "content": "Does the claim hold?"}]}


def test_the_chat_door_shows_no_encoding_of_a_members_key(
    echoing: tuple[int, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``dissensus serve``: a member whose server echoes its key (``api_key_env``) fails,
    and neither the door's response (``dissensus.members[].why``) nor the journal shows
    the key; the two other members answer."""
    status, url = echoing
    monkeypatch.setenv("MEMBER_KEY", MEMBER_KEY)
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    with ExitStack() as stack:
        good = [
            stack.enter_context(
                FakeServer(ScriptedRules(default=YES), ServerSettings(faults=FaultPlan()))
            )
            for _ in range(2)
        ]
        members: list[dict[str, Any]] = [
            {"name": "bad", "model": "openai:m", "base_url": url, "api_key_env": "MEMBER_KEY"}
        ]
        members += [
            {"name": f"m{i}", "model": "openai:m", "base_url": s.base_url, "family": f"f{i}"}
            for i, s in enumerate(good)
        ]
        policy = tmp_path / "policy.yaml"
        panel = {"answer": "structured", "options": ["yes", "no"], "members": members}
        panel |= {"max_retries": 0, "attempt_timeout_s": 20}
        policy.write_text(
            json.dumps({"reading": {"similarity": "tfidf"}, "panel": panel}), encoding="utf-8"
        )
        journal = str(tmp_path / "journal.sqlite")
        settings = ServeSettings(
            journal=journal, policy=str(policy), tokens=str(write_tokens(tmp_path / "t.txt"))
        )
        base = stack.enter_context(live_server(lambda: create_app(settings)))
        res = httpx.post(
            base + "/v1/chat/completions",
            json=ASK,
            headers={"Authorization": "Bearer tok-sub"},
            timeout=60,
        )
    assert res.status_code == 200, res.text
    reports = {m["name"]: m for m in res.json()["dissensus"]["members"]}
    assert reports["bad"]["status"] == "failed", reports
    _check_message(status, reports["bad"]["why"], "MEMBER_KEY")
    assert leaks(res.text, MEMBER_KEY) == [] and leaks(res.text, KEY) == [], res.text
    with Journal(journal) as opened:
        runs = [r.run_id for r in opened.runs()]
    assert runs
    for run in runs:
        exported = cli("runs", "export", run, "--journal", journal)
        assert exported.code == 0, exported.err
        assert leaks(exported.out, MEMBER_KEY) == [], exported.out


@pytest.mark.parametrize("key", ["unused", "EMPTY", "ollama", "test", "abcd"])
def test_a_short_key_blanks_no_ordinary_word_in_other_cases(key: str) -> None:
    """A short key's encodings equal to it (an alphanumeric key's percent-encoding) are
    the key itself, replaced as written only; its hex is replaced as written, not in any
    case: a server's message stays readable beside a placeholder key."""
    text = f"Unused parameter; empty messages; Ollama error; see the Test docs; {key} here"
    shown = redact(text, (key,))
    assert f"{key} here" not in shown and "[REDACTED] here" in shown
    for word in ("Unused", "empty", "Ollama", "Test"):
        if word != key:
            assert word in shown, shown
    hexed = key.encode().hex()
    assert redact(hexed, (key,)) == "[REDACTED]"
    if hexed.upper() != hexed:
        assert redact(hexed.upper(), (key,)) == hexed.upper()


def test_the_placeholder_key_sent_with_no_key_set_is_not_scrubbed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    backend = OpenAIBackend("m", base_url="http://127.0.0.1:9/v1", api_key=PLACEHOLDER_KEY)
    assert backend._redact("unused parameter 'top_k'") == "unused parameter 'top_k'"
