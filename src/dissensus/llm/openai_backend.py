"""OpenAI-compatible backend on the official ``openai`` SDK (``AsyncOpenAI``).

Works against any server speaking ``/v1/chat/completions``: OpenAI, vLLM, Ollama,
llama.cpp server, LM Studio, the loopback server of :mod:`dissensus.llm.fakeserver`.
One attempt per :meth:`OpenAIBackend.send`; the SDK's own retries are off
(``max_retries=0``) so the client owns retries and counts every attempt.

Choices this module makes:

* **Failures** map to :class:`BackendError` kinds: 429 ``rate_limit``, 408/409/5xx
  ``server_error`` and timeouts, connection errors, bodies that are not JSON and
  responses without choices are retryable; other 4xx are ``client_error`` (not
  retried). A 400/422 whose message names ``response_format`` / ``json_schema`` /
  ``json_object`` while a structured mode was requested is
  :class:`SchemaModeUnsupported`, and the client falls back.
* **Deadline.** ``timeout_s`` bounds each attempt as a whole (``asyncio.timeout``
  around the request), not only each read: the request is cancelled when it passes.
* **Structured modes.** ``schema`` sends ``response_format={"type": "json_schema",
  ...}`` with ``strict: true`` when the schema meets strict mode's rules
  (:func:`dissensus.llm.schemas.is_strict`; the per-request schemas of DCI and CONCORD
  do) and ``strict: false`` otherwise (pydantic schemas rarely meet them);
  ``object`` sends ``{"type": "json_object"}`` and puts the schema in the system
  message; ``none`` puts the schema in the system message only. The schema text is
  appended to a leading system message, or sent as a new first system message.
* **Context headers.** ``X-Dissensus-Agent`` / ``-Role`` / ``-Stage`` (percent-encoded)
  tell scripted servers who is asking; set ``context_headers=False`` to omit them.
* **Secrets.** The API key lives only inside the SDK client. ``repr`` shows whether a
  key is set, never the key. A server refusing the key (401, 403, the SDK's
  ``AuthenticationError`` / ``PermissionDeniedError``) is reported by its status and a
  fixed message naming where the key came from (``$OPENAI_API_KEY``, a panel member's
  ``api_key_env``, the ``api_key`` argument, or the placeholder sent with no key set),
  never by the server's message: that is the message most likely to quote the key, in
  forms no scrubbing can list (a 401 quoting ``base64(key)`` reached ``decide``'s error,
  the journal and the chat door's ``why``). Every other error message is scrubbed of
  ``Bearer ...`` and ``Basic ...`` credentials, of ``sk-...`` strings and of the key
  (:func:`redact`, which also says what is not covered): the key however short (under
  four characters wherever it stands as a word of its own), every run of 12 or more of
  its consecutive characters in any case (a lower-cased or partial quote), its base64
  (standard and URL-safe, padded or not), hex and percent-encoding, and its base64
  inside a longer base64 string (``base64(user:key)``) at each of the three alignments
  it can have there (at most two characters at each edge are left, never a whole byte
  of the key). SDK exceptions are not chained (their text may quote a server that
  echoes headers): the
  :class:`BackendError` is built in the ``except`` block and raised after it, so neither
  its ``__cause__`` nor its ``__context__`` holds the SDK exception (``raise ... from
  None`` only hid it from display). A base URL carries no credentials: one with
  user-info (which the HTTP client sends as ``Basic`` authentication in place of the
  key) or a query parameter named like a credential, or one that is not an ``http(s)``
  URL with a host, is a :class:`~dissensus.errors.ConfigError` when the backend is
  made, before any request (:func:`base_url_problem`, the rule of a policy's panel
  members), naming the environment variable that holds it (``$OPENAI_BASE_URL``), else
  the ``base_url`` argument. ``repr`` hides a base URL's query. So is a key that cannot
  be sent as it is (:func:`api_key_problem`: empty, whitespace around it, a character
  outside printable ASCII or a space), naming ``$OPENAI_API_KEY`` (or the variable
  holding it, a panel member's ``api_key_env``), else the ``api_key`` argument: refused,
  not stripped, since a key is sent as it is; the HTTP client would refuse it on every
  attempt, each retried as a connection error, or fail to encode it. With no
  ``api_key``, the key checked (and scrubbed from errors) is ``$OPENAI_API_KEY``, which
  the SDK would read.
* **Request path.** The request goes through the SDK's client (``client.request``, the
  call ``client.post`` makes, on ``/chat/completions``: its authentication, headers,
  timeouts, connection pool and status errors) with the body built here as plain JSON, and the answer comes back as
  bytes (streamed, "Response size") read with ``orjson``; ``chat.completions.create`` would re-walk the body
  against the SDK's typed parameters and build response models of which only five
  fields are read, about a third of a call's CPU on loopback. A body that is not JSON
  is a retryable ``malformed_response``, as a body without ``choices`` is, and so is a
  body whose first choice is not an object or holds no ``message`` object (``{"choices":
  ["The answer is 7."]}``): such a body is no chat completion, never an empty answer. A
  ``message`` object whose ``content`` is ``""`` or ``null`` (and no ``refusal``) is an
  empty answer, a message holding only ``tool_calls`` included: no tools are offered,
  so a tool call is no answer, and asking again would likely get the same. A body whose
  answer cannot be read (these, ``choices: []``) still charges the tokens its ``usage``
  reports: the :class:`~dissensus.llm.base.BackendError` carries them, and the client
  counts them in the call's usage and its budget, as it counts an answer's. The endpoint
  is joined with the base URL once per client (:meth:`OpenAIBackend._endpoint`), its
  path before the base URL's query (``/v1?api-version=V`` asks
  ``/v1/chat/completions?api-version=V``). So are the SDK's request options
  (``FinalRequestOptions``), built by the SDK's own constructor once per client and
  copied with each call's body and headers (:meth:`OpenAIBackend._options`):
  ``client.post`` built them anew on every call, copying each default field's value.
  That options class is the SDK's own (``openai._models``, not its public interface;
  ``constraints.txt`` pins the SDK release the figures were measured with): an SDK
  without it there, or whose constructor takes other arguments, is asked through the
  public ``client.post`` instead, the same request built anew on every call.
  The answer is asked for as the HTTP library's own response (``cast_to`` its
  ``Response`` class, which the SDK returns as it is, its body unread), not as the
  SDK's stream of bytes wrapped around it, which was built only to be unwrapped. The
  two cut a call's instructions through this backend on loopback by 15 % (callgrind,
  200 calls: 2.05 M per call with ``client.post`` and the stream, 1.74 M).
* **Request body.** The body is handed to the SDK as JSON bytes written by ``orjson``
  (:func:`_encoded`), which the SDK sends as they are: the same JSON document its own
  writer makes (compact separators, UTF-8 rather than ``\\u`` escapes, ``NaN``
  refused), made in a fraction of the time, on the path every member's request takes
  before it is sent. A body
  ``orjson`` cannot write (an integer over 64 bits, a lone surrogate) is handed over as
  it is, and the SDK writes or refuses it as before.
* **Response size.** The body is streamed and read up to :data:`MAX_RESPONSE_BYTES`
  (4 MiB, as the HTTP client decodes it; ``max_response_bytes`` sets another): a body
  whose ``Content-Length`` is longer is not read at all, and one that goes past it is
  not read further (:func:`_capped_body`). The attempt fails as ``response_too_large``,
  not retried (a retry would fetch it again). A completion a panel can hold is one text
  field (32,768 characters, :data:`~dissensus.io.limits.MAX_FIELD_CHARS`, at most 6 bytes
  each as JSON escapes them: 192 KiB); the cap leaves room for a reasoning model's
  reasoning text and the usage beside it, and bounds a call's memory whatever a server
  sends (a member answering 300 MiB held them all before the answer was refused). A
  failure while the body is read (the connection dropped, a read timed out) is a
  retryable ``connection`` or ``timeout``, as it is while the request is sent. An error
  status's body is read up to :data:`ERROR_BODY_BYTES` ("Error bodies").
* **Error messages.** The message of an error status (4xx/5xx other than a refused
  key) is the server's, scrubbed as above and cut to :data:`MAX_SERVER_MESSAGE_CHARS`
  characters, with the number of characters left out: a server answering 500 with 50 MB
  spent tens of seconds of CPU scrubbing it, after the attempt's deadline (a 5 s attempt
  took 15 s) and while the event loop served nothing else, and put the whole body in the
  error, the failures list and the journal. The SDK reads no message from a body cut at
  :data:`ERROR_BODY_BYTES` ("Error bodies"; its JSON is cut too): the body's text is the
  message, its head shown as above and ending "(the rest not shown: the body is over
  65536 bytes, not read further)" in place of a count.
* **Echoed keys.** An answer (its text, refusal or ``model``) quoting the key as it
  was sent, as a server echoing the request's headers into its completion does, has
  it replaced by ``[REDACTED]`` before the answer is used: it was recorded
  (``record:``), journalled and shown as any answer. Only the key as sent, and only a
  key of :data:`SECRET_RUN` characters or more (a shorter one, a local server's
  placeholder, is likely a word an answer holds); an answer is never scrubbed of
  anything else (encoded or partial forms are for error messages, above), since an
  answer's words are the vote.
* **Error bodies.** The SDK reads an error status's body itself, whole, before it raises
  its status error: a server answering 500 with 50 MB took a call to about 465 MB of
  memory, and a gzip-encoded one could inflate to more. The SDK's HTTP client is built
  here (``DefaultAsyncHttpxClient``, or ``DefaultAioHttpClient``: the SDK's defaults, the
  same proxy variables) with a response hook, :func:`_cap_error_body` in ``event_hooks``
  (public API of the HTTP library; no private attribute of the SDK is touched). For a
  status of 400 or more it replaces the response's stream, before the SDK reads it, by
  one that ends after :data:`ERROR_BODY_BYTES` (64 KiB) of the body as decoded, or of its
  raw bytes, whichever comes first; the rest is not read and the connection is closed. A
  server's message is at most 2,000 characters of it ("Error messages"). The bound holds
  for the decoded size, not only the raw one: the body is decoded by the HTTP library's
  own decoders (a second response over the raw stream, so the response the SDK reads has
  its ``Content-Encoding`` removed), handed :data:`_ERROR_BODY_PIECE` raw bytes at a time
  and read one decoded chunk at a time, so a gzip, deflate, brotli or zstd bomb (50 MB
  in 50 KB of gzip) costs at most one chunk past the cap (the SDK's httpx fork inflates at
  most 1 MiB a chunk; httpx's gzip and deflate at most about 264 KB from a piece). A body
  cut so is never flushed through its decoder: a gzip or zstd stream cut in the middle
  is no decoding error, and the failure is the status's, as for a short body. A 200's body
  is not touched ("Response size" bounds it). The SDK lets the HTTP library's exception
  through when reading an error body fails (a 500 whose body is cut short by a dropped
  connection, or is not the gzip it claims): that exception holds the request, the
  ``Authorization`` header and the key with it, and reached the caller chained under the
  failure, as a non-retried ``unexpected`` one. It is a retryable ``connection`` (or
  ``timeout``) failure like a body read failing on a 200, built without a chain.
* **Transport.** ``transport="httpx"`` (default) is the SDK's own HTTP client;
  ``"aiohttp"`` is the SDK's ``DefaultAioHttpClient`` (``openai[aiohttp]``), about a
  third less CPU per call on loopback, which a panel fanning one request out to many
  members feels (:mod:`dissensus.panels.fanout` takes it where installed). It honours
  the same proxy variables (httpx builds its proxy mounts). It reports a connection the
  server dropped as a timeout; :func:`_dropped` reads the cause, so a dropped
  connection is ``connection`` on both transports. Asking for ``aiohttp`` where it is
  not installed is a :class:`~dissensus.errors.ConfigError`.
* **No telemetry headers.** The SDK's ``X-Stainless-*`` headers (language, package
  version, OS, architecture, runtime and its version, async library, retry count, read
  timeout) are not sent (:data:`_NO_TELEMETRY`): they describe this machine to the
  provider, the retry count is always 0 (retries are dissensus's, one SDK attempt each),
  and building and merging them was about a seventh of a call's instructions on
  loopback (2.59 M against 2.22 M per call through this backend, callgrind).
* **Unreachable servers.** A connection that could not be made (a host name that does
  not resolve, a refused connection, no route) fails as a retryable ``connection``
  naming the server's URL (:func:`safe_url`: no user-info or query) and the operating
  system's reason (:func:`_unreachable`), on both transports: the SDK says only
  "Connection error." (httpx), and aiohttp's refused connection read as "the server
  closed the connection", a run's every record saying so with no word of which server.
* **Cutoff.** Under a :class:`~dissensus.llm.base.Cutoff` (the chat door's decisions at
  shutdown), a cut expires the attempt's deadline at once and the attempt fails as
  ``cut_off`` (not retried); an attempt after the cut is not sent.
* **Usage.** Tokens reported by the server; when it reports none, ``estimate_tokens``.
* **Event loops.** One ``AsyncOpenAI`` per event loop (httpx connections are loop-bound).
* **Import cost.** ``openai`` is imported on first use, not with :mod:`dissensus.llm`
  (it takes seconds to import, and most commands run offline); :meth:`OpenAIBackend.awarm`
  makes that first use happen early (a server calls it at start-up).
"""

