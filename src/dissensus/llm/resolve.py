"""Model specs: one string selects any model, everywhere (``--model`` / ``DISSENSUS_MODEL``).

Forms:

* ``openai:MODEL`` — :class:`OpenAIBackend`; base URL from ``OPENAI_BASE_URL`` (default
  the SDK's, api.openai.com), key from ``OPENAI_API_KEY``.
* ``scripted:FILE`` — :class:`ScriptedBackend` over a YAML rule file.
* ``replay:FILE`` — :class:`ReplayBackend` over a JSONL recording.
* ``record:FILE:<inner spec>`` — records the inner model's answers into FILE (the file
  name ends at the first ``:``; the rest is any spec, e.g. ``record:r.jsonl:openai:gpt-4o``).

Choices this module makes: with ``OPENAI_BASE_URL`` set and no key, the key
``unused`` is sent (local servers ignore it); with neither, it is a configuration error
naming ``OPENAI_API_KEY``. A base URL with credentials in it (user-info, a key in the
query) is refused by :class:`OpenAIBackend` when the spec is checked or resolved, naming
``$OPENAI_BASE_URL``, before any request; so is a key that cannot be sent as it is
(whitespace around it, a character outside printable ASCII), naming ``$OPENAI_API_KEY``:
refused, not stripped. So is an ``openai:`` model id with whitespace around it or a
control character in it (:func:`model_id_problem`: ``openai: gpt-4o``, a newline read
with the spec from a file), which is sent as it is. Unknown prefixes and empty parts are
configuration errors.
:func:`check_model_spec` checks a spec without side effects (no file created, no
connection made), so a command can refuse a bad spec before it starts any work; its
errors name the spec. A build that checks several specs (a run specification: the run's
model and every agent's) passes one ``checked`` set to each check, so a file several
specs name (one recording for every agent) is read and validated once. A file is known
by its resolved path, size and modification time (:data:`ModelFileKey`): another path to
the same file is not read again, a file that changed since it was checked is. The set
lives as long as the build (nothing is cached across builds: a file may change between
two runs).

A recording is an output, and a command never writes over a file it reads: a
``record:FILE:<spec>`` whose FILE is the same file (the same resolved path, symbolic
links followed, or the same file on disk: a hard link) as a file its inner spec reads
or writes (a ``scripted:`` rule file, a ``replay:`` recording, a nested ``record:``
file) is a :class:`ConfigError` naming the spec, refused when the spec is resolved and
when it is checked, before anything is appended. :func:`check_model_spec` also takes
the command's own files (``files``: label -> path, its inputs and outputs) and refuses a
recording that is one of them. The recording's directory must exist: it is never
created (as no other output's is). A device (``/dev/null``) is appended to in place.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dissensus.errors import ConfigError
from dissensus.files import same_file
from dissensus.llm.base import ChatBackend
from dissensus.llm.budget import Budget
from dissensus.llm.client import ClientSettings, ModelClient
from dissensus.llm.openai_backend import PLACEHOLDER_KEY, OpenAIBackend
from dissensus.llm.replay import RecordBackend, ReplayBackend
from dissensus.llm.scripted import ScriptedBackend

__all__ = [
    "MODEL_ENV",
    "ModelFileKey",
    "check_model_spec",
    "check_recordings",
    "make_backend",
    "model_id_problem",
    "resolve_model",
]

MODEL_ENV = "DISSENSUS_MODEL"
"""Environment variable holding the default model spec."""

_FORMS = "openai:MODEL, scripted:FILE, replay:FILE, record:FILE:<spec>"


ModelFileKey = tuple[str, int, int]
"""A model spec's file as :func:`check_model_spec` knows it: resolved path, size in bytes
and modification time in nanoseconds."""


def _file_key(path: str) -> ModelFileKey | None:
    """``path``'s :data:`ModelFileKey`; ``None`` when it cannot be looked at (the read
    that follows names the problem)."""
    try:
        info = os.stat(path)
        resolved = str(Path(path).resolve())
    except (OSError, RuntimeError, ValueError):
        return None
    return (resolved, info.st_size, info.st_mtime_ns)


def check_model_spec(
    spec: str,
    *,
    checked: set[ModelFileKey] | None = None,
    files: Mapping[str, str | None] | None = None,
) -> None:
    """Raise :class:`ConfigError` naming ``spec`` unless it can make a backend.

    Files of ``scripted:`` and ``replay:`` specs are read and validated; the directory of
    a ``record:`` file must exist; ``openai:`` needs a key or a base URL. Nothing is
    written and no server is contacted. ``checked`` holds the files found valid by
    earlier checks of the same build: a file in it (same resolved path, size and
    modification time) is not read again, and a file found valid is added. ``files``
    (label -> path) are the command's own inputs and outputs: a ``record:`` file that is
    one of them is refused.
    """
    try:
        _check(spec, checked, files or {})
    except ConfigError as exc:
        text = str(exc)
        if f"{spec!r}" in text:
            raise
        prefix = f"field {exc.field!r}: " if exc.field else ""
        text = text.removeprefix(prefix)
        raise ConfigError(f"model spec {spec!r}: {text}") from None


def _files_of(spec: str, *, recordings: bool) -> list[str]:
    """The files of ``spec``: its ``scripted:``/``replay:`` file, and for a ``record:``
    spec its inner spec's files, and its recording too when ``recordings``."""
    kind, sep, rest = spec.partition(":")
    if not sep or not rest:
        return []
    if kind in ("scripted", "replay"):
        return [rest]
    if kind == "record":
        path, sep, inner = rest.partition(":")
        if not recordings:
            return _files_of(inner, recordings=False) if sep and path else []
        return ([path] if path else []) + (_files_of(inner, recordings=True) if sep else [])
    return []


