"""Deprecated public names: a module ``__getattr__`` that still hands out an earlier
name, with a :class:`DeprecationWarning` naming the one to use (httpx's way).

Nothing inside the package uses a deprecated name: ruff's banned-API rule in
``pyproject.toml`` lists each, and ``tests/test_deprecated_names.py`` checks the list
against the modules.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Iterable, Mapping
from types import ModuleType
from typing import Any

__all__ = ["deprecated_names", "moved", "renamed"]

Lookup = Mapping[str, tuple[str, Callable[[], Any]]]
"""Earlier name -> (what to use instead, in words; how to get the current object)."""


def deprecated_names(module: str, lookup: Lookup) -> Callable[[str], Any]:
    """A module ``__getattr__`` serving the earlier names of ``lookup`` with a warning."""

    def __getattr__(name: str) -> Any:
        entry = lookup.get(name)
        if entry is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        use, current = entry
        warnings.warn(f"{module}.{name} is deprecated: use {use}", DeprecationWarning, stacklevel=2)
        return current()

    return __getattr__


def renamed(
    module: str, namespace: Mapping[str, Any], names: Mapping[str, str], why: str = ""
) -> Lookup:
    """The lookup of names renamed within ``module`` (earlier -> current), the current
    objects read from ``namespace`` (the module's ``globals()``) when asked for."""
    note = f" ({why})" if why else ""
    return {
        old: (f"{module}.{new}{note}", lambda new=new: namespace[new])  # type: ignore[misc]
        for old, new in names.items()
    }


def moved(target: ModuleType, names: Iterable[str]) -> Lookup:
    """The lookup of names that moved to module ``target`` (same names there)."""
    return {
        name: (f"{target.__name__}.{name}", functools.partial(getattr, target, name))
        for name in names
    }
