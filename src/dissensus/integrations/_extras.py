"""The error of an integration whose framework is not installed: it names the extra.

Choices this module makes:

* A framework missing is a :class:`ModuleNotFoundError` still (so that code testing for
  an optional integration with ``except ImportError`` or ``pytest.importorskip`` goes on
  working), its ``name`` the module that was missing, its message naming the door and
  the command that installs it (``pip install 'dissensus[langgraph]'``), then Python's
  own words (``No module named 'langgraph'``): a module missing inside an installed
  framework names itself there.
"""

from __future__ import annotations

__all__ = ["missing_extra"]


def missing_extra(exc: ModuleNotFoundError, *, door: str, extra: str) -> ModuleNotFoundError:
    """The error raised for ``exc``, met importing the framework of ``door`` (installed by
    the optional extra ``extra``)."""
    return ModuleNotFoundError(
        f"{door} needs the optional extra {extra!r}: pip install 'dissensus[{extra}]' ({exc})",
        name=exc.name,
    )
