"""Imports every command module so that each registers its commands on the app."""

from dissensus.cli import concord, convert, dci, guard, llm, pipeline, route  # noqa: F401
