"""Recorded models: ``replay:FILE`` answers from a recording, ``record:FILE:<spec>`` makes one.

A recording is JSONL, one successful attempt a line::

    {"key": "<sha256>", "request": {...canonical request...},
     "response": {"text": "...", "model": "...", "prompt_tokens": 12, "completion_tokens": 3}}

The key is the SHA-256 of the canonical JSON (sorted keys, no whitespace, UTF-8) of
the request's ``messages`` (role and content), ``agent``, ``role``, ``stage``,
``json_schema``, ``temperature`` and ``seed``. It is model-independent (a recording of
one model replays under any name) and includes the agent, so the agents of an ensemble
never share answers. Choices this module makes:

* ``max_tokens`` and the structured-output mode are not in the key: they shape how an
  answer is obtained, not which question was asked.
* The same key may be recorded several times (a sampled ensemble asking twice);
  replay returns the recordings of a key in file order, cycling when asked more often.
* A miss raises :class:`ReplayMiss` naming the key and the closest recorded request:
  the one sharing the most words with the request (the Dice coefficient of the two
  multisets of words of their canonical JSON, each read up to its first
  :data:`CLOSEST_CHARS` characters; ties: first in file). The search is linear in the
  texts' lengths, so a miss costs milliseconds whatever the request holds: it runs on
  the caller's event loop (a server's), where an edit-distance search (quadratic, and
  slowest on the repetitive texts a miss often is) held the loop for seconds to minutes
  and no deadline could interrupt it. The hint is for a person reading the error, not
  a guarantee of the nearest request by any edit distance. When that request differs
  from the one asked only in its messages' text (same agent, stage, schema, roles,
  temperature and seed), the miss says so, naming both causes, the commoner first: the
  task's or case's text changed since the recording was made, or another version of
  dissensus, whose prompts differ, made it; either way it must be made again.
* The recorder writes only successful attempts, appends (so several runs may add to one
  file), writes every line whole as it is recorded (unbuffered), and records nothing but the canonical request and the
  answer: no headers, no settings, no credentials. A line that cannot be written (a
  full disk: ``record:/dev/full:...``) fails the attempt, not retried, with a
  :class:`~dissensus.llm.base.BackendError` of kind ``recording`` naming the recording
  file (``cannot write the recording FILE: No space left on device (ENOSPC)``): the
  answer is not used, since the recording would not hold it. The recording's directory
  is never created.
* Lines that are not valid recordings are a :class:`ConfigError` naming file and line,
  and so is a line holding a key twice in one object (``line 3: duplicate key``, field
  ``response.text``): readers differ on which value wins, so the answer it replays (or
  the request it is filed under) would not be certain. The check is the JSONL readers'
  (:func:`dissensus.io.jsontext.check_unique_keys`).
* A line's ``key`` must be the SHA-256 of its own ``request`` (as the recorder writes
  it): a line whose request was edited, or whose key was written by another tool, is a
  :class:`ConfigError` naming file and line (field ``key``). Answers are found by the
  key, so such a line answered a request it does not show, and the request it shows
  was a miss.
* Lines end at ``\n`` (or ``\r\n``) only, never at the other characters
  ``str.splitlines`` ends a line at: canonical JSON writes U+2028, U+2029 and U+0085
  unescaped, so a prompt holding one cut its line in two and the recording could not
  be read.
* A recording is read whole, so it must be a regular file of at most
  :data:`MAX_RECORDING_BYTES` (1 GiB; a device, a named pipe or a larger file is one
  :class:`ConfigError` naming it, before any memory is spent on it).
"""

from __future__ import annotations

import errno
import hashlib
import json
import re
import threading
from collections import Counter
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from dissensus.canonical import canonical as _canonical_json
from dissensus.errors import ConfigError
from dissensus.io.jsontext import JsonTextError, check_unique_keys
from dissensus.llm.base import (
    BackendError,
    BackendResponse,
    ChatBackend,
    ChatRequest,
    JsonMode,
    ReplayMiss,
)
from dissensus.types import JsonObject

__all__ = [
    "CLOSEST_CHARS",
    "MAX_RECORDING_BYTES",
    "RecordBackend",
    "Recording",
    "ReplayBackend",
    "canonical_request",
    "request_key",
]

CLOSEST_CHARS = 20_000
"""How much of each canonical request the closest-request hint of a miss reads."""

