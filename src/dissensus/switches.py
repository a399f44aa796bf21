"""On/off environment variables, read one way.

Every variable that turns something on or off (``$DISSENSUS_PROGRESS``,
``$DISSENSUS_ALLOW_CODE``) takes the same spellings, in any case and with spaces around
them: ``1``, ``true``, ``yes``, ``on`` for on and ``0``, ``false``, ``no``, ``off`` for
off. Unset or empty means the variable says nothing (the caller's default). Any other
value is a :class:`~dissensus.errors.ConfigError` that names the variable and the values
it takes: a typo such as ``DISSENSUS_ALLOW_CODE=ture`` is said, not silently read as off.
"""

from __future__ import annotations

import os

from dissensus.errors import ConfigError

__all__ = ["OFF", "ON", "env_switch"]

ON = ("1", "true", "yes", "on")
"""Spellings of on."""
OFF = ("0", "false", "no", "off")
"""Spellings of off."""


def env_switch(name: str, *, unset: str) -> bool | None:
    """``$name`` read as a switch: ``True``, ``False``, or ``None`` when unset or empty;
    a :class:`ConfigError` naming the values it takes for any other (``unset`` says what
    leaving it unset means, for that message)."""
    raw = os.environ.get(name, "")
    value = raw.strip().lower()
    if not value:
        return None
    if value in ON:
        return True
    if value in OFF:
        return False
    raise ConfigError(
        f"${name} is {raw!r}: set it to {', '.join(ON)} (on), "
        f"{', '.join(OFF)} (off), or leave it unset ({unset})"
    )
