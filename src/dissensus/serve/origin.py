"""Who may reach ``dissensus serve`` from a browser: ``Host``, ``Origin`` and content-type checks.

A server on loopback without a tokens file treats every caller as the admin ``local``.
Loopback alone is not a trust boundary: any web page the user opens can make the browser
send requests to ``127.0.0.1``. :class:`BrowserGuard` (ASGI middleware, before every
route) closes the two ways a page can do that:

* **DNS rebinding**: a page of ``attacker.example`` whose name is re-pointed at
  ``127.0.0.1`` reads the answers as same-origin. The ``Host`` header then names the
  attacker's domain, so every request whose ``Host`` is not one of the server's names is
  refused ``403`` (field ``Host``). The names are ``127.0.0.1``, ``localhost``, ``[::1]``,
  the bound host, and those given with ``--allow-host`` (``*`` turns the check off, for a
  server behind a proxy that rewrites ``Host``). A server bound to a non-loopback address
  (which needs ``--tokens``) checks ``Host`` only when ``--allow-host`` is given: its
  callers reach it under names it cannot know, and the bearer token is its boundary.
* A ``Host`` value is a name or a bracketed IPv6 address, then nothing or ``:`` and a
  port of digits; anything else after it (``[::1]evil.example``, ``localhost:evil``)
  names no host of the server's, so it is refused as a foreign one (403). A request with
  more than one ``Host`` header is refused ``400`` (field ``Host``), as RFC 9112
  (section 3.2) requires of a server, whether or not ``Host`` is checked: the routes,
  the ``Origin`` check and this check must not each read a different one. The same
  holds for the other headers the checks and the service read: more than one
  ``Origin``, ``Sec-Fetch-Site``, ``Content-Type``, ``Content-Encoding`` or
  ``Authorization`` header is a
  ``400`` naming it (a proxy reading the last copy and this guard the first would
  otherwise disagree on what was sent).
* **Cross-site writes**: a page can ``POST`` to another origin without reading the
  answer ("simple" requests: a form, or ``fetch`` with ``text/plain``). Every writing
  request (``POST``, ``PUT``, ``PATCH``, ``DELETE``) whose ``Origin`` is not the
  server's own (``http://`` or ``https://`` + the ``Host`` it was sent to, so that a
  page served through a TLS-terminating proxy passes; ``null`` included) or whose
  ``Sec-Fetch-Site`` is ``cross-site`` is refused ``403`` (field ``Origin``). Requests
  without those headers (curl, SDKs, the CLI) are not browsers' and pass.
* Every writing ``/v1`` request must declare a JSON body (``Content-Type:
  application/json`` or ``application/*+json``): anything else is ``415`` (field
  ``Content-Type``), so no "simple" request can reach the API. A bodyless write (a
  claim) may omit the header. The review page's forms post form data to ``/review``;
  they keep their CSRF tokens and get the ``Host`` and ``Origin`` checks.
* That JSON body is plain UTF-8: a ``Content-Encoding`` other than ``identity`` (a
  gzipped body) is ``415`` naming ``Content-Encoding``, so is a transfer coding other
  than ``chunked`` (``Transfer-Encoding: gzip, chunked``, whose gzip the HTTP parser
  does not undo) naming ``Transfer-Encoding``, and a ``charset`` other than
  UTF-8 in ``Content-Type`` is ``415`` naming ``Content-Type`` (US-ASCII, a subset of
  UTF-8, by any of its IANA names, is UTF-8; a ``charset`` given twice, ``charset=utf-8;
  charset=latin-1``, is refused, as a header sent twice is; parameters are read
  quote-aware by the standard library's header parser). The body is never
  decompressed or transcoded; without these checks a gzipped body was answered "not
  UTF-8" and a Latin-1 one that happened to be valid UTF-8 was read as other text.
* On the OpenAI-compatible paths these refusals are OpenAI's error body
  (:func:`dissensus.serve.limits.openai_path`), ``code`` ``forbidden_host``,
  ``forbidden_origin`` or ``unsupported_media_type``.

A choice this module makes: no token is generated at start when ``--tokens`` is
absent (Jupyter does generate one). With the checks above a browser page can no longer
reach the service, and what remains is other local processes, which a loopback service
without a tokens file trusts by design (they could read the journal file as well). On a
machine shared with other users, give ``--tokens``. ``docs/serve.md`` says so.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from email.message import Message
from email.utils import collapse_rfc2231_value

from starlette.types import ASGIApp, Receive, Scope, Send

from dissensus.serve.limits import send_error

__all__ = ["LOOPBACK_NAMES", "BrowserGuard", "allowed_hosts", "host_name"]

_PORT = re.compile(r"(?::[0-9]+)?")
"""What may follow a ``Host`` value's name: nothing, or a port of ASCII digits."""

LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "::1"})
"""Names a loopback server always answers to."""

WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def host_name(host: str) -> str | None:
    """The name part of a ``Host`` value (port and IPv6 brackets removed), lower case, or
    ``None`` when the value is not ``name[:port]`` or ``[address][:port]``: anything but
    ``:digits`` after the closing bracket or the name (``[::1]evil.example``,
    ``localhost:evil``), or an opening bracket never closed."""
    host = host.strip().lower()
    if host.startswith("["):
        end = host.find("]")
        if end < 0 or not _PORT.fullmatch(host[end + 1 :]):
            return None
        return host[1:end]
    if host.count(":") == 1:
        name, _, port = host.partition(":")
        return name if _PORT.fullmatch(f":{port}") else None
    return host


def allowed_hosts(bind_host: str, extra: Iterable[str], *, loopback: bool) -> frozenset[str] | None:
    """The names ``Host`` may carry, or None when the check is off."""
    extra = [h.strip().lower() for h in extra if h.strip()]
    if "*" in extra:
        return None
    if not loopback and not extra:
        return None
    names = {name for name in map(host_name, [*extra, bind_host]) if name is not None}
    if loopback:
        names |= LOOPBACK_NAMES
    return frozenset(names)


def _is_json(content_type: str) -> bool:
    kind = content_type.partition(";")[0].strip().lower()
    return kind == "application/json" or (
        kind.startswith("application/") and kind.endswith("+json")
    )


def _charsets(content_type: str) -> list[str]:
    """The ``charset`` parameters of a ``Content-Type`` value (unquoted, lower case), in
    the order given: none, one, or more (refused). Parameters are read by the standard
    library's header parser (:class:`email.message.Message`), quote-aware, so a quoted
    value holding ``;charset=latin1`` is that value, not a charset. A value without a
    ``;`` has no parameters: the parser is not asked."""
    if ";" not in content_type:
        return []
    header = Message()
    header["content-type"] = content_type
    found: list[str] = []
    for name, value in header.get_params(failobj=[])[1:]:
        if name.strip().lower() == "charset":
            text = collapse_rfc2231_value(value) if isinstance(value, tuple) else value
            found.append(str(text).strip().lower())
    return found


_UTF8 = frozenset(
    {
        "utf-8",
        "utf8",
        # US-ASCII is a subset of UTF-8 (RFC 8259, section 11): its IANA names.
        "us-ascii",
        "ascii",
        "us",
        "iso646-us",
        "iso-ir-6",
        "ansi_x3.4-1968",
        "ansi_x3.4-1986",
        "iso_646.irv:1991",
        "ibm367",
        "cp367",
        "csascii",
    }
)
"""``charset`` values that a body in the one encoding it may have (UTF-8) is written in:
UTF-8 and US-ASCII, its subset, by their common names."""


