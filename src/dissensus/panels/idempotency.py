"""Idempotency keys of the panel door: one key, one case, however often it is sent.

A client that sends a request with an idempotency key (the HTTP door's
``Idempotency-Key`` header, :meth:`dissensus.panels.PanelChat.acomplete`'s
``idempotency_key``) and sends it again — its own retry after a timeout, an SDK's
automatic retry, a restart — gets the case the first one journalled, not a second
case with the members asked and billed again. This module holds the parts that need no
journal: the key's form, the run id a key names, the fingerprint of the request it was
used with, and the errors a key's request is answered with (:func:`key_in_use`,
:func:`check_fingerprint`).

Choices this module makes (the IETF ``Idempotency-Key`` header draft and the
payment APIs that use one are the model):

* **A key** is 1 to :data:`MAX_KEY_CHARS` visible ASCII characters (``!`` to ``~``); a
  UUID is the usual choice. Anything else is refused (:class:`~dissensus.panels.shapes.ChatError`
  400 ``invalid_idempotency_key``), never silently ignored: a client that meant to be
  protected would not be.
* **Its case's run id is derived from it**: ``ik-`` and 24 hex digits of the SHA-256 of
  the key's scope and the key (:func:`keyed_run_id`). The journal's run ids are unique, so
  the same key sent to several server processes on one journal (PostgreSQL) still makes
  one run, and a restarted server finds the case without any table of keys of its own;
  the key itself is not stored. Keys do not expire: they live as long as their run.
* **The scope** is whose key it is: the HTTP door scopes a key to the token's name, so
  two callers choosing the same key never meet; the library call's default scope is
  the empty string.
* **The fingerprint** (:func:`request_fingerprint`) is the SHA-256 of the canonical JSON of
  the validated request without ``stream`` and ``stream_options`` (how the answer is
  delivered, not what is asked): the same key with another question is refused
  (``422`` ``idempotency_key_reused``) instead of answered with the first question's
  case. It is journalled in the panel's ``meta`` as :data:`FINGERPRINT_FIELD`.
"""

from __future__ import annotations

import hashlib

from dissensus.canonical import canonical
from dissensus.errors import ConfigError, DissensusError
from dissensus.panels.shapes import ChatError, CompletionRequest
from dissensus.store.errors import RunExists
from dissensus.types import Panel

__all__ = [
    "FINGERPRINT_FIELD",
    "KEYED_RUN_PREFIX",
    "MAX_KEY_CHARS",
    "check_fingerprint",
    "check_key",
    "key_in_use",
    "keyed_run_id",
    "request_fingerprint",
    "run_taken",
]

MAX_KEY_CHARS = 255
"""The longest idempotency key accepted."""

KEYED_RUN_PREFIX = "ik-"
"""How the run id of a keyed request begins."""

FINGERPRINT_FIELD = "request_sha256"
"""The panel ``meta`` field holding a keyed request's fingerprint."""


def check_key(key: object, *, param: str = "Idempotency-Key") -> str:
    """``key`` when it is an acceptable idempotency key; a ``400`` :class:`ChatError` naming
    ``param`` otherwise."""
    if not isinstance(key, str):
        raise ChatError(
            400,
            f"an idempotency key is a string, not {type(key).__name__}",
            param=param,
            code="invalid_idempotency_key",
        )
    if not 1 <= len(key) <= MAX_KEY_CHARS or not all("!" <= c <= "~" for c in key):
        raise ChatError(
            400,
            f"an idempotency key is 1 to {MAX_KEY_CHARS} visible ASCII characters "
            "(no spaces), such as a UUID",
            param=param,
            code="invalid_idempotency_key",
        )
    return key


def keyed_run_id(key: str, scope: str = "") -> str:
    """The run id of the case a request with ``key`` in ``scope`` makes."""
    digest = hashlib.sha256(f"{scope}\x00{key}".encode("utf-8", "surrogatepass")).hexdigest()
    return f"{KEYED_RUN_PREFIX}{digest[:24]}"


def request_fingerprint(request: CompletionRequest) -> str:
    """What a key was used to ask, as a digest (the module docstring)."""
    asked = request.model_dump(mode="json", exclude={"stream", "stream_options"})
    return hashlib.sha256(canonical(asked).encode("utf-8", "surrogatepass")).hexdigest()


def key_in_use(case_id: str, run_id: str) -> ChatError:
    """The ``409`` of a keyed request whose case another process is deciding, or whose
    run stopped before its end."""
    return ChatError(
        409,
        f"the case of this idempotency key ({case_id}) is not journalled whole: another "
        f"request with the key is being decided, or its run stopped before its end "
        f"(`dissensus runs resume {run_id}`); ask again later",
        param="Idempotency-Key",
        code="idempotency_key_in_use",
    )


def run_taken(exc: DissensusError) -> bool:
    """Whether a decision failed because its run id was taken meanwhile (a keyed request
    decided by another process on the same journal)."""
    return isinstance(exc, RunExists) or (isinstance(exc, ConfigError) and exc.field == "run_id")


def check_fingerprint(panel: Panel, fingerprint: str, case_id: str) -> None:
    """Refuse a key's journalled case when another request made it (``422``)."""
    if panel.meta.get(FINGERPRINT_FIELD) != fingerprint:
        raise ChatError(
            422,
            f"this idempotency key was used with another request (case {case_id}): "
            "send a new request with a new key",
            param="Idempotency-Key",
            code="idempotency_key_reused",
        )
