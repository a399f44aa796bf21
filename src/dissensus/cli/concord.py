"""CLI commands: concord (registered on import)."""
