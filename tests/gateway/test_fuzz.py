"""Hostile input, generated: every dialect's request parsing, the MCP endpoint's
messages and the HTTP layer.

Whatever arrives, the answer is a ChatRequest or one clear BadRequest (a 4xx in the
dialect's shape over HTTP), or for MCP a typed message or one RpcError (a JSON-RPC
error): no other exception, no 5xx, no hang.
"""

from __future__ import annotations

import copy
import json
import socket
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jarvisd._messages import ToolSpec
from jarvisd.engines import ScriptedEngine, reply
from jarvisd.gateway import BadRequest, ChatRequest, Dialect, Gateway, _mcp
from jarvisd.gateway._anthropic import DIALECT as ANTHROPIC
from jarvisd.gateway._common import loads
from jarvisd.gateway._gemini import DIALECT as GEMINI
from jarvisd.gateway._openai_chat import DIALECT as OPENAI
from jarvisd.gateway._openai_responses import DIALECT as RESPONSES
from jarvisd.tools import CalculatorTool, ToolDispatcher

from .conftest import BackgroundGateway

DIALECTS = [OPENAI, RESPONSES, ANTHROPIC, GEMINI]
ENDPOINTS = {
    "openai": "/v1/chat/completions",
    "openai-responses": "/v1/responses",
    "anthropic": "/v1/messages",
    "gemini": "/v1beta/models/m:generateContent",
}

# Field names the dialects read, so generated objects reach deep into the parsers.
FIELDS = ["role", "content", "type", "text", "tool_calls", "function", "name", "arguments",
          "id", "call_id", "output", "tool_use_id", "input", "input_schema", "parameters",
          "functionCall", "functionResponse", "args", "response", "parts", "thought",
          "is_error", "description", "functionDeclarations", "parametersJsonSchema", "refusal"]  # fmt: skip
TOP = ["messages", "input", "contents", "tools", "system", "instructions",
       "systemInstruction", "generationConfig", "max_tokens", "max_output_tokens",
       "max_completion_tokens", "maxOutputTokens", "stream", "temperature", "top_p", "seed",
       "stop", "stop_sequences", "tool_choice", "toolConfig", "stream_options", "model"]  # fmt: skip
ROLES = ["user", "assistant", "system", "developer", "tool", "model", "function"]
TYPES = ["text", "message", "function", "function_call", "function_call_output",
         "tool_use", "tool_result", "input_text", "output_text", "image", "reasoning"]  # fmt: skip

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False)
    | st.text(max_size=20)
    | st.sampled_from(ROLES + TYPES)
)
json_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.sampled_from(FIELDS) | st.text(max_size=5), inner, max_size=5)
    ),
    max_leaves=25,
)
# Lists of objects with the fields messages, parts and tools have, at two levels.
parts = st.dictionaries(st.sampled_from(FIELDS), json_values, max_size=4)
items = st.dictionaries(
    st.sampled_from(FIELDS), json_values | st.lists(parts, max_size=3) | parts, max_size=6
)
bodies = (
    st.fixed_dictionaries({}, optional={k: st.lists(items, max_size=4) | json_values for k in TOP})
    | json_values
)


# A valid request per dialect, with a tool call and its result: mutating one spot of it
# reaches every branch of the parser, where random JSON is refused at the first field.
_CALC = {"type": "object", "properties": {"x": {"type": "string"}}}
VALID: dict[str, Any] = {
    "openai": {
        "model": "m", "max_tokens": 10, "stream": True, "temperature": 0.5, "stop": ["x"],
        "stream_options": {"include_usage": True},
        "tools": [{"type": "function", "function": {"name": "f", "description": "d",
                                                    "parameters": _CALC}}],
        "messages": [
            {"role": "system", "content": "s"},
            {"role": "user", "content": [{"type": "text", "text": "q"}]},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "r"},
        ],
    },
    "openai-responses": {
        "model": "m", "instructions": "s", "max_output_tokens": 10, "stream": True,
        "store": False, "tools": [{"type": "function", "name": "f", "parameters": _CALC}],
        "input": [
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "q"}]},
            {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "r"},
        ],
    },
    "anthropic": {
        "model": "m", "max_tokens": 10, "stream": True, "system": [{"type": "text", "text": "s"}],
        "tools": [{"name": "f", "description": "d", "input_schema": _CALC}],
        "tool_choice": {"type": "auto"}, "stop_sequences": ["x"],
        "messages": [
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": [
                {"type": "text", "text": "t"},
                {"type": "tool_use", "id": "c1", "name": "f", "input": {"x": "1"}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "c1", "content": [{"type": "text", "text": "r"}],
                 "is_error": False}]},
        ],
    },
    "gemini": {
        "systemInstruction": {"parts": [{"text": "s"}]},
        "generationConfig": {"maxOutputTokens": 10, "temperature": 0.1, "stopSequences": ["x"]},
        "tools": [{"functionDeclarations": [{"name": "f", "parameters": {
            "type": "OBJECT", "properties": {"x": {"type": "STRING"}}}}]}],
        "contents": [
            {"role": "user", "parts": [{"text": "q"}]},
            {"role": "model", "parts": [{"functionCall": {"name": "f", "args": {"x": "1"}}}]},
            {"role": "user", "parts": [{"functionResponse": {"name": "f", "response": {"o": "r"}}}]},
        ],
    },
}  # fmt: skip