MAX_RECORDING_BYTES = 1024 * 1024 * 1024
"""Largest recording ``replay:FILE`` reads (it is read whole)."""

_WORD = re.compile(r"\w+")


def _words(text: str) -> Counter[str]:
    """The multiset of words of ``text``'s first :data:`CLOSEST_CHARS` characters."""
    return Counter(_WORD.findall(text[:CLOSEST_CHARS].lower()))


def _dice(a: Counter[str], b: Counter[str]) -> float:
    """Twice the shared words over all words (multisets): 1 for equal bags, 0 for none."""
    total = a.total() + b.total()
    return 2 * (a & b).total() / total if total else 1.0


def canonical_request(request: ChatRequest) -> JsonObject:
    """The fields of ``request`` that identify it, as plain JSON data."""
    return {
        "messages": [{"role": m.role, "content": m.content} for m in request.messages],
        "agent": request.agent,
        "role": request.role,
        "stage": request.stage,
        "schema": request.json_schema,
        "temperature": request.temperature,
        "seed": request.seed,
    }


def request_key(request: ChatRequest) -> str:
    """SHA-256 hex digest of the canonical JSON of ``request``."""
    return hashlib.sha256(_canonical_json(canonical_request(request)).encode("utf-8")).hexdigest()


class Recording(BaseModel):
    """One line of a recording."""

    model_config = ConfigDict(extra="ignore")

    key: str
    request: JsonObject
    response: BackendResponse


def _repeated_key(line: str) -> JsonTextError | None:
    """The error naming a key the recording line ``line`` (valid JSON) holds twice in
    one object, or None."""
    try:
        check_unique_keys(json.loads(line), line)
    except JsonTextError as exc:
        return exc
    except (ValueError, RecursionError):  # read by the recording's model already
        return None
    return None


class ReplayBackend:
    """Offline backend answering from a recording."""

    provider = "dissensus.replay"

    def __init__(self, recordings: list[Recording], *, name: str = "recording") -> None:
        self.model_id = f"replay:{name}"
        self._by_key: dict[str, list[Recording]] = {}
        for rec in recordings:
            self._by_key.setdefault(rec.key, []).append(rec)
        self._order = recordings
        self._positions: dict[str, int] = {}
        self._lock = threading.Lock()
        self._bags: list[Counter[str]] | None = None  # the recordings' words, on a first miss

    @classmethod
    def from_file(cls, path: str | Path) -> ReplayBackend:
        """Backend for the recording at ``path``."""
        name = str(path)
        from dissensus.files import read_file_bytes

        data = read_file_bytes(path, what="recording", max_bytes=MAX_RECORDING_BYTES)
        try:
            # Lines end at "\n" (or "\r\n") only: a line's JSON holds U+2028, U+0085 and
            # the like unescaped (canonical JSON), which str.splitlines() would cut at.
            lines = [line.removesuffix("\r") for line in data.decode("utf-8").split("\n")]
        except UnicodeDecodeError as exc:
            raise ConfigError(
                f"recording is not UTF-8 text (byte {exc.start}: {exc.reason})", file=name
            ) from exc
        recordings = []
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                recordings.append(Recording.model_validate_json(line))
            except ValidationError as exc:
                err = exc.errors()[0]
                where = ".".join(str(p) for p in err["loc"])
                raise ConfigError(
                    f"line {number}: {err['msg']}", file=name, field=where or None
                ) from exc
            repeated = _repeated_key(line)
            if repeated is not None:
                raise ConfigError(
                    f"line {number}: {repeated.message}", file=name, field=repeated.field
                )
            digest = hashlib.sha256(
                _canonical_json(recordings[-1].request).encode("utf-8")
            ).hexdigest()
            if digest != recordings[-1].key:
                raise ConfigError(
                    f"line {number}: its key is not the SHA-256 of its request (the line was "
                    "edited, or written by another tool): it would answer a request it does "
                    "not show; record it again",
                    file=name,
                    field="key",
                )
        return cls(recordings, name=Path(path).name)

    def __repr__(self) -> str:
        return f"ReplayBackend(model_id={self.model_id!r}, recordings={len(self._order)})"

    def _closest(self, request: ChatRequest) -> JsonObject | None:
        if not self._order:
            return None
        if self._bags is None:
            self._bags = [_words(_canonical_json(rec.request)) for rec in self._order]
        wanted = _words(_canonical_json(canonical_request(request)))
        scores = [_dice(wanted, bag) for bag in self._bags]
        best = max(range(len(scores)), key=scores.__getitem__)  # the first of equal scores
        return self._order[best].request

    async def send(self, request: ChatRequest, *, json_mode: JsonMode) -> BackendResponse:
        key = request_key(request)
        found = self._by_key.get(key)
        if not found:
            nearest = self._closest(request)
            closest = _canonical_json(nearest) if nearest is not None else None
            hint = (
                f"; closest recorded request: {closest[:400]}"
                if closest
                else "; the recording is empty"
            )
            if nearest is not None and _only_prompt_differs(canonical_request(request), nearest):
                hint += (
                    "; it differs from this request only in its prompt text: the task or"
                    " case text changed since it was recorded, or the recording was made"
                    " by another version of dissensus, whose prompts differ (record it"
                    " again)"
                )
            raise ReplayMiss(
                f"{self.model_id}: no recording for request {key} (agent={request.agent!r}, "
                f"stage={request.stage!r}){hint}",
                key=key,
                closest=closest,
            )
        with self._lock:
            position = self._positions.get(key, 0)
            self._positions[key] = position + 1
        return found[position % len(found)].response.model_copy()

    async def aclose(self) -> None:
        return None


