"""Loading user code named ``module:function`` (function agents, similarity functions).

Problem files, policies and ``--similarity`` may name Python code. Naming code is
running it: such files are trusted code, as trusted as the program that reads them
(``docs/concord.md`` and ``docs/states.md`` say so). This is the one loader.

Choices where nothing else decides:

* ``module`` is looked up first as a file beside the naming file (``base_dir``):
  ``pkg.mod`` is ``base_dir/pkg/mod.py`` (or ``base_dir/pkg/mod/__init__.py``). Such a
  file is imported by path (``importlib.util.spec_from_file_location``) under a private
  module name, so it can neither shadow nor be shadowed by an installed package, and
  ``sys.path`` is never changed: a planted ``openai.py`` beside a problem file cannot
  replace the SDK for the rest of the process. The same file is executed once per
  process (the loaded module is cached by its resolved path).
* Otherwise ``module`` is imported normally (an installed or already importable module).
* Dots after the colon reach nested attributes (``mod:Class.method``).
* Every failure is a :class:`~dissensus.errors.ConfigError` naming the file and field,
  a module that raises ``SystemExit`` (or any other exception but
  ``KeyboardInterrupt``) while it is imported included: importing names no way out of
  the program.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from dissensus.errors import ConfigError

__all__ = ["code_file", "is_code_name", "load_callable"]

_LOCK = threading.Lock()
_BY_PATH: dict[Path, ModuleType] = {}


def is_code_name(name: str) -> bool:
    """Whether ``name`` names Python code (``module:function``)."""
    module, sep, attr = name.partition(":")
    return bool(sep and module and attr and module.replace(".", "").replace("_", "").isalnum())


def _module_file(base_dir: Path, module_name: str) -> Path | None:
    parts = module_name.split(".")
    candidate = base_dir.joinpath(*parts).with_suffix(".py")
    if candidate.is_file():
        return candidate
    package = base_dir.joinpath(*parts, "__init__.py")
    return package if package.is_file() else None


def code_file(spec: str, base_dir: str | Path) -> Path | None:
    """The file beside ``base_dir`` that :func:`load_callable` imports for ``spec``
    (``module:function``); ``None`` when the module is not such a file (it is then an
    importable module, or the load fails)."""
    module_name, sep, attr_path = spec.partition(":")
    if not sep or not module_name or not attr_path:
        return None
    try:
        return _module_file(Path(base_dir), module_name)
    except (OSError, ValueError):
        return None


def _import_file(path: Path, module_name: str) -> ModuleType:
    resolved = path.resolve()
    with _LOCK:
        found = _BY_PATH.get(resolved)
        if found is not None:
            return found
        digest = hashlib.sha256(str(resolved).encode("utf-8")).hexdigest()[:12]
        private = f"_dissensus_user_code_{digest}_{module_name.replace('.', '_')}"
        spec = importlib.util.spec_from_file_location(private, resolved)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot load {resolved}")
        module = importlib.util.module_from_spec(spec)
        # Registered under the private name only (dataclasses and pickling look modules
        # up in sys.modules); never under the user's name, never on sys.path.
        sys.modules[private] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            sys.modules.pop(private, None)
            raise
        _BY_PATH[resolved] = module
        return module


def load_callable(
    spec: str,
    *,
    base_dir: str | Path | None = None,
    field: str | None = None,
    file: str | None = None,
) -> Callable[..., Any]:
    """The callable ``spec`` (``module:function``) names, found beside ``base_dir`` first."""
    module_name, sep, attr_path = spec.partition(":")
    if not sep or not module_name or not attr_path:
        raise ConfigError(f"expected 'module:function', got {spec!r}", file=file, field=field)
    try:
        path = _module_file(Path(base_dir), module_name) if base_dir is not None else None
        module = (
            _import_file(path, module_name)
            if path is not None
            else importlib.import_module(module_name)
        )
    except (ConfigError, KeyboardInterrupt):
        raise
    except BaseException as exc:  # user code: failing to import (sys.exit too) is a config error
        raise ConfigError(
            f"cannot import module {module_name!r}: {type(exc).__name__}: {exc}",
            file=file,
            field=field,
        ) from exc
    target: Any = module
    for part in attr_path.split("."):
        if not hasattr(target, part):
            raise ConfigError(
                f"module {module_name!r} has no attribute {attr_path!r}", file=file, field=field
            )
        target = getattr(target, part)
    if not callable(target):
        raise ConfigError(f"{spec!r} is not callable", file=file, field=field)
    return target  # type: ignore[no-any-return]
