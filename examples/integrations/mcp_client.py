"""Start ``dissensus mcp`` over stdio and call its tools with the MCP client library.

Run offline: ``python examples/integrations/mcp_client.py`` (extra ``mcp``). The journal
is written to a temporary directory.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


def result(reply: Any) -> Any:
    if reply.is_error:
        raise SystemExit(reply.content[0].text)
    data = reply.structured_content
    return data["result"] if set(data) == {"result"} else data


async def main() -> None:
    tmp = Path(tempfile.mkdtemp())
    (tmp / "policy.yaml").write_text(
        "reading: {similarity: tfidf, theta_s: 0.3}\n", encoding="utf-8"
    )
    env = {**os.environ, "DISSENSUS_REVIEWER": "kim@example.org"}
    args = [
        "-m",
        "dissensus",
        "mcp",
        "--journal",
        str(tmp / "j.sqlite"),
        "--policy",
        str(tmp / "policy.yaml"),
    ]
    server = StdioServerParameters(command=sys.executable, args=args, env=env)
    async with stdio_client(server) as (read, write), ClientSession(read, write) as mcp:
        await mcp.initialize()
        print("tools:", ", ".join(t.name for t in (await mcp.list_tools()).tools))
        print("bound:", result(await mcp.call_tool("bound", {"agents": 5, "rounds": 6})))
        outputs = [
            {
                "agent": "a",
                "decision": "1",
                "reasoning": "Option 1 is right.",
                "values": {"safety": 1},
            },
            {
                "agent": "b",
                "decision": "2",
                "reasoning": "Option 1 is right.",
                "values": {"speed": 1},
            },
        ]
        (record,) = result(
            await mcp.call_tool("decide", {"panels": [{"id": "c1", "outputs": outputs}]})
        )
        print("decide:", record["action"], record["review_id"])
        shown = result(await mcp.call_tool("review_show", {"review_id": record["review_id"]}))
        answer = {"review_id": record["review_id"], "decision": "2", "note": "speed wins here"}
        final = result(
            await mcp.call_tool(
                "review_resolve", {**answer, "content_sha256": shown["content_sha256"]}
            )
        )
        print(
            "resolved:", final["action"], final["decision"], "by", final["resolution"]["reviewer"]
        )
        bad = await mcp.call_tool("bound", {"agents": "five", "rounds": 6})
        print("bad argument:", bad.is_error, bad.content[0].text.split("'")[1])


if __name__ == "__main__":
    asyncio.run(main())
