"""Building pydantic models from values already known to be valid (hot-path helper).

The reader and the router create two small models per panel; at 10,000 panels a second,
pydantic's ``model_construct`` (about 15 us each) would take a large share of the time.
:func:`trusted` sets the instance state directly, as ``model_construct`` does, but
without its per-field default handling. Use it only with a value for every field, each
already of the field's type; anything read from outside goes through validation.
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel

__all__ = ["trusted"]

M = TypeVar("M", bound=BaseModel)

_FIELDS: dict[type[BaseModel], frozenset[str]] = {}


def trusted(cls: type[M], values: dict[str, Any]) -> M:
    """An instance of ``cls`` holding ``values`` (every field, already valid)."""
    fields = _FIELDS.get(cls)
    if fields is None:
        fields = _FIELDS[cls] = frozenset(cls.model_fields)
    obj = cls.__new__(cls)
    _setattr(obj, "__dict__", values)
    _setattr(obj, "__pydantic_fields_set__", set(fields))
    _setattr(obj, "__pydantic_extra__", None)
    _setattr(obj, "__pydantic_private__", None)
    return obj


_setattr = object.__setattr__
