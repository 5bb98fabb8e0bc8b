"""A scripted session with the official MCP Python SDK (PyPI `mcp`) against
memgate's two MCP surfaces: `memgate mcp` over stdio and `/mcp` on
`memgate serve` (streamable HTTP).

Usage: mcp_client_session.py MEMGATE_BINARY

Each surface runs in its own scratch MEMGATE_HOME with `mcp.user: alice`.
The session lists the tools, saves a memory, repeats the save (already
present), tries to smuggle a user id through the arguments (refused), tries
`forget` (refused: erasure is off by default), and recalls the memory. A
third session, over stdio with `mcp.forget_tool: true`, finds `forget` listed
and erases the saved memory with it. Exits non-zero with a message on any
deviation.
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
from mcp.shared.exceptions import MCPError

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
    try:
        refused = await client.call_tool("forget", {"target": "user", "confirm": True})
        refused_text = json.dumps(structured(refused)) if refused.is_error else ""
    except MCPError as error:
        refused_text = str(error)
    check("mcp.forget_tool" in refused_text, f"{surface}: forget is refused while erasure is off")
    recalled = structured(await client.call_tool("recall", {"query": "integer cents pytest"}))
    check("integer cents" in recalled.get("text", ""), f"{surface}: recall returns the saved convention")


async def erase(client: Client) -> None:
    tools = sorted(t.name for t in (await client.list_tools()).tools)
    check(tools == ["forget", "recall", "remember", "search"], f"opted in: forget is listed ({tools})")
    saved = structured(await client.call_tool("remember", {"text": CONVENTION, "kind": "decision"}))
    unconfirmed = await client.call_tool("forget", {"target": "user"})
    check(bool(unconfirmed.is_error), "opted in: a whole-user forget needs confirm")
    erased = structured(await client.call_tool("forget", {"target": "fact", "id": saved.get("citation")}))
    check(erased.get("erased", {}).get("facts") == 1, f"opted in: forget erases the fact ({erased})")
    found = structured(await client.call_tool("search", {"query": "pytest"}))
    check(found.get("count") == 0, "opted in: the erased fact is not found any more")


def scratch_home(extra: str = "") -> str:
    home = tempfile.mkdtemp(prefix="memgate-mcp-")
    with open(os.path.join(home, "config.yaml"), "w") as f:
        f.write("mcp:\n  user: alice\n" + extra)
    return home


async def stdio_session(binary: str, extra: str = "", run=None) -> None:
    home = scratch_home(extra)
    params = StdioServerParameters(
        command=binary,
        args=["mcp"],
        cwd=home,
        env={"MEMGATE_HOME": os.path.join(home, "state"), "PATH": os.environ.get("PATH", "")},
    )
    async with Client(params) as client:
        await (run(client) if run else exercise(client, "stdio"))


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
    await stdio_session(binary, "  forget_tool: true\n", erase)
    print("mcp session: all checks passed")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    asyncio.run(main(os.path.abspath(sys.argv[1])))
