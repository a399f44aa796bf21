"""Message lines the server refuses before the SDK reads them (:func:`_refusal`), and
the JSON-RPC error each is answered with."""

from __future__ import annotations

import dataclasses
import json
import sys
from typing import Any

from mcp.types import (
    INVALID_PARAMS,
    INVALID_REQUEST,
    PARSE_ERROR,
    ErrorData,
    JSONRPCError,
    JSONRPCNotification,
    JSONRPCRequest,
    jsonrpc_message_adapter,
)

from dissensus.io.jsontext import (
    MAX_DEPTH,
    count_keys,
    duplicate_key,
    json_depth,
    may_repeat_key,
    opening_brackets,
)
from dissensus.quoting import SHORT_LIMIT, one_line, quote_short
from dissensus.types import lone_surrogate_at

_MESSAGE_DEPTH = MAX_DEPTH + 4
"""Deepest nesting of a message: a record of a list argument (``params.arguments.panels.0``)
lies four levels in, and may nest :data:`~dissensus.io.jsontext.MAX_DEPTH` levels of its
own, as a line may (the tool then refuses a deeper record as the CLI refuses the line)."""

_CODE_NAMES = {
    PARSE_ERROR: ("Parse error", "a parse error"),
    INVALID_REQUEST: ("Invalid Request", "an invalid request"),
    INVALID_PARAMS: ("Invalid params", "invalid parameters"),
}
"""JSON-RPC 2.0's name of each error code the reader answers, and the stderr line's."""


@dataclasses.dataclass(frozen=True)
class _Refusal:
    """A message line the reader refuses (:func:`_refusal`): ``what`` it was (``request
    '5'``, ``notification 'x'``, ``a message``), ``why`` (never the line itself), and
    the JSON-RPC error ``code`` it is answered with under ``ident`` (``None``: ``id``
    null), or no code when nothing waits for an answer (a notification, a response)."""

    what: str
    why: str
    code: int | None = None
    ident: int | str | None = None

    def answer(self) -> JSONRPCError | None:
        if self.code is None:
            return None
        message = f"{_CODE_NAMES[self.code][0]}: {self.why}"
        return JSONRPCError(
            jsonrpc="2.0", id=self.ident, error=ErrorData(code=self.code, message=message)
        )

    def log_line(self, answered: bool) -> str:
        if self.code is None:
            done = "dropped (it waits for no answer)"
        elif not answered:
            done = "not answered (the server is not serving)"
        else:
            null = " with id null" if self.ident is None else ""
            done = f"answered as {_CODE_NAMES[self.code][1]} ({self.code}){null}"
        return f"error: {self.what}: {self.why}: {done}\n"


class _HugeInt:
    """Stands in for an integer of more digits than Python converts (the SDK's reader
    refuses it too), so that the message around it can still be read."""

    __slots__ = ()


_HUGE = _HugeInt()


def _int_or_huge(text: str) -> int | _HugeInt:
    try:
        return int(text)
    except ValueError:
        return _HUGE


def _shown_path(path: str) -> str:
    """A path into a message (its keys are the client's) as a message shows it: one line,
    a lone surrogate escaped, its first :data:`SHORT_LIMIT` characters then ``…``."""
    text = one_line(path.encode("utf-8", "backslashreplace").decode("utf-8")) or "<message>"
    return text if len(text) <= SHORT_LIMIT else text[:SHORT_LIMIT] + "…"


def _first_problem(value: Any, where: str, depth: int) -> str | None:
    """Why ``value`` (parsed JSON at path ``where``, ``depth`` levels in) cannot be served,
    naming the path of the first problem: a lone surrogate in a string or a key (the path
    of the object holding the key), an integer too long, or nesting deeper than
    :data:`_MESSAGE_DEPTH`; ``None`` when there is none."""
    stack: list[tuple[Any, str, int]] = [(value, where, depth)]
    while stack:
        item, at, level = stack.pop()
        if isinstance(item, str):
            if lone_surrogate_at(item) is not None:
                return f"not valid Unicode (a lone surrogate escape) at {_shown_path(at)}"
        elif item is _HUGE:
            digits = sys.get_int_max_str_digits()
            return f"an integer of more than {digits} digits at {_shown_path(at)}"
        elif isinstance(item, dict | list):
            level += 1
            if level > _MESSAGE_DEPTH:
                return f"JSON nested deeper than {_MESSAGE_DEPTH} levels at {_shown_path(at)}"
            if isinstance(item, dict):
                if any(lone_surrogate_at(key) is not None for key in item):
                    return f"not valid Unicode (a lone surrogate escape) at {_shown_path(at)}"
                inner = [(sub, f"{at}.{key}" if at else key) for key, sub in item.items()]
            else:
                inner = [(sub, f"{at}.{i}" if at else str(i)) for i, sub in enumerate(item)]
            stack.extend((sub, path, level) for sub, path in reversed(inner))
    return None


_JSON_TYPES = {bool: "a boolean", float: "a number with a fraction or an exponent",
               dict: "an object", list: "an array", type(None): "null"}  # fmt: skip


def _id_problem(value: Any) -> str | None:
    """Why ``value`` cannot be a request id (a string or an integer), or ``None``."""
    if isinstance(value, str):
        return (
            "'id' is not valid Unicode (a lone surrogate escape)"
            if lone_surrogate_at(value) is not None
            else None
        )
    if value is _HUGE:
        return f"'id' is an integer of more than {sys.get_int_max_str_digits()} digits"
    if isinstance(value, int) and not isinstance(value, bool):
        return None
    return f"'id' must be a string or an integer, not {_JSON_TYPES.get(type(value), 'that')}"