from __future__ import annotations

import asyncio
import base64
import contextvars
import json
import math
import os
import re
import sys
import weakref
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import parse_qsl, quote, urlsplit, urlunsplit

import orjson

from dissensus.errors import ConfigError
from dissensus.llm.base import (
    BackendError,
    BackendResponse,
    ChatRequest,
    JsonMode,
    SchemaModeUnsupported,
    current_cutoff,
    estimate_tokens,
)
from dissensus.llm.retry import parse_retry_after
from dissensus.llm.schemas import is_strict
from dissensus.types import JsonObject, JsonSchema

if TYPE_CHECKING:
    import openai
    from openai import AsyncOpenAI

__all__ = [
    "ERROR_BODY_BYTES",
    "MAX_RESPONSE_BYTES",
    "MAX_SERVER_MESSAGE_CHARS",
    "PLACEHOLDER_KEY",
    "OpenAIBackend",
    "Transport",
    "aiohttp_available",
    "api_key_problem",
    "base_url_problem",
    "redact",
    "safe_url",
]

_TOKEN_PATTERNS = (
    re.compile(r"(?i)(?:bearer|basic)\s+[^\s\"',;]+"),
    re.compile(r"sk-[A-Za-z0-9_\-]{4,}"),
)
_CREDENTIAL_PARAM = re.compile(
    r"key|token|secret|passw|pwd|sig|auth|credential|session", re.IGNORECASE
)
"""Query parameter names that carry credentials (``api-key``, ``access_token``, ``sig``)."""
_SCHEMA_WORDS = ("response_format", "json_schema", "json_object", "structured output")
_NAME_OK = re.compile(r"[^A-Za-z0-9_-]")
_PER_CALL = ("x-stainless-retry-count", "x-stainless-read-timeout")
"""Telemetry headers the SDK adds per call unless the call's own headers omit them."""
_NO_TELEMETRY = (
    # Spelled as the SDK spells them: its default headers are a dict, merged
    # case-insensitively only after ours are laid over it.
    "X-Stainless-Lang",
    "X-Stainless-Package-Version",
    "X-Stainless-OS",
    "X-Stainless-Arch",
    "X-Stainless-Runtime",
    "X-Stainless-Runtime-Version",
    "X-Stainless-Async",
    *_PER_CALL,
)
"""The SDK's telemetry headers, none of which is sent (see "No telemetry headers")."""


