"""CLI commands: route (registered on import)."""