@st.composite
def mutated(draw: st.DrawFn, base: Any) -> Any:
    """``base`` with the value at one random path replaced by random JSON."""
    if not isinstance(base, dict | list) or not base or draw(st.integers(0, 3)) == 0:
        return draw(json_values)
    copy = dict(base) if isinstance(base, dict) else list(base)
    key = draw(st.sampled_from(sorted(copy) if isinstance(copy, dict) else range(len(copy))))
    copy[key] = draw(mutated(copy[key]))  # type: ignore[index]
    return copy


def _check(dialect: Dialect, body: Any) -> None:
    try:
        request = dialect.parse(body, 1024)
    except BadRequest as exc:
        assert 400 <= exc.status < 500 and str(exc)
        json.dumps(dialect.error(exc.status, str(exc)))
        return
    assert isinstance(request, ChatRequest) and request.messages
    assert request.options.max_tokens >= 1


# Each generated body goes to every dialect: 150 bodies per dialect as before, but
# generated once, not once per dialect (drawing these large bodies is most of the cost).
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(body=bodies)
def test_request_parsing_never_crashes(body: Any) -> None:
    for dialect in DIALECTS:
        _check(dialect, copy.deepcopy(body))  # a parser that edits its input alters no other


@pytest.mark.parametrize("dialect", DIALECTS, ids=lambda d: d.name)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_a_valid_request_mutated_anywhere_never_crashes(dialect: Dialect, data: Any) -> None:
    _check(dialect, data.draw(mutated(VALID[dialect.name])))


def test_the_valid_samples_parse() -> None:
    for dialect in DIALECTS:
        request = dialect.parse(VALID[dialect.name], 1024)
        assert request.tools and any(m.tool_calls for m in request.messages)


@pytest.mark.parametrize("dialect", DIALECTS, ids=lambda d: d.name)
def test_deep_nesting_and_huge_numbers_are_clear_errors(dialect: Dialect) -> None:
    deep = b"[" * 100_000 + b"]" * 100_000
    with pytest.raises(BadRequest, match="nested"):
        loads(deep)
    with pytest.raises(BadRequest, match="nested"):
        loads(b'{"messages": ' + b"[" * 70 + b"]" * 70 + b"}")
    with pytest.raises(BadRequest, match="JSON"):
        loads(b'{"max_tokens": ' + b"9" * 5000 + b"}")
    for key in ("max_tokens", "max_output_tokens", "max_completion_tokens"):
        for value in (10**400, -1, 1.5, "12", True, float("1e308")):
            _check(dialect, {key: value, "messages": [{"role": "user", "content": "hi"}],
                             "input": "hi", "contents": "hi"})  # fmt: skip


@pytest.fixture(scope="module")
def http() -> Iterator[httpx.Client]:
    """One client for every generated request: ``httpx.post`` builds a client, and its TLS
    context, per call. No connection is kept alive, so each request still arrives on a
    new connection, as it did."""
    with httpx.Client(timeout=30, limits=httpx.Limits(max_keepalive_connections=0)) as client:
        yield client


@pytest.fixture(scope="module")
def gateway() -> Iterator[Gateway]:
    with BackgroundGateway(ScriptedEngine(fallback=reply("ok"))) as gw:
        yield gw


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow,
          HealthCheck.function_scoped_fixture])  # fmt: skip
