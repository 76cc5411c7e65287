"""The official `mcp` client SDK through tollgate: one session calls `search` until
tollgate refuses it, then `fetch` (another tool's bucket), then asks the server how many
calls reached it. Prints what the client saw, as JSON, for tests/integration/mcp.rs.

    python3 client.py URL SEARCH_CALLS
"""
import asyncio
import json
import sys

from mcp import ClientSession, MCPError
from mcp.client.streamable_http import streamable_http_client


async def call(session, tool, arguments):
    try:
        result = await session.call_tool(tool, arguments)
        return {"ok": not result.is_error}
    except MCPError as e:
        return {"ok": False, "code": e.code, "message": e.message, "data": e.data}


async def main(url, calls):
    got = {}
    async with streamable_http_client(url) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            got["search"] = [await call(session, "search", {"query": f"q{i}"}) for i in range(calls)]
            got["fetch"] = await call(session, "fetch", {"url": "https://example.com"})
            reached = await session.call_tool("reached_calls", {})
            got["reached"] = json.loads(reached.content[0].text)
    print(json.dumps(got))


asyncio.run(main(sys.argv[1], int(sys.argv[2])))
