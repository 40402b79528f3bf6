"""MCP over Streamable HTTP (``POST /mcp``): the run's tools, for an external agent.

Spec revisions 2025-03-26 to 2025-11-25, the part a tool server needs, stateless (no
``Mcp-Session-Id``): a POST carries one JSON-RPC message; a request is answered with
one ``application/json`` reply, a notification or a client's response with 202 and no
body. Methods: ``initialize`` (the client's version when it is one of
:data:`PROTOCOL_VERSIONS`, else the newest), ``ping``, ``tools/list`` (one page),
``tools/call``; anything else is "method not found". A batch (a JSON array; gone from
the spec since 2025-06-18) or anything that is not a JSON-RPC 2.0 message is refused
with a JSON-RPC error.

Pure functions, like the dialects: :func:`parse` turns a body into a typed message or
raises :class:`RpcError` (the one error here, carrying its JSON-RPC code); the others
check a request's params and build replies. The gateway runs the calls.

Why not the ``mcp`` package's server side (measured with mcp 2.3.0, the pinned one):
its Streamable HTTP transport (``mcp.server.streamable_http``, and the session manager
over it) is an ASGI application, ``handle_request(scope, receive, send)``, built on
starlette and sse_starlette. Serving it from jarvis's h11 server would need an ASGI
adapter and would bring starlette, sse_starlette, anyio and pydantic into every run
that has a gateway: importing ``mcp.server.streamable_http_manager`` took 1.2 to 3.3 s
and 63 MiB of RSS here, against 0.3 to 0.5 s and 24 MiB for all of ``jarvisd.gateway``
(this module included), on every agent start. Its stateful sessions, SSE streams and
resumability are more than a stateless tool server needs. So this module stays, and
the ``mcp`` package is kept for what it is good at here: the client side
(``jarvisd.mcp``), and the tests, which drive this server with the package's own
client.

Tool names: jarvis's ``SERVER.tool`` has a dot, which OpenAI-style function names
(``[a-zA-Z0-9_-]{1,64}``, what clients turn MCP tools into) refuse. :class:`ToolNames`
is the one mapping between the names jarvis gives and the ones offered here.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from .._messages import ToolResult, ToolSpec
from .._version import __version__
from ._common import BadRequest, loads

__all__ = [
    "PROTOCOL_VERSIONS",
    "Notification",
    "Reply",
    "Request",
    "RpcError",
    "ToolNames",
    "call_result",
    "check_version",
    "error",
    "initialize",
    "origin_allowed",
    "parse",
    "result",
    "tool_call",
    "tools_list",
]

#: Newest first: an ``initialize`` asking for another version gets the first.
PROTOCOL_VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26")

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
#: Implementation-defined (-32000..-32099): the run was cancelled or spent a budget,
#: so the call never ran. Not a tool failure: no retry of the model can help.
RUN_STOPPED = -32000

_NAME_OK = re.compile(r"[A-Za-z0-9_-]{1,64}")
_LOOPBACK = ("127.0.0.1", "localhost", "::1")
_SERVER_INFO = {"name": "jarvis", "version": __version__}

RequestId = str | int


class RpcError(BadRequest):
    """A message that gets a JSON-RPC error: ``code``, and the request's ``id`` when it
    was read. ``status`` is the HTTP status it goes out with: 400 for what is not a
    request at all, 200 for a request answered with an error."""

    def __init__(
        self, code: int, message: str, id: RequestId | None = None, status: int = 200
    ) -> None:
        super().__init__(message, status)
        self.code = code
        self.id = id


@dataclass(frozen=True, slots=True)
class Request:
    id: RequestId
    method: str
    params: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Notification:
    method: str


@dataclass(frozen=True, slots=True)
class Reply:
    """A client's response to a server request: this server sends none, so it is
    accepted and dropped."""

    id: RequestId | None


Message = Request | Notification | Reply


def _id(value: object) -> RequestId | None:
    """A request id MCP allows (a string or an integer, never null), else None."""
    if isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    return None


def parse(body: bytes) -> Message:
    """The message of one POST body."""
    try:
        raw = loads(body)
    except BadRequest as exc:  # not JSON, or nested too deeply
        raise RpcError(PARSE_ERROR, str(exc), status=400) from None
    if isinstance(raw, list):
        raise RpcError(INVALID_REQUEST, "JSON-RPC batches are not supported", status=400)
    if not isinstance(raw, dict):
        raise RpcError(INVALID_REQUEST, "a JSON-RPC message must be an object", status=400)
    rid = _id(raw.get("id"))
    if raw.get("jsonrpc") != "2.0":
        raise RpcError(INVALID_REQUEST, 'jsonrpc must be "2.0"', rid, status=400)
    method = raw.get("method")
    if method is None:
        if "result" in raw or "error" in raw:
            return Reply(rid)
        raise RpcError(
            INVALID_REQUEST, "a message needs a method, a result or an error", rid, status=400
        )
    if not isinstance(method, str):
        raise RpcError(INVALID_REQUEST, "method must be a string", rid, status=400)
    params = raw.get("params")
    if params is not None and not isinstance(params, dict):
        raise RpcError(INVALID_PARAMS, "params must be an object", rid, status=400)
    if "id" not in raw:
        return Notification(method)
    if rid is None:
        raise RpcError(INVALID_REQUEST, "id must be a string or an integer", status=400)
    return Request(rid, method, params or {})


def origin_allowed(origin: str | None) -> bool:
    """Whether a request's ``Origin`` may reach the server: none (not a browser) or a
    loopback page. The spec asks for the check against DNS rebinding; the run's token
    already stops that, this stops a browser page that somehow has it."""
    if origin is None:
        return True
    try:
        host = urlsplit(origin).hostname
    except ValueError:
        return False
    return host in _LOOPBACK


def check_version(message: Message, header: str | None) -> None:
    """Refuse a message whose ``MCP-Protocol-Version`` header names a version this
    server does not speak (400, as the spec asks). No header: the client predates it.
    ``initialize`` is the negotiation itself: its header, if any, is not checked."""
    if header is None or header in PROTOCOL_VERSIONS:
        return
    if isinstance(message, Request) and message.method == "initialize":
        return
    rid = message.id if isinstance(message, Request | Reply) else None
    raise RpcError(
        INVALID_REQUEST,
        f"unsupported MCP-Protocol-Version {header[:40]!r} "
        f"(supported: {', '.join(PROTOCOL_VERSIONS)})",
        rid,
        status=400,
    )


def initialize(request: Request) -> dict[str, Any]:
    version = request.params.get("protocolVersion")
    if not isinstance(version, str):
        raise RpcError(INVALID_PARAMS, "initialize: protocolVersion must be a string", request.id)
    return {
        "protocolVersion": version if version in PROTOCOL_VERSIONS else PROTOCOL_VERSIONS[0],
        "capabilities": {"tools": {"listChanged": False}},
        "serverInfo": _SERVER_INFO,
        "instructions": "The tools of this jarvis run. Each call counts against the run's budgets.",
    }


class ToolNames:
    """jarvis tool names and the MCP names offered for them, both ways: a name MCP
    clients accept as is keeps it; another has each other character made ``_``, is cut
    to 64 characters and, if that is taken, numbered."""

    def __init__(self, names: Iterable[str]) -> None:
        self.wire: dict[str, str] = {}
        self.jarvis: dict[str, str] = {}
        names = list(names)
        for name in names:  # names that need no change keep them, whatever the order
            if _NAME_OK.fullmatch(name):
                self._add(name, name)
        for name in names:
            if name not in self.wire:
                self._add(name, self._free(re.sub(r"[^A-Za-z0-9_-]", "_", name)[:64] or "tool"))

    def _free(self, base: str) -> str:
        candidate, n = base, 1
        while candidate in self.jarvis:
            n += 1
            suffix = f"_{n}"
            candidate = base[: 64 - len(suffix)] + suffix
        return candidate

    def _add(self, name: str, wire: str) -> None:
        self.wire[name] = wire
        self.jarvis[wire] = name


def tools_list(request: Request, specs: Sequence[ToolSpec], names: ToolNames) -> dict[str, Any]:
    if request.params.get("cursor") is not None:  # one page: no cursor was ever given
        raise RpcError(INVALID_PARAMS, "tools/list: unknown cursor", request.id)
    return {"tools": [_tool(spec, names.wire[spec.name]) for spec in specs]}


def _tool(spec: ToolSpec, wire: str) -> dict[str, Any]:
    schema = dict(spec.parameters)
    schema.setdefault("type", "object")  # MCP requires an object schema
    return {"name": wire, "description": spec.description, "inputSchema": schema}


@dataclass(frozen=True, slots=True)
class ToolCallRequest:
    name: str  # the jarvis name
    arguments: dict[str, Any]


def tool_call(request: Request, names: ToolNames) -> ToolCallRequest:
    params = request.params
    wire = params.get("name")
    if not isinstance(wire, str):
        raise RpcError(INVALID_PARAMS, "tools/call: name must be a string", request.id)
    name = names.jarvis.get(wire)
    if name is None:
        known = ", ".join(names.jarvis) or "none"
        raise RpcError(INVALID_PARAMS, f"unknown tool {wire[:100]!r} (tools: {known})", request.id)
    arguments = params.get("arguments")
    if arguments is not None and not isinstance(arguments, dict):
        raise RpcError(INVALID_PARAMS, "tools/call: arguments must be an object", request.id)
    return ToolCallRequest(name, arguments or {})


def call_result(tool_result: ToolResult) -> dict[str, Any]:
    """A finished call; a failed one (bad arguments, the tool's own error, a timeout)
    is a result with ``isError``, written for the model, as MCP asks."""
    return {
        "content": [{"type": "text", "text": tool_result.content}],
        "isError": not tool_result.success,
    }


def result(id: RequestId, value: Mapping[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id, "result": dict(value)}


def error(id: RequestId | None, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}}
