"""CLI commands: guard (registered on import)."""
