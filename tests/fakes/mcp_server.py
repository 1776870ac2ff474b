"""A real MCP server (the `mcp` package's MCPServer over streamable HTTP),
run as its own process by the tests: `python -m tests.fakes.mcp_server`
prints its port and serves until killed.

Tools: `add` (integers, structured output), `shout` (text), `pause`
(sleeps), `picture` (an image block), `record` (a JSON object as text),
`records` (a JSON list of objects), `refuse` (raises: an error result), and
`whoami` (echoes the Authorization header it was called with).
"""

import asyncio
import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.utilities.types import Image

# A 1x1 PNG.
PIXEL = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360f8cfc0f01f0005050201a5b1"
    "cd2d0000000049454e44ae426082"
)


def build() -> MCPServer:
    server = MCPServer("firstgate-test")

    @server.tool()
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    @server.tool()
    def shout(words: str, times: int = 1) -> str:
        """Upper-case the words, repeated."""
        return " ".join([words.upper()] * times)

    @server.tool()
    async def pause(seconds: float) -> str:
        """Wait, then answer."""
        await asyncio.sleep(seconds)
        return "done"

    @server.tool()
    def picture() -> Image:
        """A one-pixel PNG."""
        return Image(data=PIXEL, format="png")

    @server.tool(structured_output=False)
    def record(name: str) -> str:
        """A JSON object, as text."""
        return json.dumps({"name": name, "length": len(name)})

    @server.tool(structured_output=False)
    def records() -> str:
        """A JSON list of objects, as text."""
        return '[{"n": 1}, {"n": 2}]'

    @server.tool()
    def refuse(reason: str) -> str:
        """Always fails."""
        raise ValueError(f"refused: {reason}")

    @server.tool(structured_output=False)
    def whoami(ctx: Context) -> str:
        """The Authorization header of the call."""
        request = ctx.request_context.request
        return request.headers.get("authorization", "(none)") if request else "(no request)"

    return server


def main() -> None:
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    print(sock.getsockname()[1], flush=True)
    app = build().streamable_http_app()
    uvicorn.Server(uvicorn.Config(app, log_level="error")).run(sockets=[sock])


@contextlib.contextmanager
def running() -> Iterator[str]:
    """Start the server in a child process; yields its endpoint URL."""
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.fakes.mcp_server"],
        cwd=root,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        text=True,
    )
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        _wait_for(port)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _wait_for(port: int, within_s: float = 30.0) -> None:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
            return
        time.sleep(0.05)
    raise RuntimeError(f"the MCP server on port {port} did not start")


if __name__ == "__main__":
    main()
