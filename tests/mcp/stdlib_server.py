"""A real stdio MCP server in the standard library alone, for the sandbox: the sandbox
image has python3 but not the ``mcp`` package. It speaks MCP's JSON-RPC (one message
per line: ``initialize``, ``tools/list``, ``tools/call``, ``ping``), and the host
talks to it with the ``mcp`` package's ClientSession, which holds it to the protocol.

Tools: ``add`` (a + b), ``pause`` (sleeps, so a test can kill the server mid-call),
``where`` (what the server can see: its network interfaces, uid and hostname).
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from typing import Any

VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")

TOOLS = [
    {
        "name": "add",
        "description": "Add two integers and return their sum.",
        "inputSchema": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
    },
    {
        "name": "pause",
        "description": "Wait for the given number of seconds, then say so.",
        "inputSchema": {
            "type": "object",
            "properties": {"seconds": {"type": "number"}},
            "required": ["seconds"],
        },
    },
    {
        "name": "where",
        "description": "Say where this server runs: network interfaces, uid, hostname.",
        "inputSchema": {"type": "object", "properties": {}},
    },
]


def where() -> str:
    with open("/proc/net/dev") as dev:
        names = [line.split(":")[0].strip() for line in dev.read().splitlines()[2:]]
    return f"net {names} uid {os.getuid()} host {socket.gethostname()}"


def call(name: str, args: dict[str, Any]) -> str:
    if name == "add":
        return str(int(args["a"]) + int(args["b"]))
    if name == "pause":
        time.sleep(float(args["seconds"]))
        return f"waited {float(args['seconds']):g} s"
    if name == "where":
        return where()
    raise KeyError(name)


def answer(method: str, params: dict[str, Any]) -> dict[str, Any]:
    if method == "initialize":
        wanted = params.get("protocolVersion")
        return {
            "protocolVersion": wanted if wanted in VERSIONS else VERSIONS[-1],
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "stdlib-demo", "version": "1"},
        }
    if method == "tools/list":
        return {"tools": TOOLS}
    if method == "tools/call":
        try:
            text = call(params["name"], params.get("arguments") or {})
        except (KeyError, ValueError, TypeError) as exc:
            return {"content": [{"type": "text", "text": f"bad call: {exc}"}], "isError": True}
        return {"content": [{"type": "text", "text": text}], "isError": False}
    if method == "ping":
        return {}
    raise LookupError(method)


def main() -> None:
    for line in sys.stdin:
        try:
            message = json.loads(line)
        except ValueError:
            continue
        if "id" not in message or "method" not in message:
            continue  # a notification (initialized, cancelled) or a response: no answer
        reply: dict[str, Any] = {"jsonrpc": "2.0", "id": message["id"]}
        try:
            reply["result"] = answer(message["method"], message.get("params") or {})
        except LookupError:
            reply["error"] = {"code": -32601, "message": f"no method {message['method']}"}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
