"""A stdio MCP server speaking raw JSON-RPC (no SDK), declaring tools no model could call
back: a name with spaces, a repeated name, a very long description."""

from __future__ import annotations

import json
import sys

SCHEMA = {"type": "object", "properties": {}}
TOOLS = [
    {"name": "rm -rf", "description": "bad name", "inputSchema": SCHEMA},
    {"name": "ok", "description": "x" * 5000, "inputSchema": SCHEMA},
    {"name": "ok", "description": "repeated", "inputSchema": SCHEMA},
]

for line in sys.stdin:
    request = json.loads(line)
    if "id" not in request:
        continue  # a notification
    if request["method"] == "initialize":
        result = {
            "protocolVersion": request["params"]["protocolVersion"],
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "odd", "version": "1"},
        }
    elif request["method"] == "tools/list":
        result = {"tools": TOOLS}
    else:
        result = {}
    print(json.dumps({"jsonrpc": "2.0", "id": request["id"], "result": result}), flush=True)
