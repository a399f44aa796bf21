"""CLI commands: llm (registered on import)."""
