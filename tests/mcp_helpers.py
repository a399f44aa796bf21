"""Reading the MCP server's tool results in tests."""

from __future__ import annotations

from typing import Any


def tool_text(result: Any) -> str:
    """The text content of a tool result (its error message, when it is one)."""
    return "\n".join(getattr(c, "text", "") for c in result.content)


def tool_data(result: Any) -> Any:
    """The structured content of a successful tool result (a bare ``result`` unwrapped)."""
    assert not result.is_error, tool_text(result)
    data = result.structured_content
    return data["result"] if isinstance(data, dict) and set(data) == {"result"} else data