def _spec_files(spec: str) -> list[str]:
    """The files ``spec`` reads or writes: its ``scripted:``/``replay:`` file, and for a
    ``record:`` spec its recording and its inner spec's files."""
    return _files_of(spec, recordings=True)


def spec_reads(spec: str) -> list[str]:
    """The files ``spec`` reads: its ``scripted:`` or ``replay:`` file, and a
    ``record:`` spec's inner spec's (its recording is written, not read)."""
    return _files_of(spec, recordings=False)


def _check_recording(
    spec: str, path: str, inner: str, files: Mapping[str, str | None] | None = None
) -> None:
    """Refuse a recording ``path`` in a missing directory, or that is the same file as
    one its inner spec reads or writes, or as one of the command's ``files``."""
    parent = Path(path).parent
    if not parent.is_dir():
        raise ConfigError(
            f"model spec {spec!r}: recording directory does not exist: {parent}", field="model"
        )
    for other in _spec_files(inner):
        if same_file(path, other):
            raise ConfigError(
                f"model spec {spec!r}: the recording {path} is the same file as {other} "
                f"of {inner!r}; refusing to append to it",
                field="model",
            )
    for label, given in (files or {}).items():
        if given is None or given == "-" or "://" in given:
            continue
        if same_file(path, given):
            named = given if label == given else f"{given} ({label})"
            raise ConfigError(
                f"model spec {spec!r}: the recording {path} is the same file as {named}; "
                "refusing to append to it",
                field="model",
            )


def check_recordings(spec: str | None, files: Mapping[str, str | None]) -> None:
    """Refuse (:class:`ConfigError` naming ``spec``) a ``record:`` file of ``spec`` that is
    the same file as one of ``files`` (label -> path: a command's inputs and outputs).
    Nothing is read: the spec itself is checked by :func:`check_model_spec`."""
    while spec:
        kind, _, rest = spec.partition(":")
        if kind != "record":
            return
        path, sep, inner = rest.partition(":")
        if not sep or not path:
            return
        _check_recording(spec, path, inner, files)
        spec = inner