_SHORT_SECRET = 4
"""Secrets shorter than this are replaced where they stand as a word of their own only."""

SECRET_RUN = 12
"""A run of this many consecutive characters of a secret, in any case, is replaced."""


def _secret_runs(text: str, secret: str) -> str:
    """``text`` with every stretch covered by :data:`SECRET_RUN`-character pieces of
    ``secret`` (case-insensitively) replaced, repeated until none is left (a replacement
    shortens the text, so this ends). One C-level scan per pass: a look-ahead alternation
    of the secret's windows finds every position where one starts; overlapping and
    adjoining windows make one stretch, replaced once."""
    windows = {secret[i : i + SECRET_RUN].lower() for i in range(len(secret) - SECRET_RUN + 1)}
    piece = "|".join(re.escape(w) for w in sorted(windows))
    finder = re.compile(f"(?=(?:{piece}))", re.IGNORECASE)
    while True:
        stretches: list[list[int]] = []
        for found in finder.finditer(text):
            start = found.start()
            if stretches and start <= stretches[-1][1]:
                stretches[-1][1] = start + SECRET_RUN
            else:
                stretches.append([start, start + SECRET_RUN])
        if not stretches:
            return text
        kept, last = [], 0
        for start, end in stretches:
            kept.append(text[last:start])
            last = end
        kept.append(text[last:])
        text = "[REDACTED]".join(kept)