def _body_refusal(headers: dict[bytes, bytes]) -> tuple[str, str] | None:
    """Why a ``/v1`` write's body is refused (415), as (message, field), or None."""
    content_type = headers.get(b"content-type")
    has_body = headers.get(b"content-length", b"0").strip() not in (b"0", b"") or (
        b"transfer-encoding" in headers
    )
    if (content_type is not None and not _is_json(content_type.decode("latin-1"))) or (
        content_type is None and has_body
    ):
        return "a request body must be JSON (application/json)", "Content-Type"
    encoding = headers.get(b"content-encoding", b"").decode("latin-1").strip().lower()
    if encoding not in ("", "identity"):
        return (
            f"a request body must not be compressed (Content-Encoding: {encoding[:40]}); "
            "send the JSON as it is",
            "Content-Encoding",
        )
    transfer = headers.get(b"transfer-encoding", b"").decode("latin-1").strip().lower()
    codings = [c.strip() for c in transfer.split(",") if c.strip()]
    if codings and codings != ["chunked"]:
        return (
            f"a request body's only transfer coding may be chunked (Transfer-Encoding: "
            f"{transfer[:40]}); send the JSON as it is",
            "Transfer-Encoding",
        )
    charsets = _charsets(content_type.decode("latin-1")) if content_type is not None else []
    if len(charsets) > 1:
        # Readers differ on which copy counts, as for a header sent twice.
        return (
            "a request body's Content-Type names its charset more than once "
            f"(charset={', charset='.join(c[:40] for c in charsets[:4])})",
            "Content-Type",
        )
    if charsets and charsets[0] not in _UTF8:
        return (
            f"a request body must be UTF-8 JSON (Content-Type names charset={charsets[0][:40]})",
            "Content-Type",
        )
    return None


_ONCE: dict[bytes, str] = {
    b"host": "Host",
    b"origin": "Origin",
    b"sec-fetch-site": "Sec-Fetch-Site",
    b"content-type": "Content-Type",
    b"authorization": "Authorization",
    b"content-encoding": "Content-Encoding",
}
"""Headers a request may carry at most once (lower-case, as ASGI gives them): the names
this guard and the service's authentication read."""


class BrowserGuard:
    """Refuse foreign ``Host``, cross-origin writes, and non-JSON writes to ``/v1``."""

    def __init__(self, app: ASGIApp, hosts: frozenset[str] | None) -> None:
        self.app = app
        self.hosts = hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers: dict[bytes, bytes] = {}
        twice: bytes | None = None
        for name, value in scope.get("headers", []):
            if name in headers and name in _ONCE and twice is None:
                twice = name
            headers.setdefault(name, value)
        if twice is not None:
            # Readers differ on which copy counts (this guard read the first, a proxy may
            # read the last): a header this check or the API reads must come once.
            field = _ONCE[twice]
            await send_error(send, 400, f"more than one {field} header", field, scope=scope)
            return
        host = headers.get(b"host", b"").decode("latin-1")
        if self.hosts is not None and host_name(host) not in self.hosts:
            message = "this server does not answer to that Host name"
            await send_error(send, 403, message, "Host", scope=scope, code="forbidden_host")
            return
        method = str(scope.get("method", "GET")).upper()
        if method not in WRITES:
            await self.app(scope, receive, send)
            return
        origin = headers.get(b"origin")
        fetch_site = headers.get(b"sec-fetch-site", b"").decode("latin-1").lower()
        own = {f"http://{host}".lower(), f"https://{host}".lower()}
        if (origin is not None and origin.decode("latin-1").lower() not in own) or (
            fetch_site == "cross-site"
        ):
            message = "cross-origin writes are refused"
            await send_error(send, 403, message, "Origin", scope=scope, code="forbidden_origin")
            return
        if str(scope.get("path", "")).startswith("/v1/"):
            refusal = _body_refusal(headers)
            if refusal is not None:
                message, field = refusal
                await send_error(send, 415, message, field, scope=scope)
                return
        await self.app(scope, receive, send)
