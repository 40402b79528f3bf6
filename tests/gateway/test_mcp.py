"""The run's tools over MCP (``POST /mcp``), checked with the official ``mcp`` package's
streamable-HTTP client against a real gateway: listing, calling, tool errors, the token,
and the run's ledger (tool-call cap, cancel, events) holding every call."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, ClassVar

import httpx
import pytest

from jarvisd._events import EventType
from jarvisd._messages import ToolSpec
from jarvisd._runcontext import BudgetExceeded, Cancelled, RunContext
from jarvisd.engines import ScriptedEngine, reply
from jarvisd.gateway import Gateway
from jarvisd.gateway import _mcp as wire
from jarvisd.tools import BaseTool, CalculatorTool, ToolDispatcher

from .conftest import serve


class AddTool(BaseTool):
    """A tool named like an MCP server's (``SERVER.tool``): a dot MCP clients refuse."""

    @property
    def spec(self) -> ToolSpec:
        return ToolSpec("demo.add", "Add two integers.", {
            "type": "object", "required": ["a", "b"],
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        })  # fmt: skip

    def execute(self, **params: Any) -> str:
        return str(params["a"] + params["b"])


class SlowTool(BaseTool):
    """Waits until it is cancelled: a call still in flight."""

    started: ClassVar[asyncio.Event]

    @property
    def spec(self) -> ToolSpec:
        return ToolSpec("slow", "Wait.")

    async def execute(self, **params: Any) -> str:
        SlowTool.started.set()
        await asyncio.Event().wait()
        return "unreachable"


def tools() -> ToolDispatcher:
    return ToolDispatcher([CalculatorTool(), AddTool(), SlowTool()])


def events_of(run: RunContext) -> list[tuple[EventType, dict[str, Any]]]:
    seen: list[tuple[EventType, dict[str, Any]]] = []
    run.bus.subscribe(lambda e: seen.append((e.type, dict(e.data))))
    return seen


@asynccontextmanager
async def session(gw: Gateway, token: str | None = None) -> AsyncIterator[Any]:
    """An initialized ``mcp`` ClientSession on the gateway's ``/mcp``."""
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    assert gw.url is not None
    headers = {"Authorization": f"Bearer {gw.token if token is None else token}"}
    async with (
        create_mcp_http_client(headers=headers) as http,
        streamable_http_client(gw.url + "/mcp", http_client=http) as (read, write),
        ClientSession(read, write) as client,
    ):
        await client.initialize()
        yield client


def with_tools(body: Callable[[Gateway], Awaitable[Any]], run: RunContext | None = None) -> Any:
    return serve(ScriptedEngine(fallback=reply("ok")), body, run, tools=tools())


def text_of(result: Any) -> str:
    return "".join(part.text for part in result.content)


def test_the_official_client_lists_and_calls_the_runs_tools() -> None:
    run = RunContext()
    events = events_of(run)

    async def body(gw: Gateway) -> None:
        async with session(gw) as client:
            listed = await client.list_tools()
            assert [t.name for t in listed.tools] == ["calculator", "demo_add", "slow"]
            assert listed.tools[1].input_schema["required"] == ["a", "b"]
            product = await client.call_tool("calculator", {"expression": "6*7"})
            assert text_of(product) == "42" and not product.is_error
            total = await client.call_tool("demo_add", {"a": 2, "b": 40})
            assert text_of(total) == "42"

    with_tools(body, run)
    assert run.budget.tool_calls == 2
    starts = [d for t, d in events if t is EventType.TOOL_CALL_START]
    ends = [d for t, d in events if t is EventType.TOOL_CALL_END]
    # The run's bus names jarvis's own tool, whatever name the client used.
    assert [(d["tool"], d["arguments"]) for d in starts] == [
        ("calculator", {"expression": "6*7"}), ("demo.add", {"a": 2, "b": 40})
    ]  # fmt: skip
    assert [(d["tool"], d["success"], d["content"]) for d in ends] == [
        ("calculator", True, "42"), ("demo.add", True, "42")
    ]  # fmt: skip


def test_a_tool_error_is_a_result_for_the_model_and_an_unknown_tool_a_jsonrpc_error() -> None:
    from mcp import MCPError

    async def body(gw: Gateway) -> None:
        async with session(gw) as client:
            failed = await client.call_tool("calculator", {"expression": "1/0"})
            assert failed.is_error and "calculator failed" in text_of(failed)
            # Arguments go through the executor's schema check, as a built-in agent's do.
            refused = await client.call_tool("demo_add", {"a": "two"})
            assert refused.is_error and "invalid arguments for demo.add" in text_of(refused)
            with pytest.raises(MCPError) as info:
                await client.call_tool("demo.add", {"a": 1, "b": 2})  # jarvis's name, not MCP's
            assert info.value.error.code == wire.INVALID_PARAMS
            assert "unknown tool 'demo.add'" in info.value.error.message

    with_tools(body)


