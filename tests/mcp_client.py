"""The official Python MCP SDK's streamable-HTTP client against twinops' /mcp, as an MCP
host runs it: connect with a bearer token, list the tools, call one, close the session.
Prints the tool count and whether the call failed; the SDK's own warnings (such as a
refused session termination) go to stderr through logging.

Usage: python3 tests/mcp_client.py URL TOKEN   (pip install mcp==1.26.0)
"""
import asyncio
import logging
import sys

from mcp import ClientSession
from mcp.client.streamable_http import streamablehttp_client


async def main(url: str, token: str) -> None:
    headers = {"Authorization": f"Bearer {token}"}
    async with streamablehttp_client(url, headers=headers) as (read, write, _):
        async with ClientSession(read, write) as session:
            await session.initialize()
            tools = await session.list_tools()
            result = await session.call_tool("get_system_summary", {})
            print(f"tools {len(tools.tools)} error {result.isError}")


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    asyncio.run(main(sys.argv[1], sys.argv[2]))
