"""The version of dissensus, in one place: the package's ``__version__`` and the version an
acceptance file records as the code that wrote it.

Choices this module makes: the version is the source's, not the installed package
metadata's, so a file records the code that actually wrote it (an editable install's
metadata keeps the version it was installed at).
"""

from __future__ import annotations

__all__ = ["__version__"]

__version__ = "0.3.1"