def _only_prompt_differs(wanted: JsonObject, recorded: JsonObject) -> bool:
    """Whether ``recorded`` (a canonical request) is ``wanted`` but for the text of its
    messages: the same fields, the same roles in the same order, some content differing."""

    def roles(request: JsonObject) -> object:
        messages = request.get("messages")
        if not isinstance(messages, list):
            return None
        return [m.get("role") if isinstance(m, dict) else None for m in messages]

    rest = [k for k in {*wanted, *recorded} if k != "messages"]
    return (
        all(_canonical_json(wanted.get(k)) == _canonical_json(recorded.get(k)) for k in rest)
        and roles(wanted) == roles(recorded)
        and _canonical_json(wanted.get("messages")) != _canonical_json(recorded.get("messages"))
    )


def _recording_failed(path: Path, exc: OSError) -> BackendError:
    """The (not retried) attempt failure of a recording that cannot be written."""
    code = errno.errorcode.get(exc.errno or 0)
    reason = (exc.strerror or str(exc)) + (f" ({code})" if code else "")
    return BackendError(
        f"cannot write the recording {path}: {reason}", kind="recording", retryable=False
    )


class RecordBackend:
    """Wraps a backend and appends every successful attempt to a recording."""

    def __init__(self, inner: ChatBackend, path: str | Path) -> None:
        self.inner = inner
        self.path = Path(path)
        self.model_id = inner.model_id
        self.provider = str(getattr(inner, "provider", "dissensus"))
        self.initial_json_mode: JsonMode = getattr(inner, "initial_json_mode", "schema")
        self._lock = threading.Lock()
        try:
            # Unbuffered: each line is written whole when it is recorded, and closing
            # has nothing left to flush (so a failed write cannot fail again on close).
            self._handle = self.path.open("ab", buffering=0)
        except OSError as exc:
            raise ConfigError(
                f"cannot write recording: {exc.strerror or exc}", file=str(path)
            ) from None

    def __repr__(self) -> str:
        return f"RecordBackend(path={str(self.path)!r}, inner={self.inner!r})"

    def redact_message(self, text: str) -> str:
        """``text`` scrubbed of the wrapped backend's key, when it knows one."""
        own = getattr(self.inner, "redact_message", None)
        return str(own(text)) if callable(own) else text

    async def send(self, request: ChatRequest, *, json_mode: JsonMode) -> BackendResponse:
        response = await self.inner.send(request, json_mode=json_mode)
        line = {
            "key": request_key(request),
            "request": canonical_request(request),
            "response": response.model_dump(mode="json"),
        }
        data = memoryview((_canonical_json(line) + "\n").encode("utf-8"))
        failed: OSError | None = None
        with self._lock:
            try:
                while data:
                    written = self._handle.write(data)
                    data = data[written or 0 :]
            except OSError as exc:
                failed = exc
        if failed is not None:  # raised outside the except block: nothing chained
            raise _recording_failed(self.path, failed)
        return response

    async def aclose(self) -> None:
        with self._lock:
            if not self._handle.closed:
                self._handle.close()
        await self.inner.aclose()