@given(dialect=st.sampled_from(DIALECTS), data=st.data())
def test_over_http_every_bad_request_is_a_4xx_in_the_dialects_shape(
    gateway: Gateway, http: httpx.Client, dialect: Dialect, data: Any
) -> None:
    body = data.draw(mutated(VALID[dialect.name]) | bodies | st.binary(max_size=64).map(repr))
    raw = body.encode() if isinstance(body, str) else json.dumps(body).encode()
    assert gateway.url is not None
    response = http.post(
        gateway.url + ENDPOINTS[dialect.name], content=raw,
        headers={"x-api-key": gateway.token, "content-type": "application/json"},
    )  # fmt: skip
    assert response.status_code < 500, response.text
    if response.status_code >= 400:
        assert response.json().keys() == dialect.error(400, "x").keys()


def _raw(gateway: Gateway, data: bytes) -> bytes:
    assert gateway.url is not None
    port = int(gateway.url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)  # no more is coming: a waiting server would hang
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


request_lines = st.one_of(
    st.binary(max_size=200),
    st.builds(
        lambda m, t, v: m + b" " + t + b" " + v,
        st.sampled_from([b"GET", b"POST", b"PUT", b"\x00", b"G T", b""]) | st.binary(max_size=8),
        st.sampled_from([b"/v1/models", b"*", b"http://x/", b"/%00", b""]) | st.binary(max_size=30),
        st.sampled_from([b"HTTP/1.1", b"HTTP/1.0", b"HTTP/9.9", b"HTTP/1.1x"]),
    ),
)
lengths = st.sampled_from([b"-1", b"abc", b"1e3", b"99999999999999999999", b"5, 6", b" 3",
                           b"0x10", b""]) | st.binary(max_size=12)  # fmt: skip


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow,
          HealthCheck.function_scoped_fixture])  # fmt: skip
@given(line=request_lines, length=lengths, extra=st.binary(max_size=40))
def test_garbage_requests_get_a_4xx_or_a_closed_connection(
    gateway: Gateway, line: bytes, length: bytes, extra: bytes
) -> None:
    head = line + b"\r\nHost: x\r\nx-api-key: " + gateway.token.encode()
    reply_ = _raw(gateway, head + b"\r\nContent-Length: " + length + b"\r\n\r\n" + extra)
    if reply_:
        status = reply_.split(b"\r\n", 1)[0]
        assert status.startswith(b"HTTP/1.1 "), reply_[:200]
        assert status[9:10] in (b"2", b"4"), reply_[:200]


# -- MCP (POST /mcp): one JSON-RPC message per body --------------------------------------

MCP_FIELDS = ["jsonrpc", "id", "method", "params", "result", "error", "name", "arguments",
              "protocolVersion", "capabilities", "clientInfo", "cursor", "expression", "_meta"]  # fmt: skip
MCP_METHODS = ["initialize", "ping", "tools/list", "tools/call", "notifications/initialized",
               "notifications/cancelled", "server/discover", "2.0", "calculator"]  # fmt: skip
