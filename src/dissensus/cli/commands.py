"""Imports every command module so that each registers its commands on the app.

The import order is the order of ``dissensus --help``: the data flow, reading first.
"""

from importlib import import_module

from dissensus.cli.app import app
from dissensus.cli.common import write_stdout

for _module in (
    "route",
    "convert",
    "guard",
    "concord",
    "dci",
    "decide",
    "review",
    "runs",
    "acceptance",
    "monitor",
    "serve",
    "mcp",
    "llm",
):
    import_module(f"dissensus.cli.{_module}")


@app.command("version")
def version() -> None:
    """Print the installed version."""
    from dissensus import __version__

    write_stdout(f"{__version__}\n", flush=True)
