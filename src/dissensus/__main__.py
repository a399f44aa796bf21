from dissensus.cli import _entry

_entry()
