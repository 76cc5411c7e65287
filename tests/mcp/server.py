"""A real MCP server (the official `mcp` SDK, streamable HTTP) for the MCP tests
(tests/integration/mcp.rs): two tools, and a third that says how many calls of the
others reached it.

    python3 server.py PORT
"""
import json
import sys

from mcp.server.mcpserver import MCPServer

port = int(sys.argv[1])
app = MCPServer("tollgate-test-tools")
reached = {"search": 0, "fetch": 0}


@app.tool()
def search(query: str) -> str:
    """Searches for `query`."""
    reached["search"] += 1
    return f"results for {query}"


@app.tool()
def fetch(url: str) -> str:
    """Fetches `url`."""
    reached["fetch"] += 1
    return f"contents of {url}"


@app.tool()
def reached_calls() -> str:
    """How many calls of each tool reached this server, as JSON."""
    return json.dumps(reached)


app.run("streamable-http", host="127.0.0.1", port=port)