def _envelope_problem(message: dict[str, Any], method: Any) -> tuple[str, int] | None:
    """What makes ``message`` (an object with a method, or none of a response's members)
    no request or notification the server reads, with the error code of its answer."""
    if message.get("jsonrpc") != "2.0":
        return "'jsonrpc' must be \"2.0\"", INVALID_REQUEST
    if not isinstance(method, str):
        return ("'method' must be a string" if "method" in message else "no 'method'"), (
            INVALID_REQUEST
        )
    params = message.get("params")
    if params is not None and not isinstance(params, dict):
        return "'params' must be an object", INVALID_PARAMS
    envelope = {key: sub for key, sub in message.items() if key != "params"}
    if (why := _first_problem(envelope, "", 0)) is not None:
        return why, INVALID_REQUEST
    if (why := _first_problem(params, "params", 1)) is not None:
        return why, INVALID_PARAMS
    return None


def _why_refused(line: str, *, sdk_refuses: bool) -> _Refusal | None:
    """Why the message ``line`` is refused, read with the standard library's parser (the
    project's, which reports where it stopped) and checked member by member; ``None``
    when nothing is wrong and the SDK reads it (``sdk_refuses`` false): whatever the SDK
    refuses is refused, if only as ``not a JSON-RPC message the server reads``."""
    try:
        message = json.loads(line, parse_int=_int_or_huge)
    except RecursionError:
        return _Refusal(
            "a message", f"JSON nested deeper than {_MESSAGE_DEPTH} levels", INVALID_REQUEST
        )
    except json.JSONDecodeError as exc:
        why = f"not JSON ({exc.msg} at character {exc.pos + 1})"
        return _Refusal("a message", why, PARSE_ERROR)
    if isinstance(message, list):
        why = "batches are not served (one message per line)"
        return _Refusal("a batch (a JSON array)", why, INVALID_REQUEST)
    if not isinstance(message, dict):
        return _Refusal("a message", "not a JSON-RPC message (a JSON object)", INVALID_REQUEST)
    method = message.get("method")
    if "method" not in message and ("result" in message or "error" in message):
        if not sdk_refuses:
            return None  # a response to the server, which sends no request over stdio
        why = _first_problem(message, "", 0) or "not a valid JSON-RPC response"
        return _Refusal("a response", why)
    ident = message.get("id")
    id_problem = _id_problem(ident) if "id" in message else None
    if "id" in message or "method" not in message:  # a request, or no message at all
        readable = ident if "id" in message and id_problem is None else None
        what = "a request" if "method" in message else "a message"
        if readable is not None:
            what = f"request {quote_short(str(readable))}"

        def refused(why: str, code: int) -> _Refusal:
            return _Refusal(what, why, code, readable)

    else:
        what = f"notification {quote_short(method) if isinstance(method, str) else ''}"

        def refused(why: str, code: int) -> _Refusal:
            return _Refusal(what.rstrip(), why)

    if id_problem is not None:
        return refused(id_problem, INVALID_REQUEST)
    problem = _envelope_problem(message, method)
    if problem is not None:
        return refused(*problem)
    if sdk_refuses:
        return refused("not a JSON-RPC message the server reads", INVALID_REQUEST)
    return None


def _refusal(line: str) -> _Refusal | None:
    """Why the server refuses the message line ``line``, or ``None`` when it serves it as
    the SDK reads it (a blank line is no message, and is skipped by the SDK).

    The SDK's reader drops without a word (a DEBUG log line) what does not validate as a
    JSON-RPC message, and reads a request whose id is not a string or an integer (``8.5``,
    ``null``, ``{}``) as a notification, which it never answers: the client would wait
    forever. It is refused here first, with the project's limits (nesting at most
    :data:`_MESSAGE_DEPTH` levels, integers of at most ``sys.get_int_max_str_digits()``
    digits) and without lone surrogates (``"\\ud800"``), which the SDK refuses too. A
    valid message is read by the SDK's own parser first, and passed on unchanged."""
    if not line.strip():
        return None
    try:
        message = jsonrpc_message_adapter.validate_json(line, by_name=False)
    except ValueError:  # pydantic's ValidationError: the SDK would drop the line
        return _why_refused(line, sdk_refuses=True)
    if isinstance(message, JSONRPCNotification):
        return _why_refused(line, sdk_refuses=False)  # an "id" the SDK did not take?
    if (
        isinstance(message, JSONRPCRequest)
        and opening_brackets(line) > _MESSAGE_DEPTH
        and json_depth(message.params) >= _MESSAGE_DEPTH
    ):
        return _why_refused(line, sdk_refuses=False)
    if isinstance(message, JSONRPCRequest):
        return _repeated_key(line, message)
    return None


def _repeated_key(line: str, message: JSONRPCRequest) -> _Refusal | None:
    """The refusal of a request holding a key twice in one object (``-32602`` naming its
    path), as every other door refuses one: the SDK keeps the last value, so a doubled
    ``decision`` would change what is decided. Parsed again only when the line's colons
    leave room for a repeat (:func:`dissensus.io.jsontext.may_repeat_key`)."""
    keys = len(message.model_fields_set) + count_keys(message.params)
    if not may_repeat_key(line, keys) or (repeat := duplicate_key(line)) is None:
        return None
    what = f"request {quote_short(str(message.id))}"
    return _Refusal(what, f"{repeat.field}: duplicate key", INVALID_PARAMS, message.id)