def _check(spec: str, checked: set[ModelFileKey] | None, files: Mapping[str, str | None]) -> None:
    kind, sep, rest = spec.partition(":")
    if not sep or not rest:
        raise ConfigError(f"invalid model spec {spec!r}; expected one of {_FORMS}", field="model")
    if kind in ("scripted", "replay") and checked is not None:
        key = _file_key(rest)  # looked at before the read: a change during it reads again
        if key is not None and key in checked:
            return
        make_backend(spec)
        if key is not None:
            checked.add(key)
        return
    if kind in ("openai", "scripted", "replay"):
        make_backend(spec)
        return
    if kind == "record":
        path, sep, inner = rest.partition(":")
        if not sep or not path or not inner:
            raise ConfigError(
                f"invalid model spec {spec!r}; expected record:FILE:<spec>", field="model"
            )
        _check_recording(spec, path, inner, files)
        _check(inner, checked, files)
        return
    raise ConfigError(
        f"unknown model kind {kind!r} in {spec!r}; expected one of {_FORMS}", field="model"
    )


def model_id_problem(model: str) -> str | None:
    """Why ``model`` cannot be an ``openai:`` model id as written (``None`` when it can):
    whitespace around it or a control character in it. The id is sent as it is, so a
    spec copied with a space (``openai: gpt-4o``) or read from a file with its newline
    asked the server for a model of that name on every call, each refused (or, by a
    local server that answers any name, answered) only once the run was under way."""
    if model != model.strip():
        return f"the model id {model!r} has whitespace around it"
    for i, ch in enumerate(model):
        if not ch.isprintable():  # a control character, or whitespace other than a space
            return f"the model id holds the control character {ch!r} at position {i + 1}"
    return None


def make_backend(spec: str, *, settings: ClientSettings | None = None) -> ChatBackend:
    """The backend a spec names."""
    settings = settings or ClientSettings()
    kind, sep, rest = spec.partition(":")
    if not sep or not rest:
        raise ConfigError(f"invalid model spec {spec!r}; expected one of {_FORMS}", field="model")
    if kind == "openai":
        problem = model_id_problem(rest)
        if problem is not None:
            raise ConfigError(f"invalid model spec {spec!r}: {problem}", field="model")
        base_url = os.environ.get("OPENAI_BASE_URL") or None
        api_key = os.environ.get("OPENAI_API_KEY")  # set but empty: refused as empty
        if api_key is None and base_url is None:
            raise ConfigError(
                "OPENAI_API_KEY is not set (or set OPENAI_BASE_URL for a local server)",
                field="model",
            )
        return OpenAIBackend(
            rest,
            base_url=base_url,
            api_key=api_key if api_key is not None else PLACEHOLDER_KEY,
            timeout_s=settings.timeout_s,
        )
    if kind == "scripted":
        return ScriptedBackend.from_file(rest)
    if kind == "replay":
        return ReplayBackend.from_file(rest)
    if kind == "record":
        path, sep, inner = rest.partition(":")
        if not sep or not path or not inner:
            raise ConfigError(
                f"invalid model spec {spec!r}; expected record:FILE:<spec>", field="model"
            )
        _check_recording(spec, path, inner)
        return RecordBackend(make_backend(inner, settings=settings), path)
    raise ConfigError(
        f"unknown model kind {kind!r} in {spec!r}; expected one of {_FORMS}", field="model"
    )


def resolve_model(
    spec: str | None = None,
    *,
    budget: Budget | None = None,
    settings: ClientSettings | None = None,
    tracer_provider: Any = None,
) -> ModelClient:
    """A :class:`ModelClient` for ``spec`` (None: ``$DISSENSUS_MODEL``)."""
    if spec is None:
        spec = os.environ.get(MODEL_ENV) or None
        if spec is None:
            raise ConfigError(
                f"no model given: pass --model or set {MODEL_ENV} ({_FORMS})", field="model"
            )
    backend = make_backend(spec, settings=settings)
    return ModelClient(backend, budget=budget, settings=settings, tracer_provider=tracer_provider)
