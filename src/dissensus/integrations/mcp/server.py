"""The server: the SDK's, with arguments that do not validate and unknown arguments
reported on one line, every tool registered (:func:`build_server`), served on stdio
(:func:`serve`)."""

from __future__ import annotations

import os
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp.server.stdio import stdio_server
from mcp.types import CallToolResult, InputRequiredResult
from pydantic import ValidationError

from dissensus import __version__
from dissensus.integrations.mcp.arguments import UNTRUSTED
from dissensus.integrations.mcp.errors import _one_line
from dissensus.integrations.mcp.settings import _Settings
from dissensus.integrations.mcp.tools_concord import add_concord_tools
from dissensus.integrations.mcp.tools_decide import add_decide_tool
from dissensus.integrations.mcp.tools_panels import add_panel_tools
from dissensus.integrations.mcp.tools_review import add_review_tools
from dissensus.integrations.mcp.tools_runs import add_runs_tools
from dissensus.integrations.mcp.transport import _ANSWERS, _bound_stdin_lines
from dissensus.pipeline.shift_watch import EVERY


class _Server(MCPServer):
    """The SDK's server, with arguments that do not validate reported on one line naming
    the fields (:func:`_one_line`) rather than as pydantic's multi-line dump, an
    argument the tool does not take refused naming it (the SDK ignored it: a misspelt
    ``jounral`` decided into the server's default journal), and the messages the stdio
    reader refuses answered (:func:`.messages._refusal`)."""

    async def run_stdio_async(self) -> None:
        """The SDK's stdio loop, the messages its reader refuses answered on its write
        stream (:data:`_ANSWERS`)."""
        async with stdio_server() as (read_stream, write_stream):
            with _ANSWERS.serving(write_stream.send):
                await self._lowlevel_server.run(
                    read_stream,
                    write_stream,
                    self._lowlevel_server.create_initialization_options(),
                )

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> CallToolResult | InputRequiredResult:
        tool = self._tool_manager.get_tool(name)
        if tool is not None and isinstance(arguments, dict):
            takes = tool.parameters.get("properties", {})
            unknown = [str(k) for k in arguments if k not in takes]
            if unknown:
                raise ToolError(
                    f"Error executing tool {name}: unknown argument "
                    f"{', '.join(repr(k[:80]) for k in unknown[:5])}"
                    f"{f' and {len(unknown) - 5} more' if len(unknown) > 5 else ''} "
                    f"(it takes: {', '.join(takes) or 'none'})"
                )
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            cause = exc.__cause__
            if isinstance(exc, UnexpectedToolError) or not isinstance(cause, ValidationError):
                raise
            # Still caused by the ValidationError: the SDK logs its fields only.
            raise ToolError(f"Error executing tool {name}: {_one_line(cause)}") from cause


INSTRUCTIONS = (
    "Decide under disagreement: route, guard, decide, negotiate, and the human review "
    "queue. " + UNTRUSTED
)
"""What a client is told of the server. Agent text reaches the caller, usually a model,
in the results of ``decide``, ``route``, ``review_list``, ``review_show`` and
``review_resolve``; the server says, and those tools' descriptions repeat, that it is
data to weigh, never instructions to follow."""


def build_server(
    *,
    journal: str | None = None,
    policy: str | None = None,
    reviewer: str | None = None,
    allow_functions: bool = False,
    root: str | os.PathLike[str] | None = None,
    shift_every: int = EVERY,
) -> MCPServer:
    """The MCP server with every dissensus tool registered; the tools' file arguments
    lie under ``root`` (default: the working directory); ``shift_every``: judged cases
    between two checks of ``decide``'s shift watch (as ``dissensus serve
    --shift-every``; 0: none)."""
    settings = _Settings(
        journal,
        policy,
        reviewer,
        root=root,
        allow_functions=allow_functions,
        shift_every=shift_every,
    )
    if policy is not None:
        # The server's own policy is read again by each call (a changed file counts), but
        # a policy that cannot work fails here, before a client connects.
        settings.spec(None)
    server: MCPServer = _Server(
        name="dissensus",
        version=__version__,
        instructions=INSTRUCTIONS,
        # stderr is the client's log of the server: warnings and errors only, not an INFO
        # line for every call whose arguments did not validate (the caller has that error).
        log_level="WARNING",
    )

    add_panel_tools(server, settings)
    add_decide_tool(server, settings)
    add_concord_tools(server, settings)
    add_review_tools(server, settings)
    add_runs_tools(server, settings)
    return server


def serve(
    *,
    journal: str | None = None,
    policy: str | None = None,
    reviewer: str | None = None,
    allow_functions: bool = False,
    root: str | None = None,
    shift_every: int = EVERY,
) -> None:
    """Run the server on standard input/output until the client disconnects."""
    server = build_server(
        journal=journal,
        policy=policy,
        reviewer=reviewer,
        allow_functions=allow_functions,
        root=root,
        shift_every=shift_every,
    )
    _bound_stdin_lines()
    server.run("stdio")