mcp_values = st.recursive(
    scalars | st.sampled_from(MCP_METHODS),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.sampled_from(MCP_FIELDS) | st.text(max_size=5), inner, max_size=5)
    ),
    max_leaves=25,
)
VALID_MCP: list[dict[str, Any]] = [
    {"jsonrpc": "2.0", "id": 1, "method": "initialize",
     "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "c"}}},
    {"jsonrpc": "2.0", "method": "notifications/initialized"},
    {"jsonrpc": "2.0", "id": "a", "method": "tools/list", "params": {}},
    {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
     "params": {"name": "calculator", "arguments": {"expression": "6*7"}}},
    {"jsonrpc": "2.0", "id": 3, "result": {}},
]  # fmt: skip
ids = st.integers(-5, 5) | st.text(max_size=5) | mcp_values
METHODS = ["initialize", "ping", "tools/list", "tools/call"]


def request_of(method: str, params: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.fixed_dictionaries(
        {"jsonrpc": st.just("2.0"), "id": ids, "method": st.just(method), "params": params}
    )


# Requests with a good envelope and params of the right shape, or not, so every check
# of the params is reached; then envelopes of any shape.
mcp_messages = (
    request_of("initialize", st.fixed_dictionaries(
        {"protocolVersion": st.sampled_from(["2025-06-18", "1999-01-01"]) | mcp_values},
        optional={"capabilities": mcp_values}))
    | request_of("tools/list", st.fixed_dictionaries({}, optional={"cursor": mcp_values}))
    | request_of("tools/call", st.fixed_dictionaries({
        "name": st.sampled_from(["calculator", "demo_add", "demo.add", ""]) | mcp_values,
        "arguments": st.fixed_dictionaries({}, optional={"expression": mcp_values})
        | mcp_values}))
    | st.sampled_from(METHODS).flatmap(lambda m: request_of(m, mcp_values))
    | st.fixed_dictionaries({}, optional={
        "jsonrpc": st.just("2.0") | mcp_values, "id": ids,
        "method": st.sampled_from(METHODS) | mcp_values, "params": mcp_values,
        "result": mcp_values, "error": mcp_values})
)  # fmt: skip
mcp_bodies = mcp_messages | st.sampled_from(VALID_MCP).flatmap(mutated) | mcp_values
_RPC_CODES = {_mcp.PARSE_ERROR, _mcp.INVALID_REQUEST, _mcp.METHOD_NOT_FOUND, _mcp.INVALID_PARAMS}


def _check_mcp(body: bytes, version: str | None) -> None:
    """Parsed once into a typed message and its params checked, or one RpcError."""
    names = _mcp.ToolNames(["calculator", "demo.add"])
    specs = [ToolSpec("calculator", "c"), ToolSpec("demo.add", "d")]
    try:
        message = _mcp.parse(body)
        _mcp.check_version(message, version)
        if isinstance(message, _mcp.Request):
            if message.method == "initialize":
                assert _mcp.initialize(message)["protocolVersion"] in _mcp.PROTOCOL_VERSIONS
            elif message.method == "tools/list":
                _mcp.tools_list(message, specs, names)
            elif message.method == "tools/call":
                call = _mcp.tool_call(message, names)
                assert call.name in names.wire and isinstance(call.arguments, dict)
    except _mcp.RpcError as exc:
        assert exc.code in _RPC_CODES and str(exc) and exc.status in (200, 400)
        assert exc.id is None or type(exc.id) in (str, int)
        json.dumps(_mcp.error(exc.id, exc.code, str(exc)))


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(body=mcp_messages, version=st.none() | st.sampled_from(["2025-06-18", "x", ""]))
def test_mcp_message_parsing_never_crashes(body: Any, version: str | None) -> None:
    _check_mcp(json.dumps(body).encode(), version)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(body=st.sampled_from(VALID_MCP).flatmap(mutated) | mcp_values)
def test_a_valid_mcp_message_mutated_anywhere_never_crashes(body: Any) -> None:
    _check_mcp(json.dumps(body).encode(), None)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw=st.binary(max_size=64))
def test_mcp_bytes_that_are_not_json_are_a_parse_error(raw: bytes) -> None:
    _check_mcp(raw, None)


@pytest.fixture(scope="module")
def tool_gateway() -> Iterator[Gateway]:
    tools = ToolDispatcher([CalculatorTool()])
    with BackgroundGateway(ScriptedEngine(fallback=reply("ok")), tools=tools) as gw:
        yield gw


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow,
          HealthCheck.function_scoped_fixture])  # fmt: skip
@given(body=mcp_bodies | st.binary(max_size=64).map(repr))
def test_over_http_every_mcp_message_gets_a_reply_a_202_or_a_jsonrpc_error(
    tool_gateway: Gateway, http: httpx.Client, body: Any
) -> None:
    raw = body.encode() if isinstance(body, str) else json.dumps(body).encode()
    assert tool_gateway.url is not None
    response = http.post(
        tool_gateway.url + "/mcp", content=raw,
        headers={"Authorization": f"Bearer {tool_gateway.token}"},
    )  # fmt: skip
    assert response.status_code in (200, 202, 400), response.text
    if response.status_code == 202:
        assert response.content == b""
        return
    reply_ = response.json()
    assert reply_["jsonrpc"] == "2.0" and ("result" in reply_) != ("error" in reply_)
    if "error" in reply_:
        assert reply_["error"]["code"] in _RPC_CODES, reply_