def _encoded_forms(secret: str) -> re.Pattern[str] | None:
    """One pattern finding ``secret`` encoded (see :func:`redact`), longest form first, or
    ``None`` for a secret under :data:`_SHORT_SECRET` characters (whose encodings, a few
    characters each, would blank unrelated text)."""
    if len(secret) < _SHORT_SECRET:
        return None
    data = secret.encode("utf-8")
    exact: set[str] = set()
    for encode in (base64.b64encode, base64.urlsafe_b64encode):
        whole = encode(data).decode("ascii")
        exact.update((whole, whole.rstrip("=")))
        if len(secret) >= SECRET_RUN:
            # Inside a longer base64 string (``Basic base64(user:key)``) the secret starts
            # at bit 0, 8 or 16 of a 24-bit group: encoded after 0, 1 or 2 bytes, the
            # characters made only of the secret's bits are the same whatever surrounds it.
            for shift in (0, 1, 2):
                text = encode(b"\0" * shift + data).decode("ascii")
                exact.add(text[-(-8 * shift // 6) : 8 * (shift + len(data)) // 6])
    encoded = {
        data.hex(),
        quote(secret, safe=""),
        quote(secret),
        "".join(f"%{byte:02x}" for byte in data),
    }
    # An encoding equal to the key, ignoring case (an alphanumeric key's percent-encoding
    # is the key), is the key itself, replaced as written (below); hex and percent forms
    # of a short key are replaced as written too, not in any case ("Unused parameter",
    # "Ollama error" stay readable beside a key "unused" or "ollama").
    plain = secret.casefold()
    encoded = {f for f in encoded - exact if f.casefold() != plain}
    exact = {f for f in exact if f.casefold() != plain}
    folded = len(secret) >= SECRET_RUN
    forms = [(f, False) for f in exact] + [(f, folded) for f in encoded]
    if not forms:
        return None
    forms.sort(key=lambda form: -len(form[0]))
    return re.compile(
        "|".join(f"(?i:{re.escape(f)})" if fold else re.escape(f) for f, fold in forms)
    )


def redact(text: str, secrets: tuple[str, ...] = ()) -> str:
    """``text`` with every secret, bearer or basic credential and ``sk-`` key replaced by
    ``[REDACTED]``. A secret of :data:`_SHORT_SECRET` characters or more is replaced
    wherever it occurs; a shorter one (``x``, a local server's placeholder key) wherever
    it stands as a word of its own, not inside a longer word or number (the key ``1``
    leaves ``HTTP 401`` as it is), so that a one-letter key does not blank every such
    letter of the message and is still never echoed as the key. A secret of
    :data:`SECRET_RUN` characters or more also leaves no run of that many of its
    consecutive characters, in any case: a server quoting the key lower-cased, or part
    of it (``...{key[3:]}``), has each such stretch replaced whole, so the text that is
    left holds no :data:`SECRET_RUN`-character piece of the secret.

    A secret of :data:`_SHORT_SECRET` characters or more is also replaced encoded: base64
    (standard and URL-safe, with and without padding), hex and percent-encoding (any
    case) of the whole secret. One of :data:`SECRET_RUN` characters or more is also found
    inside a longer base64 string (``base64(user:key)``, a token wrapping it) at each of
    the three alignments it can have there: the characters encoding only the secret's
    bits are replaced, leaving at most two characters at each edge that mix its first or
    last byte with its neighbours' bits (never a whole byte of it). Not covered: an
    encoding of part of a secret, a secret encoded after another transformation
    (lower-cased, hashed, encrypted), or encoded twice."""
    for secret in secrets:
        encoded = _encoded_forms(secret)
        if encoded is not None:
            text = encoded.sub("[REDACTED]", text)
    for secret in secrets:
        if len(secret) >= _SHORT_SECRET:
            text = text.replace(secret, "[REDACTED]")
        elif secret:
            word = rf"(?<![A-Za-z0-9_-]){re.escape(secret)}(?![A-Za-z0-9_-])"
            text = re.sub(word, "[REDACTED]", text)
    for pattern in _TOKEN_PATTERNS:
        text = pattern.sub("[REDACTED]", text)
    for secret in secrets:
        if len(secret) >= SECRET_RUN:
            text = _secret_runs(text, secret)
    return text


def base_url_problem(url: str) -> str | None:
    """What is wrong with an OpenAI-compatible server's base URL, or ``None``: not an
    ``http(s)`` URL with a host, credentials in it (user-info, a query parameter or a path
    segment's ``;name=value`` parameter whose name says key, token, secret, password,
    signature or auth), or a fragment (never sent; the client's paths would be appended
    to it). The same rule as a policy's
    ``panel.members.N.base_url`` (:func:`dissensus.pipeline.policy.member_url_problem`):
    the HTTP client sends user-info as ``Basic`` authentication in place of the API key,
    and a URL is shown where a key never is; the key comes from its own variable."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError as exc:
        return f"is not a URL ({exc})"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "is not an http(s) URL with a host"
    if parts.username is not None or parts.password is not None:
        return "carries credentials (user-info before the host)"
    for name, _ in parse_qsl(parts.query, keep_blank_values=True):
        if _CREDENTIAL_PARAM.search(name):
            return f"carries a credential in its query ({name[:40]!r})"
    for segment in parts.path.split("/"):
        for param in segment.split(";")[1:]:
            name = param.partition("=")[0]
            if _CREDENTIAL_PARAM.search(name):
                return f"carries a credential in its path ({name[:40]!r})"
    if "#" in url:
        return (
            "has a fragment ('#...'): a fragment is never sent to the server, and the "
            "paths the client appends to the base URL would be lost in it"
        )
    return None


def api_key_problem(key: str) -> str | None:
    """What is wrong with an API key, or ``None``. A key is sent as it is, in an HTTP
    header: whitespace around it (a copied line's newline, a quoted padding) would be
    refused by the HTTP client on every attempt and a character outside printable ASCII
    could not be encoded, each a failure that says nothing of the key. The problem names
    a character by its position (and code point), never the key."""
    if not key:
        return "is empty"
    if key != key.strip():
        return "has leading or trailing whitespace; an API key is sent as it is, never stripped"
    for position, char in enumerate(key, start=1):
        if not "!" <= char <= "~":
            what = "a space" if char == " " else f"U+{ord(char):04X}"
            return (
                f"has a character no API key has (character {position} is {what}); "
                "a key is printable ASCII without spaces"
            )
    return None


def _refused(
    value: str, problem: str, *, variable: str | None, argument: str, what: str
) -> ConfigError:
    """The :class:`ConfigError` of a base URL or key that cannot be used, naming the
    environment variable it came from (``variable``, when it holds ``value``), else the
    argument that gave it: an error must say where a setting came from without showing it."""
    if variable and os.environ.get(variable) == value:
        return ConfigError(f"${variable} {problem}")
    return ConfigError(f"the {what} {problem}", field=argument)


PLACEHOLDER_KEY = "unused"
"""The key sent to a server given by its base URL when ``$OPENAI_API_KEY`` is not set
(local servers ignore it)."""

_AUTH_STATUSES = {
    401: "the server refused {source} (authentication failed)",
    403: (
        "permission denied to {source}: the server took the key but does not allow this "
        "request (a model, project or region the key has no access to, or a refused key)"
    ),
}
"""Statuses whose server message is never passed on ("Secrets"), and what each says."""


def _key_source(key: str | None, key_env: str | None) -> str:
    """Where the API key came from, as an error names it: never the key itself."""
    for variable in (key_env, "OPENAI_API_KEY"):
        if variable and key is not None and os.environ.get(variable) == key:
            return f"the API key in ${variable}"
    if key is None:
        return "no API key ($OPENAI_API_KEY is not set)"
    if key == PLACEHOLDER_KEY and "OPENAI_API_KEY" not in os.environ:
        return "the placeholder API key sent while $OPENAI_API_KEY is not set"
    return "the API key given as the api_key argument"


def safe_url(url: str | None) -> str | None:
    """``url`` without user-info, query or fragment (which may carry credentials); an
    IPv6 host keeps its brackets (``http://[::1]:8000/v1``)."""
    if url is None:
        return None
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:  # an IPv6 address: without brackets its port would read as part of it
        host = f"[{host}]"
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


Transport = Literal["httpx", "aiohttp"]
"""The HTTP stack under the SDK: its default (httpx) or its aiohttp client."""


def aiohttp_available() -> bool:
    """Whether the SDK's aiohttp client can be used here (aiohttp installed, SDK new enough)."""
    try:
        import aiohttp  # noqa: F401
        import openai
    except ImportError:
        return False
    return hasattr(openai, "DefaultAioHttpClient")


def _dropped(exc: BaseException) -> bool:
    """Whether a timeout the SDK reported was a connection the server dropped: the SDK's
    aiohttp client reports aiohttp's connection errors as httpx's ``ConnectTimeout``."""
    if not isinstance(exc, Exception) or "aiohttp" not in sys.modules:
        return False
    import aiohttp

    cause = exc.__cause__
    while cause is not None:
        if isinstance(cause, aiohttp.ClientConnectionError) and not isinstance(
            cause, (aiohttp.ServerTimeoutError, TimeoutError)
        ):
            return True
        cause = cause.__cause__
    return False


def _unreachable(exc: BaseException) -> str | None:
    """Why a connection to the server could not be made, when that is what ``exc`` (the
    SDK's connection error or timeout) was: the operating system's reason at the end of
    its chain (a host name that does not resolve, a refused connection, no route), else
    ``None`` (a connection made and then dropped, a timeout, anything else)."""
    import socket

    seen: set[int] = set()
    cause: BaseException | None = exc
    found: OSError | None = None
    connect = False  # the chain says the connection was never made
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        name = type(cause).__name__
        if name in ("ConnectError", "ClientConnectorError", "ClientConnectorDNSError"):
            connect = True
        if isinstance(cause, OSError) and not isinstance(cause, TimeoutError):
            found = cause
        cause = cause.__cause__ or cause.__context__
    if found is None or not connect:
        return None
    if isinstance(found, socket.gaierror):
        return f"the host name does not resolve ({found.strerror or found})"
    if isinstance(found, ConnectionRefusedError):
        return "the connection was refused (is the server running, on this port?)"
    return str(found.strerror or found)[:200]


MAX_SERVER_MESSAGE_CHARS = 2_000
"""The most characters of a server's error message passed on ("Error messages")."""

MAX_RESPONSE_BYTES = 4 * 1024 * 1024
"""The most bytes of one chat completion's body read ("Response size")."""


ERROR_BODY_BYTES = 64 * 1024
"""The most bytes of an error status's body read, raw and as decoded ("Error bodies")."""

_ERROR_BODY_PIECE = 256
"""The most raw bytes of an error body handed to its decoder at once: small enough that a
decoder without its own bound on what one call inflates to (httpx before its fork) still
inflates one piece to little (deflate at most about 1,032 times, 264 KB)."""


class _Cut(Exception):
    """An error body's raw bytes reached :data:`ERROR_BODY_BYTES`: raised through its
    decoder (never flushed, so a truncated gzip or zstd stream is no decoding error)."""


class _RawHead:
    """The first ``cap`` raw bytes of ``stream``, in pieces of :data:`_ERROR_BODY_PIECE`
    bytes; :class:`_Cut` when there are more. Made an ``AsyncByteStream`` of the response's
    HTTP library by :func:`_byte_stream`."""

    def __init__(self, stream: Any, cap: int) -> None:
        self._stream = stream
        self._cap = cap

    async def __aiter__(self) -> Any:
        left = self._cap
        async for chunk in self._stream:
            for start in range(0, len(chunk), _ERROR_BODY_PIECE):
                piece = chunk[start : start + _ERROR_BODY_PIECE]
                if len(piece) > left:
                    if left:
                        yield piece[:left]
                    raise _Cut
                left -= len(piece)
                yield piece

    async def aclose(self) -> None:
        await self._stream.aclose()


_ERROR_BODY_CUT: contextvars.ContextVar[list[bool] | None] = contextvars.ContextVar(
    "dissensus_error_body_cut", default=None
)
"""Where an attempt (:meth:`OpenAIBackend.send`, in whose task the SDK reads the body)
learns that its error body was cut: the SDK's status error holds a copy of the response
without its stream or extensions."""


class _DecodedHead:
    """The first ``cap`` bytes of ``probe``'s body as its HTTP library decodes it, read one
    decoded chunk at a time; a cut (more was left unread) is noted in
    :data:`_ERROR_BODY_CUT`."""

    def __init__(self, probe: Any, cap: int) -> None:
        self._probe = probe
        self._cap = cap

    @staticmethod
    def _cut() -> None:
        noted = _ERROR_BODY_CUT.get()
        if noted is not None:
            noted.append(True)

    async def __aiter__(self) -> Any:
        left = self._cap
        parts = self._probe.aiter_bytes()
        try:
            async for part in parts:
                if len(part) > left:
                    self._cut()
                    if left:
                        yield part[:left]
                    return
                left -= len(part)
                yield part
        except _Cut:
            self._cut()
        finally:
            await parts.aclose()

    async def aclose(self) -> None:
        await self._probe.aclose()


_STREAM_KINDS: dict[tuple[type, type], type] = {}


def _http_library(response: Any) -> Any:
    """The module of ``response``'s HTTP library (httpx, or the SDK's fork of it), or
    ``None`` for a response of no library known here."""
    for cls in type(response).__mro__:
        library = sys.modules.get(cls.__module__.split(".")[0])
        if hasattr(library, "AsyncByteStream") and hasattr(library, "Response"):
            return library
    return None


def _byte_stream(library: Any, kind: type, *args: Any) -> Any:
    """A ``kind`` (:class:`_RawHead`, :class:`_DecodedHead`) that is also an
    ``AsyncByteStream`` of the HTTP ``library``, as that library's response requires of its
    stream."""
    base: type = library.AsyncByteStream
    made = _STREAM_KINDS.get((kind, base))
    if made is None:
        made = _STREAM_KINDS[(kind, base)] = type(kind.__name__, (kind, base), {})
    return made(*args)


async def _cap_error_body(response: Any) -> None:
    """The HTTP client's response hook ("Error bodies"): an error status's body, before the
    SDK reads it, becomes its first :data:`ERROR_BODY_BYTES` bytes as decoded (and at most as
    many raw bytes), with ``Content-Encoding`` removed since they are decoded already."""
    library = _http_library(response)
    if response.status_code < 400 or library is None:
        return
    raw = _byte_stream(library, _RawHead, response.stream, ERROR_BODY_BYTES)
    probe = library.Response(
        response.status_code, headers=response.headers, stream=raw, request=response.request
    )
    response.stream = _byte_stream(library, _DecodedHead, probe, ERROR_BODY_BYTES)
    if "content-encoding" in response.headers:
        del response.headers["content-encoding"]


class _TooLarge(Exception):
    """A response body past the cap; its message says so (no server text in it)."""


class _BodyReadError(Exception):
    """The HTTP client failed while the body was read (the connection dropped, a read
    timed out): raised in place of the HTTP library's own exception, which the SDK wraps
    only while it sends the request."""

    def __init__(self, message: str, *, timed_out: bool) -> None:
        super().__init__(message)
        self.timed_out = timed_out


def _too_large(cap: int) -> _TooLarge:
    return _TooLarge(
        f"the server's response is over {cap} bytes, the most read of one completion "
        f"(not read further, not retried)"
    )


def _transport_error(exc: BaseException) -> bool:
    """Whether ``exc`` is the HTTP library's own (httpx's ``HTTPError`` or
    ``StreamError``, under whichever module the SDK's HTTP library has, or aiohttp's
    ``ClientError``)."""
    return any(
        kind.__name__ in ("HTTPError", "StreamError", "ClientError")
        and kind.__module__.split(".")[0] in ("httpx", "httpx2", "aiohttp")
        for kind in type(exc).__mro__
    )


def _timed_out(exc: BaseException) -> bool:
    """Whether the HTTP library's exception is a timeout (httpx's ``TimeoutException``,
    under whichever module the SDK's HTTP library has)."""
    return isinstance(exc, TimeoutError) or any(
        kind.__name__ == "TimeoutException" for kind in type(exc).__mro__
    )


async def _capped_body(response: Any, cap: int) -> bytes:
    """The body of a streamed HTTP ``response``, read up to ``cap`` bytes (as decoded):
    past it, :class:`_TooLarge` without reading further. A ``Content-Length`` over the cap
    (of a body not content-encoded) fails before any byte is read. The response is
    closed either way (a body left unread closes its connection)."""
    try:
        declared = response.headers.get("content-length")
        encoded = response.headers.get("content-encoding", "identity") != "identity"
        if declared is not None and declared.isdigit() and not encoded and int(declared) > cap:
            raise _too_large(cap)
        chunks: list[bytes] = []
        size = 0
        try:
            async for chunk in response.aiter_bytes():
                size += len(chunk)
                if size > cap:
                    raise _too_large(cap)
                chunks.append(chunk)
        except _TooLarge:
            raise
        except Exception as exc:  # the HTTP library's own (httpx or the SDK's fork of it)
            raise _BodyReadError(
                f"{type(exc).__name__}: {exc}", timed_out=_timed_out(exc)
            ) from None
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)
    finally:
        await response.aclose()


def _encoded(body: JsonObject) -> JsonObject | bytes:
    """``body`` as the JSON text the SDK would send (compact, UTF-8, no ``NaN``), written
    by ``orjson`` ("Request body"); ``body`` itself where ``orjson`` cannot write it (an
    integer over 64 bits, a lone surrogate) or would write what the SDK refuses (a
    ``NaN`` or an infinity, which ``orjson`` writes as ``null``), for the SDK to write or
    refuse as it does."""
    try:
        text = orjson.dumps(body)
    except orjson.JSONEncodeError:
        return body
    if b"null" in text and _non_finite(body):  # only a body holding a null is walked
        return body
    return text


def _non_finite(value: object) -> bool:
    """Whether ``value`` holds a float that is ``NaN`` or infinite, at any depth."""
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, dict):
        return any(_non_finite(v) for v in value.values())
    if isinstance(value, list | tuple):
        return any(_non_finite(v) for v in value)
    return False


def _count(value: object) -> int | None:
    """A token count as the server reported it, or ``None`` when it reported none."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def schema_instruction(schema: JsonSchema) -> str:
    """System text asking for one JSON object matching ``schema``."""
    return (
        "Answer with only one JSON object (no prose, no code fences) that matches this JSON schema:\n"
        + json.dumps(schema, ensure_ascii=False, sort_keys=True)
    )


def _unchained(error: BackendError) -> BackendError:
    """``error`` with no exception chained to it: raised outside any ``except`` block, so
    Python sets no ``__context__`` either (unless the caller itself is handling one)."""
    error.__cause__ = None
    error.__context__ = None
    error.__suppress_context__ = True
    return error


_VERSIONED = re.compile(r"/v\d")
"""A path segment naming an API version (``/v1``, ``/v1beta``, ``/v2``)."""


def missing_v1_hint(status: int, path: str) -> str:
    """What a 404 from a path naming no API version most likely means: a base URL given
    without its ``/v1`` (``http://host:8000`` where the server answers
    ``http://host:8000/v1/chat/completions``); empty for any other answer (a server
    whose path names another version, ``/v1beta/openai``, is not told it lacks ``/v1``)."""
    if status != 404 or _VERSIONED.search(path) is not None:
        return ""
    return (
        f" (the request went to {path}: OpenAI-compatible servers answer under /v1, "
        "so the base URL most likely lacks its /v1, e.g. http://host:8000/v1)"
    )


class OpenAIBackend:
    """One chat completion per :meth:`send` through ``AsyncOpenAI``."""

    provider = "openai"

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout_s: float = 60.0,
        context_headers: bool = True,
        transport: Transport = "httpx",
        key_env: str | None = None,
        max_response_bytes: int = MAX_RESPONSE_BYTES,
    ) -> None:
        # ``key_env``: the environment variable ``api_key`` was read from (a panel
        # member's ``api_key_env``), named by an error about the key.
        if transport == "aiohttp" and not aiohttp_available():
            raise ConfigError(
                "the aiohttp transport needs aiohttp and an openai SDK with DefaultAioHttpClient "
                "(pip install 'openai[aiohttp]')",
                field="transport",
            )
        url = base_url if base_url is not None else os.environ.get("OPENAI_BASE_URL")
        url_problem = base_url_problem(url) if url else None
        if url and url_problem:  # refused before any request: see "Secrets"
            if "credential" in url_problem:
                url_problem += (
                    "; give the key by OPENAI_API_KEY (or a panel member's api_key_env), "
                    "never in the base URL"
                )
            raise _refused(
                url, url_problem, variable="OPENAI_BASE_URL", argument="base_url", what="base URL"
            )
        key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        key_problem = api_key_problem(key) if key is not None else None
        if key is not None and key_problem:  # refused before any request: see "Secrets"
            source = key_env or "OPENAI_API_KEY"
            raise _refused(key, key_problem, variable=source, argument="api_key", what="API key")
        self.model_id = model
        self.base_url = base_url
        self.timeout_s = timeout_s
        self.context_headers = context_headers
        self.transport: Transport = transport
        self.max_response_bytes = max_response_bytes
        self._api_key = key
        self._key_source = _key_source(key, key_env)
        placeholder = self._key_source.startswith("the placeholder")
        self._answer_secret = (
            key if key is not None and len(key) >= SECRET_RUN and not placeholder else None
        )
        """The key as an answer may not quote it ("Echoed keys"), or ``None``."""
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, AsyncOpenAI] = (
            weakref.WeakKeyDictionary()
        )
        self._endpoints: weakref.WeakKeyDictionary[AsyncOpenAI, str] = weakref.WeakKeyDictionary()
        self._templates: weakref.WeakKeyDictionary[AsyncOpenAI, tuple[Any, type]] = (
            weakref.WeakKeyDictionary()
        )

    def __repr__(self) -> str:
        key = "<set>" if self._api_key else None
        return (
            f"OpenAIBackend(model={self.model_id!r}, base_url={safe_url(self.base_url)!r}, "
            f"api_key={key}, timeout_s={self.timeout_s}, transport={self.transport!r})"
        )

    def _redact(self, text: str) -> str:
        # The placeholder sent with no key set is no secret: text quoting it stays.
        placeholder = self._key_source.startswith("the placeholder")
        return redact(text, (self._api_key,) if self._api_key and not placeholder else ())

    def redact_message(self, text: str) -> str:
        """``text`` scrubbed of this backend's key as its own errors are (:func:`redact`):
        the client scrubs with it an exception this backend did not turn into a
        :class:`BackendError`."""
        return self._redact(text)

    def _server_text(self, text: str, *, cut: bool = False) -> str:
        """A server's error message as passed on: scrubbed (:meth:`_redact`) and cut to
        :data:`MAX_SERVER_MESSAGE_CHARS` characters ("Error messages"). Only a head of the
        text is scrubbed, long enough that every form of the key starting before the cut
        lies whole inside it (a key is printable ASCII, so its longest encoded form, the
        percent-encoding, is three characters a character), and is then cut: no piece of
        the key is left at the cut that the whole text would not have shown. The text of
        a body ``cut`` at :data:`ERROR_BODY_BYTES` says so in place of a count."""
        cap = MAX_SERVER_MESSAGE_CHARS
        if len(text) <= cap and not cut:
            return self._redact(text)
        margin = 3 * len(self._api_key or "") + 16
        head = self._redact(text[: cap + margin])[:cap]
        if cut:
            return (
                f"{head}… (the rest not shown: the body is over {ERROR_BODY_BYTES} bytes, "
                "not read further)"
            )
        return f"{head}… ({len(text) - cap} more characters not shown)"

    def _client(self) -> AsyncOpenAI:
        loop = asyncio.get_running_loop()
        client = self._clients.get(loop)
        if client is None:
            import openai

            # The SDK's own HTTP client, with the hook capping an error body: "Error bodies".
            hooks = {"response": [_cap_error_body]}
            http: Any
            if self.transport == "aiohttp":
                http = openai.DefaultAioHttpClient(timeout=self.timeout_s, event_hooks=hooks)  # type: ignore[attr-defined,unused-ignore]
            else:
                http = openai.DefaultAsyncHttpxClient(timeout=self.timeout_s, event_hooks=hooks)
            omitted: Any = openai.Omit()  # the SDK drops a default header set to Omit
            client = openai.AsyncOpenAI(
                api_key=self._api_key,
                base_url=self.base_url,
                timeout=self.timeout_s,
                max_retries=0,
                http_client=http,
                default_headers=dict.fromkeys(_NO_TELEMETRY[: -len(_PER_CALL)], omitted),
            )
            self._clients[loop] = client
        return client

    def _endpoint(self, client: AsyncOpenAI) -> str:
        """The absolute URL of ``/chat/completions`` under ``client``'s base URL, joined once
        per client: the SDK takes an absolute URL as it is, where a relative path is parsed
        and merged with the base URL on every call. The path goes before a base URL's query
        (``/v1?api-version=V`` asks ``/v1/chat/completions?api-version=V``): the SDK's own
        merge appends it to the query, and the server saw ``/v1/`` with the path lost."""
        url = self._endpoints.get(client)
        if url is None:
            base = client.base_url  # the SDK ends its path with "/", before any query
            path, sep, query = base.raw_path.partition(b"?")
            url = str(base.copy_with(raw_path=path + b"chat/completions" + sep + query))
            self._endpoints[client] = url
        return url

    def _options(
        self, client: AsyncOpenAI, body: JsonObject | bytes, headers: dict[str, Any]
    ) -> tuple[Any, type]:
        """The SDK's request options of one call (``None``: the SDK has no options class
        where this version looks for it, and the call goes through ``client.post``) and
        the response class the SDK hands back as it is, its body unread ("Request
        path"). The options are a copy of ``client``'s template, built once by the SDK's
        own constructor (as ``client.post`` builds them on every call), with this call's
        body and headers."""
        made = self._templates.get(client)
        if made is None:
            # The SDK's URLs and its HTTP clients are of one library: httpx, or its fork.
            library = _http_library(client.base_url)
            if library is None:
                raise ConfigError(
                    f"the openai SDK's URLs ({type(client.base_url).__name__}) are of no HTTP "
                    "library known here (httpx or the SDK's fork of it)",
                    field="transport",
                )
            made = self._templates[client] = (self._template(client), library.Response)
        template, response = made
        if template is None:
            return None, response
        return template.model_copy(update={"json_data": body, "headers": headers}), response

    def _template(self, client: AsyncOpenAI) -> Any:
        """``client``'s request options with an empty body (``None``: the SDK's private
        options class is not where, or not what, this version of the SDK had it)."""
        url = self._endpoint(client)
        try:
            from openai._models import FinalRequestOptions

            return FinalRequestOptions.construct(method="post", url=url, json_data={}, headers={})
        except (ImportError, AttributeError, TypeError):
            return None

    async def _post(self, client: AsyncOpenAI, body: JsonObject, headers: dict[str, Any]) -> Any:
        """The response to one call's body and headers, streamed and its body unread:
        through the client's copied options, or ``client.post`` where there are none. The
        body goes as ``orjson``'s bytes only through the options (this SDK's own request
        path sends bytes as they are); ``client.post`` of another release is given the
        body itself, for its own writer (a release before bytes bodies would send them
        as a JSON string)."""
        data = _encoded(body)
        options, response_type = self._options(client, data, headers)
        if options is None:
            return await client.post(
                self._endpoint(client),
                cast_to=response_type,
                body=body,
                options={"headers": headers},
                stream=True,
            )
        return await client.request(response_type, options, stream=True)

    async def awarm(self) -> None:
        """Open this event loop's SDK client now: imports the SDK and builds its HTTP
        client and request options, which the first request would otherwise pay for."""
        self._options(self._client(), {}, {})

    def _messages(self, request: ChatRequest, json_mode: JsonMode) -> list[dict[str, str]]:
        messages = [{"role": m.role, "content": m.content} for m in request.messages]
        if request.json_schema is None or json_mode == "schema":
            return messages
        instruction = schema_instruction(request.json_schema)
        if messages and messages[0]["role"] == "system":
            messages[0] = {
                "role": "system",
                "content": f"{messages[0]['content']}\n\n{instruction}",
            }
        else:
            messages.insert(0, {"role": "system", "content": instruction})
        return messages

    def _arguments(self, request: ChatRequest, json_mode: JsonMode) -> JsonObject:
        args: JsonObject = {
            "model": self.model_id,
            "messages": self._messages(request, json_mode),
        }
        if request.temperature is not None:
            args["temperature"] = request.temperature
        if request.seed is not None:
            args["seed"] = request.seed
        if request.max_tokens is not None:
            args["max_tokens"] = request.max_tokens
        if request.json_schema is not None and json_mode == "schema":
            name = _NAME_OK.sub("_", request.schema_name or "answer")[:64] or "answer"
            args["response_format"] = {
                "type": "json_schema",
                "json_schema": {
                    "name": name,
                    "schema": request.json_schema,
                    "strict": is_strict(request.json_schema),
                },
            }
        elif request.json_schema is not None and json_mode == "object":
            args["response_format"] = {"type": "json_object"}
        headers = {}
        if self.context_headers:
            for header, value in (
                ("X-Dissensus-Agent", request.agent),
                ("X-Dissensus-Role", request.role),
                ("X-Dissensus-Stage", request.stage),
            ):
                if value is not None:
                    headers[header] = quote(value, safe="")
        if headers:
            args["extra_headers"] = headers
        return args

    def _status_error(
        self, exc: openai.APIStatusError, json_mode: JsonMode, structured: bool, *, cut: bool
    ) -> BackendError:
        import openai

        refused = isinstance(exc, (openai.AuthenticationError, openai.PermissionDeniedError))
        message = exc.message
        if cut and isinstance(exc.body, str):  # no JSON: its head is the message
            message = f"{message} - {exc.body}"
        return self._status_failure(
            exc.status_code,
            message,
            exc.response.headers.get("retry-after"),
            json_mode=json_mode,
            structured=structured,
            refused=refused,
            cut=cut,
            hint=missing_v1_hint(exc.status_code, exc.response.request.url.path),
        )

    def _unreachable_failure(self, client: AsyncOpenAI, why: str) -> BackendError:
        """The failure of a connection that could not be made: the server it was made to
        (its URL without user-info or query) and why ("Unreachable servers")."""
        where = safe_url(str(client.base_url).rstrip("/"))
        return BackendError(
            self._redact(f"connection error: cannot connect to {where}: {why}"),
            kind="connection",
            retryable=True,
        )

    def _refusal(self, status: int) -> str:
        """The message of a server refusing the key: the status, what it means and where
        the key came from, without the server's text (it may quote the key, encoded)."""
        said = _AUTH_STATUSES.get(status, _AUTH_STATUSES[401]).format(source=self._key_source)
        return f"HTTP {status}: {said}; its message is not shown, as it may quote the key"

    def _status_failure(
        self,
        status: int,
        server_message: str,
        retry_after_header: str | None,
        *,
        json_mode: JsonMode,
        structured: bool,
        refused: bool = False,
        cut: bool = False,
        hint: str = "",
    ) -> BackendError:
        """The :class:`BackendError` of an HTTP error status (shared by every transport),
        ``hint`` after the server's text (:func:`missing_v1_hint`).
        A refused key (401, 403, or the SDK's exceptions for them: ``refused``) keeps the
        status and a fixed message, never the server's ("Secrets")."""
        if refused or status in _AUTH_STATUSES:
            return BackendError(
                self._refusal(status), kind="client_error", retryable=False, status=status
            )
        message = f"HTTP {status}: {self._server_text(server_message, cut=cut)}{hint}"
        retry_after = parse_retry_after(retry_after_header)
        if status == 429:
            return BackendError(
                message, kind="rate_limit", retryable=True, status=status, retry_after=retry_after
            )
        if status >= 500 or status in (408, 409):
            return BackendError(
                message, kind="server_error", retryable=True, status=status, retry_after=retry_after
            )
        lowered = server_message[:MAX_SERVER_MESSAGE_CHARS].lower()
        if (
            structured
            and json_mode != "none"
            and status in (400, 422)
            and any(w in lowered for w in _SCHEMA_WORDS)
        ):
            return SchemaModeUnsupported(message, status=status)
        return BackendError(message, kind="client_error", retryable=False, status=status)

    async def send(self, request: ChatRequest, *, json_mode: JsonMode) -> BackendResponse:
        import openai

        args = self._arguments(request, json_mode)
        headers: dict[str, Any] = {name: openai.Omit() for name in _PER_CALL}
        headers.update(args.pop("extra_headers", None) or {})
        structured = request.json_schema is not None
        client = self._client()
        # Every failure is built inside its ``except`` and raised after it: raised there,
        # even ``from None`` keeps the SDK exception as ``__context__`` (only its display
        # is suppressed), and that exception may hold the key (a server echoing it in a
        # 401 body, ``.message`` / ``.body``).
        failure: BackendError | None = None
        raw: bytes = b""
        cutoff = current_cutoff()
        if cutoff is not None and cutoff.reason is not None:
            raise cutoff.failure()
        cut: list[bool] = []  # whether an error body was cut: "Error bodies"
        noting = _ERROR_BODY_CUT.set(cut)
        try:
            # A total deadline: httpx's timeout bounds each read, so a server dripping
            # one byte at a time would otherwise keep the attempt alive indefinitely.
            async with asyncio.timeout(self.timeout_s) as scope:
                if cutoff is not None:
                    cutoff.watch(scope)  # a cut expires the deadline now ("Cutoff")
                try:
                    # The SDK's own request path (auth, headers, timeouts, status errors)
                    # with the body as built here and the answer streamed, read as bytes
                    # up to the cap: "Request path", "Response size".
                    response = await self._post(client, args, headers)
                    raw = await _capped_body(response, self.max_response_bytes)
                finally:
                    if cutoff is not None:
                        cutoff.unwatch(scope)
        except (openai.APITimeoutError, TimeoutError) as exc:
            unreachable = _unreachable(exc)
            if cutoff is not None and cutoff.reason is not None:
                failure = cutoff.failure()
            elif unreachable is not None:
                failure = self._unreachable_failure(client, unreachable)
            elif _dropped(exc):
                failure = BackendError(
                    "connection error: the server closed the connection",
                    kind="connection",
                    retryable=True,
                )
            else:
                failure = BackendError(
                    f"timed out after {self.timeout_s}s", kind="timeout", retryable=True
                )
        except openai.APIConnectionError as exc:
            unreachable = _unreachable(exc)
            if unreachable is not None:
                failure = self._unreachable_failure(client, unreachable)
            else:
                failure = BackendError(
                    self._redact(f"connection error: {exc}"), kind="connection", retryable=True
                )
        except openai.APIStatusError as exc:
            failure = self._status_error(exc, json_mode, structured, cut=bool(cut))
        except openai.APIResponseValidationError as exc:
            failure = BackendError(
                self._redact(f"invalid response: {exc.message}"),
                kind="malformed_response",
                retryable=True,
            )
        except _TooLarge as exc:
            failure = BackendError(str(exc), kind="response_too_large", retryable=False)
        except _BodyReadError as exc:
            failure = BackendError(
                self._redact(f"connection error while reading the response: {exc}"),
                kind="timeout" if exc.timed_out else "connection",
                retryable=True,
            )
        except (openai.OpenAIError, ValueError) as exc:
            # A ValueError here is the HTTP client refusing the request before it is sent
            # (aiohttp: credentials in the URL and an Authorization header): not retried.
            failure = BackendError(
                self._redact(f"{type(exc).__name__}: {exc}"), kind="client_error", retryable=False
            )
        except Exception as exc:
            if not _transport_error(exc):
                raise
            # The HTTP library's own exception, which the SDK lets through while it reads
            # an error status's body (cut short, or not decodable): "Error bodies".
            failure = BackendError(
                self._redact(
                    f"connection error while reading the error response: {type(exc).__name__}: {exc}"
                ),
                kind="timeout" if _timed_out(exc) else "connection",
                retryable=True,
            )
        finally:
            _ERROR_BODY_CUT.reset(noting)
        if failure is not None:
            raise _unchained(failure)
        try:
            completion = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            failure = BackendError(
                self._redact(f"response body is not JSON: {exc}"),
                kind="malformed_response",
                retryable=True,
            )
        if failure is not None:
            raise _unchained(failure)
        return self._read(completion, args)

    def _read(self, completion: Any, args: JsonObject) -> BackendResponse:
        """The answer of a chat-completion body (parsed JSON, read without building models)."""
        choices = completion.get("choices") if isinstance(completion, dict) else None
        usage = completion.get("usage") if isinstance(completion, dict) else None
        usage = usage if isinstance(usage, dict) else {}
        # Read before the answer: a failed attempt's reported tokens are charged too.
        prompt_tokens = _count(usage.get("prompt_tokens"))
        completion_tokens = _count(usage.get("completion_tokens"))

        def unread(why: str, kind: str = "malformed_response") -> BackendError:
            return BackendError(
                why,
                kind=kind,
                retryable=True,
                prompt_tokens=prompt_tokens or 0,
                completion_tokens=completion_tokens or 0,
            )

        if not isinstance(choices, list):
            raise unread("response is not a chat completion")
        if not choices:
            raise unread("response has no choices", "empty_choices")
        choice = choices[0]
        message = choice.get("message") if isinstance(choice, dict) else None
        if not isinstance(choice, dict) or not isinstance(message, dict):
            what = "choice" if not isinstance(choice, dict) else "choice's message"
            raise unread(f"response's first {what} is not an object")
        content = message.get("content")
        if isinstance(content, list):  # content parts (some servers): their text, in order
            content = "".join(
                part["text"]
                for part in content
                if isinstance(part, dict)
                and part.get("type", "text") == "text"
                and isinstance(part.get("text"), str)
            )
        refusal = message.get("refusal")
        refused = not content and isinstance(refusal, str) and bool(refusal.strip())
        text = content or refusal or ""
        if not isinstance(text, str):
            raise unread("response message has no text")
        if prompt_tokens is None:
            prompt_tokens = estimate_tokens("\n".join(m["content"] for m in args["messages"]))
        if completion_tokens is None:
            completion_tokens = estimate_tokens(text)
        model = completion.get("model")
        secret = self._answer_secret
        if secret is not None:  # a server echoing the request's headers: "Echoed keys"
            if secret in text:
                text = text.replace(secret, "[REDACTED]")
            if isinstance(model, str) and secret in model:
                model = model.replace(secret, "[REDACTED]")
        finish = choice.get("finish_reason")
        return BackendResponse(
            text=text,
            model=model if isinstance(model, str) and model else self.model_id,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            finish_reason=finish if isinstance(finish, str) else None,
            refused=refused,
        )

    async def aclose(self) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        clients = dict(self._clients)
        self._clients.clear()
        for owner, client in clients.items():
            if owner is loop:
                await client.close()
