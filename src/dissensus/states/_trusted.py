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


# ``values`` are a model's field values by name (already valid), not JSON.
def trusted(cls: type[M], values: dict[str, Any]) -> M:
    """An instance of ``cls`` holding ``values`` (every field, already valid)."""
    fields = _FIELDS.get(cls)
    if fields is None:
        fields = _FIELDS[cls] = frozenset(cls.model_fields)
    obj = _new(cls)
    _setattr(obj, "__dict__", values)
    _set_fields_set(obj, set(fields))
    _set_extra(obj, None)
    _set_private(obj, None)
    return obj


_new = object.__new__  # BaseModel defines no __new__
_setattr = object.__setattr__
# BaseModel's slots, set through their descriptors (no attribute lookup per call).
_set_fields_set = BaseModel.__dict__["__pydantic_fields_set__"].__set__
_set_extra = BaseModel.__dict__["__pydantic_extra__"].__set__
_set_private = BaseModel.__dict__["__pydantic_private__"].__set__
