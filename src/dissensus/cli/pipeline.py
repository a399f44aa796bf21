"""CLI commands: pipeline (registered on import)."""