def test_without_the_token_the_endpoint_answers_401() -> None:
    from mcp import MCPError

    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}

    async def body(gw: Gateway) -> None:
        assert gw.url is not None
        async with httpx.AsyncClient() as http:
            for headers in ({}, {"Authorization": "Bearer wrong"}):
                answer = await http.post(gw.url + "/mcp", json=ping, headers=headers)
                assert answer.status_code == 401
                assert answer.json()["error"]["code"] == wire.INVALID_REQUEST
            good = await http.post(gw.url + "/mcp", json=ping,
                                   headers={"Authorization": f"Bearer {gw.token}"})  # fmt: skip
            assert good.json() == {"jsonrpc": "2.0", "id": 1, "result": {}}
        # The client says why: the 401's body is a JSON-RPC error (in its task groups).
        refused = pytest.RaisesExc(MCPError, match="missing or wrong API key")
        with pytest.RaisesGroup(pytest.RaisesGroup(refused)):
            async with session(gw, token="wrong"):
                pass

    with_tools(body)


def test_the_tool_call_cap_stops_the_run() -> None:
    from mcp import MCPError

    run = RunContext()
    run.budget.max_tool_calls = 1
    events = events_of(run)

    async def body(gw: Gateway) -> None:
        async with session(gw) as client:
            first = await client.call_tool("calculator", {"expression": "1+1"})
            assert text_of(first) == "2"
            with pytest.raises(MCPError) as info:
                await client.call_tool("calculator", {"expression": "2+2"})
            assert info.value.error.code == wire.RUN_STOPPED
            assert "tool-call budget of 1 calls spent" in info.value.error.message
        # The whole run stops, not only its tools: the next inference is refused too.
        assert gw.url is not None
        async with httpx.AsyncClient() as http:
            answer = await http.post(
                gw.url + "/v1/chat/completions", headers={"Authorization": f"Bearer {gw.token}"},
                json={"messages": [{"role": "user", "content": "hi"}]},
            )  # fmt: skip
        assert answer.status_code == 402

    with_tools(body, run)
    assert run.cancel.cancelled and isinstance(run.cancel.error(), BudgetExceeded)
    assert run.budget.tool_calls == 1
    assert [d["tool"] for t, d in events if t is EventType.TOOL_CALL_START] == ["calculator"]


def test_cancelling_the_run_ends_a_call_in_flight_and_refuses_the_next() -> None:
    from mcp import MCPError

    run = RunContext()
    SlowTool.started = asyncio.Event()

    async def body(gw: Gateway) -> None:
        async with session(gw) as client:
            call = asyncio.ensure_future(client.call_tool("slow", {}))
            await asyncio.wait_for(SlowTool.started.wait(), 30)
            run.cancel.cancel("stopped by the test")
            stopped = await asyncio.wait_for(call, 30)
            assert stopped.is_error and text_of(stopped).startswith("Cancelled")
            with pytest.raises(MCPError) as info:
                await client.call_tool("calculator", {"expression": "1"})
            assert info.value.error.code == wire.RUN_STOPPED

    with_tools(body, run)
    assert isinstance(run.cancel.error(), Cancelled)


# -- the wire, byte by byte: what the client above never sends -----------------------------


async def post(
    gw: Gateway, body: object, headers: dict[str, str] | None = None, *, method: str = "POST"
) -> httpx.Response:
    assert gw.url is not None
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    async with httpx.AsyncClient() as http:
        return await http.request(
            method, gw.url + "/mcp", content=raw,
            headers={"Authorization": f"Bearer {gw.token}", **(headers or {})},
        )  # fmt: skip


def rpc(method: str, id: object = 1, **params: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id, "method": method, "params": params}


