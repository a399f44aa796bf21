"""Building pydantic models from values already known to be valid (hot-path helper).

The reader and the router create two small models per panel; at 10,000 panels a second,
pydantic's ``model_construct`` (about 15 us each) would take a large share of the time.
:func:`trusted` (:func:`dissensus.types.trusted`, re-exported here) sets the instance
state directly, as ``model_construct`` does, but without its per-field default handling.
Use it only with a value for every field, each already of the field's type; anything
read from outside goes through validation.
"""

from __future__ import annotations

from dissensus.types import trusted

__all__ = ["trusted"]
