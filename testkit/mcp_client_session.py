"""A scripted session with the official MCP Python SDK (PyPI `mcp`) against
memgate's two MCP surfaces: `memgate mcp` over stdio and `/mcp` on
`memgate serve` (streamable HTTP).

Usage: mcp_client_session.py MEMGATE_BINARY

Each surface runs in its own scratch MEMGATE_HOME with `mcp.user: alice`.
The session lists the tools, saves a memory, repeats the save (already
present), tries to smuggle a user id through the arguments (refused), and
recalls the memory. Exits non-zero with a message on any deviation.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile

from mcp import Client, StdioServerParameters

CONVENTION = "money amounts are integer cents; use pytest for backend tests"


def structured(result) -> dict:
    data = getattr(result, "structured_content", None) or getattr(result, "structuredContent", None)
    if data is None:
        data = json.loads(result.content[0].text)
    return data


def check(condition: bool, what: str) -> None:
    if not condition:
        raise SystemExit(f"mcp session: FAILED: {what}")
    print(f"mcp session: ok: {what}")


async def exercise(client: Client, surface: str) -> None:
    tools = sorted(t.name for t in (await client.list_tools()).tools)
    check(tools == ["recall", "remember", "search"], f"{surface}: lists recall, remember, search ({tools})")
    saved = structured(await client.call_tool("remember", {"text": CONVENTION, "kind": "decision"}))
    check(saved.get("outcome") == "stored", f"{surface}: remember stores with a citation ({saved.get('citation')})")
    again = structured(await client.call_tool("remember", {"text": CONVENTION, "kind": "decision"}))
    check(
        again.get("outcome") == "already_present" and again.get("citation") == saved.get("citation"),
        f"{surface}: an identical save is a no-op with the same citation",
    )
    smuggled = await client.call_tool("remember", {"text": "x", "user_id": "mallory"})
    check(bool(smuggled.is_error), f"{surface}: identity in tool arguments is refused")
    recalled = structured(await client.call_tool("recall", {"query": "integer cents pytest"}))
    check("integer cents" in recalled.get("text", ""), f"{surface}: recall returns the saved convention")


def scratch_home() -> str:
    home = tempfile.mkdtemp(prefix="memgate-mcp-")
    with open(os.path.join(home, "config.yaml"), "w") as f:
        f.write("mcp:\n  user: alice\n")
    return home


async def stdio_session(binary: str) -> None:
    home = scratch_home()
    params = StdioServerParameters(
        command=binary,
        args=["mcp"],
        cwd=home,
        env={"MEMGATE_HOME": os.path.join(home, "state"), "PATH": os.environ.get("PATH", "")},
    )
    async with Client(params) as client:
        await exercise(client, "stdio")


async def http_session(binary: str) -> None:
    home = scratch_home()
    env = dict(os.environ, MEMGATE_HOME=os.path.join(home, "state"))
    env.pop("MEMGATE_CONFIG", None)
    server = subprocess.Popen(
        [binary, "serve", "--addr", "127.0.0.1:0"],
        cwd=home,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        url = None
        for line in server.stderr:
            found = re.search(r"on (http://\S+)", line)
            if found:
                url = found.group(1)
                break
        check(url is not None, "serve announces its address")
        async with Client(f"{url}/mcp") as client:
            await exercise(client, "streamable HTTP")
    finally:
        server.terminate()
        server.wait(timeout=30)


async def main(binary: str) -> None:
    await stdio_session(binary)
    await http_session(binary)
    print("mcp session: all checks passed")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    asyncio.run(main(os.path.abspath(sys.argv[1])))