def test_the_wire_answers_every_message_with_a_reply_a_202_or_a_jsonrpc_error() -> None:
    async def body(gw: Gateway) -> None:
        hello = await post(gw, rpc("initialize", protocolVersion="1999-01-01", capabilities={}))
        assert hello.json()["result"]["protocolVersion"] == wire.PROTOCOL_VERSIONS[0]
        older = await post(gw, rpc("initialize", protocolVersion="2025-06-18"))
        assert older.json()["result"]["protocolVersion"] == "2025-06-18"
        assert older.json()["result"]["capabilities"] == {"tools": {"listChanged": False}}
        note = await post(gw, {"jsonrpc": "2.0", "method": "notifications/initialized"})
        assert note.status_code == 202 and note.content == b""
        answer = await post(gw, {"jsonrpc": "2.0", "id": 7, "result": {}})
        assert answer.status_code == 202

        cases: list[tuple[object, int, int, object]] = [
            (b"{not json", 400, wire.PARSE_ERROR, None),
            (b"[" * 100 + b"]" * 100, 400, wire.PARSE_ERROR, None),  # too deep
            ([rpc("ping")], 400, wire.INVALID_REQUEST, None),  # a batch
            ({"id": 3, "method": "ping"}, 400, wire.INVALID_REQUEST, 3),
            ({"jsonrpc": "2.0", "id": None, "method": "ping"}, 400, wire.INVALID_REQUEST, None),
            ({"jsonrpc": "2.0", "id": 1.5, "method": "ping"}, 400, wire.INVALID_REQUEST, None),
            ({"jsonrpc": "2.0", "id": 4, "method": "ping", "params": []}, 400,
             wire.INVALID_PARAMS, 4),
            (rpc("resources/list", 5), 200, wire.METHOD_NOT_FOUND, 5),
            (rpc("initialize", 6), 200, wire.INVALID_PARAMS, 6),
            (rpc("tools/list", 8, cursor="x"), 200, wire.INVALID_PARAMS, 8),
            (rpc("tools/call", 9, name="calculator", arguments="6*7"), 200, wire.INVALID_PARAMS, 9),
            (rpc("tools/call", 10, name=["calculator"]), 200, wire.INVALID_PARAMS, 10),
        ]  # fmt: skip
        batch = await post(gw, [rpc("ping")])
        assert "batches are not supported" in batch.json()["error"]["message"]
        for message, status, code, rid in cases:
            got = await post(gw, message)
            assert (got.status_code, got.json()["error"]["code"], got.json()["id"]) == (
                status, code, rid
            ), message  # fmt: skip

    with_tools(body)


def test_the_protocol_version_header_and_the_origin_are_checked() -> None:
    async def body(gw: Gateway) -> None:
        bad = await post(gw, rpc("ping"), {"MCP-Protocol-Version": "2026-07-28"})
        assert bad.status_code == 400 and "unsupported MCP-Protocol-Version" in bad.text
        good = await post(gw, rpc("ping"), {"MCP-Protocol-Version": "2025-06-18"})
        assert good.json()["result"] == {}
        # A browser page, even one holding the token, is not served (DNS rebinding).
        page = await post(gw, rpc("ping"), {"Origin": "http://evil.example"})
        assert page.status_code == 403 and page.json()["error"]["code"] == wire.INVALID_REQUEST
        local = await post(gw, rpc("ping"), {"Origin": "http://127.0.0.1:3000"})
        assert local.status_code == 200

    with_tools(body)


def test_get_is_405_and_a_gateway_without_tools_has_no_endpoint() -> None:
    async def body(gw: Gateway) -> None:
        stream = await post(gw, b"", method="GET")
        assert stream.status_code == 405 and stream.headers["allow"] == "POST"
        assert stream.json()["error"]["code"] == wire.INVALID_REQUEST

    with_tools(body)

    async def bare(gw: Gateway) -> None:
        missing = await post(gw, rpc("tools/list"))
        assert missing.status_code == 404 and "serves no tools" in missing.text

    serve(ScriptedEngine([]), bare)


def test_an_oversized_body_is_refused_in_jsonrpc_shape(monkeypatch: pytest.MonkeyPatch) -> None:
    from jarvisd.http import _server as _http

    monkeypatch.setattr(_http, "MAX_BODY", 1000)

    async def body(gw: Gateway) -> None:
        big = await post(gw, rpc("tools/call", name="calculator",
                                 arguments={"expression": "1+" * 1000 + "1"}))  # fmt: skip
        assert big.status_code == 413 and big.json()["error"]["code"] == wire.INVALID_REQUEST

    with_tools(body)


def test_tool_names_mcp_clients_refuse_are_mapped_one_to_one() -> None:
    names = wire.ToolNames(["demo.add", "demo_add", "a" * 40 + "." + "b" * 40, "x.y", "x-y"])
    assert names.wire["demo_add"] == "demo_add"  # a valid name keeps it, whatever the order
    assert names.wire["demo.add"] == "demo_add_2"
    assert names.wire["x.y"] == "x_y" and names.wire["x-y"] == "x-y"
    long = names.wire["a" * 40 + "." + "b" * 40]
    assert len(long) == 64 and long.startswith("a" * 40 + "_")
    assert {names.jarvis[w]: w for w in names.jarvis} == names.wire  # both ways, one to one
