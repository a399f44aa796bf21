"""Fail early, with the install line, when the ``accept`` extra is missing.

scikit-learn and scipy are found without importing them (``scipy.stats`` and
scikit-learn take seconds to import); the modules that use them import them on first use.
"""

from __future__ import annotations

from importlib.util import find_spec

from dissensus.errors import ConfigError

for _name in ("sklearn", "scipy"):
    if find_spec(_name) is None:  # pragma: no cover - depends on the installation
        raise ConfigError(
            f"learned acceptance needs scikit-learn and scipy ({_name} is missing): pip install 'dissensus[accept]'"
        )
