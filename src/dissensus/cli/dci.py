"""CLI commands: dci (registered on import)."""
