"""The gateway as a pass-through to a cloud vendor with a key the host holds
(``[credentials.NAME]``, ``--engine NAME``): real HTTP on loopback on both sides.

The sandbox's side offers only the run's token; the vendor gets the key and only the
headers its API needs; the vendor's usage lands on the run's ledger; a budget lowers a
call's output cap, refuses the next call and cuts a stream; a vendor that lies about
its usage, echoes the key, redirects or floods is held to the same bounds.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
import pytest

from jarvisd._config import CredentialConfig, parse_config
from jarvisd._errors import ConfigError, UsageError
from jarvisd._events import EventType
from jarvisd._messages import Usage
from jarvisd._runcontext import Budget, BudgetExceeded, RunContext
from jarvisd.engines import CredentialEngine, ScriptedEngine, build_engine, reply
from jarvisd.gateway import Gateway
from jarvisd.gateway import _upstream as upstream_module
from jarvisd.gateway._upstream import Upstream
from jarvisd.http._server import HTTPServer, Request, Response
from jarvisd.runs import AgentSpec, run_spec
from jarvisd.testing import VendorStandIn

KEY = "sk-ant-test-0123456789abcdef0123456789abcdef"
USAGE = Usage(30, 7)
MESSAGES = [{"role": "user", "content": "hi"}]


def _credential(url: str, dialect: str = "anthropic") -> CredentialEngine:
    return CredentialEngine("vendor", CredentialConfig(env="TEST_VENDOR_KEY", upstream=url,
                                                       dialect=dialect), "vendor-model")  # fmt: skip


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_VENDOR_KEY", KEY)


async def _through(
    url: str, run: RunContext, work: Callable[[httpx.AsyncClient, Gateway], Awaitable[Any]],
    dialect: str = "anthropic",
) -> Any:  # fmt: skip
    async with (
        Gateway(_credential(url, dialect), run) as gateway,
        httpx.AsyncClient(base_url=gateway.url or "", timeout=30) as client,
    ):
        return await work(client, gateway)


def _events(run: RunContext) -> list[tuple[EventType, dict[str, Any]]]:
    events: list[tuple[EventType, dict[str, Any]]] = []
    run.bus.subscribe(lambda e: events.append((e.type, dict(e.data))))
    return events


@pytest.mark.parametrize(
    ("dialect", "path", "body", "key_header"),
    [
        ("anthropic", "/v1/messages",
         {"model": "m", "max_tokens": 5000, "messages": MESSAGES}, "x-api-key"),
        ("openai", "/v1/responses",
         {"model": "m", "max_output_tokens": 5000, "input": "hi"}, "authorization"),
        ("openai", "/v1/chat/completions",
         {"model": "m", "max_tokens": 5000, "messages": MESSAGES}, "authorization"),
        ("gemini", "/v1beta/models/m:generateContent",
         {"contents": [{"role": "user", "parts": [{"text": "hi"}]}],
          "generationConfig": {"maxOutputTokens": 5000}}, "x-goog-api-key"),
    ],
)  # fmt: skip
def test_a_request_goes_to_the_vendor_with_the_key_and_its_usage_is_counted(
    dialect: str, path: str, body: dict[str, Any], key_header: str
) -> None:
    vendor_engine = ScriptedEngine(fallback=lambda m, t: reply("hello there", usage=USAGE))
    run = RunContext()
    events = _events(run)

    async def main() -> tuple[list[httpx.Response], list[Any]]:
        async with VendorStandIn(vendor_engine, KEY) as vendor:

            async def work(client: httpx.AsyncClient, gateway: Gateway) -> list[httpx.Response]:
                # The sandbox's side: the run's token, and headers that must not leave.
                headers = {
                    key_header: gateway.token if key_header != "authorization"
                    else f"Bearer {gateway.token}",
                    "cookie": "session=sandbox", "x-sandbox": "1", "anthropic-version": "2023-06-01",
                }  # fmt: skip
                plain = await client.post(path, params={"beta": "true", "key": gateway.token},
                                          headers=headers, json=body)  # fmt: skip
                if dialect == "gemini":
                    stream_path = path.replace(":generateContent", ":streamGenerateContent")
                    streamed = await client.post(stream_path, params={"alt": "sse"},
                                                 headers=headers, json=body)  # fmt: skip
                else:
                    streamed = await client.post(
                        path, headers=headers, json={**body, "stream": True}
                    )
                return [plain, streamed]

            replies = await _through(vendor.url, run, work, dialect)
            return replies, vendor.requests

    replies, requests = asyncio.run(main())
    plain, streamed = replies
    assert plain.status_code == 200 and "hello there" in plain.text
    assert streamed.status_code == 200 and "text/event-stream" in streamed.headers["content-type"]
    assert "there" in streamed.text
    assert [r.key for r in requests] == [KEY, KEY]
    assert requests[0].query == {"beta": "true"}  # the run's token in ?key= stays
    for request in requests:
        assert "cookie" not in request.headers and "x-sandbox" not in request.headers
        assert request.path.split(":")[0] == path.split(":")[0]
    assert ("anthropic-version" in requests[0].headers) is (dialect == "anthropic")
    # Both replies' usage, streamed or not, on the ledger and in the run's events.
    assert run.budget.used == USAGE + USAGE
    ends = [d for t, d in events if t is EventType.INFERENCE_END]
    assert [(d["engine"], d["prompt_tokens"], d["completion_tokens"]) for d in ends] == [
        ("upstream:vendor", 30, 7),
        ("upstream:vendor", 30, 7),
    ]
    # The cap the request asked for reached the vendor as it was (no budget to hold it).
    assert [c.options.max_tokens for c in vendor_engine.calls] == [5000, 5000]


def test_a_budget_lowers_the_cap_refuses_the_next_call_and_stops_the_run() -> None:
    vendor_engine = ScriptedEngine(fallback=lambda m, t: reply("hello", usage=Usage(60, 10)))
    run = RunContext(budget=Budget(max_tokens=100))

    async def main() -> tuple[list[int], int]:
        async with VendorStandIn(vendor_engine, KEY) as vendor:

            async def work(client: httpx.AsyncClient, gateway: Gateway) -> list[int]:
                body = {"model": "m", "max_tokens": 5000, "messages": MESSAGES}
                headers = {"x-api-key": gateway.token}
                statuses = []
                for _ in range(3):
                    r = await client.post("/v1/messages", headers=headers, json=body)
                    statuses.append(r.status_code)
                return statuses

            statuses = await _through(vendor.url, run, work)
            return statuses, len(vendor.requests)

    statuses, sent = asyncio.run(main())
    # 70 used, then 30 left: the second call may ask for at most 30; the third finds
    # the budget spent (140 of 100) and never leaves the host.
    assert statuses == [200, 200, 402]
    assert sent == 2
    assert [c.options.max_tokens for c in vendor_engine.calls] == [100, 30]
    assert run.budget.used == Usage(120, 20)
    assert run.cancel.cancelled and isinstance(run.cancel.error(), BudgetExceeded)


class _Liar:
    """A vendor that lies, echoes, redirects and floods: ``handle`` answers by path."""

    def __init__(self, elsewhere: str = "") -> None:
        self.elsewhere = elsewhere
        self.seen: list[Request] = []

    def admit(self, request: Request) -> Response | None:
        return None

    def refuse(self, request: Request | None, status: int, message: str) -> Response:
        return Response(status, message.encode())

    async def handle(self, request: Request) -> Response:
        self.seen.append(request)
        if request.headers.get("x-api-key") != KEY:
            return Response(401, b'{"error": "no key"}')
        body = json.loads(request.body)
        mode = body["messages"][0]["content"]
        if mode == "echo":  # a vendor error that names the key it was sent
            return Response(401, json.dumps({"error": f"invalid x-api-key {KEY}"}).encode())
        if mode == "big":
            return Response(200, b'{"pad": "' + b"x" * 100_000 + b'"}')
        if mode == "redirect":
            return Response(307, b"", headers=[("location", self.elsewhere + "/v1/messages")])
        return Response(200, content_type="text/event-stream", stream=self._stream(mode))

    async def _stream(self, mode: str) -> AsyncIterator[bytes]:
        def event(kind: str, data: dict[str, Any]) -> bytes:
            return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n".encode()

        start: dict[str, Any] = {"message": {"id": "m"}}
        if mode != "silent":
            start["message"]["usage"] = {"input_tokens": 40, "output_tokens": 1}
        yield event("message_start", start)
        yield event("content_block_delta", {"delta": {"type": "text_delta", "text": "BEFORE"}})
        if mode == "flood":
            yield b"data: " + b"x" * (upstream_module.MAX_LINE + 10) + b"\n\n"
        if mode == "hang":
            await asyncio.Event().wait()
        if mode == "silent":  # a reply, and never a word of its usage
            yield event("content_block_delta", {"delta": {"type": "text_delta", "text": "x" * 400}})
            yield event("message_stop", {})
            return
        # Usage past the budget, then more output: the gateway must not relay it.
        yield event("message_delta", {"usage": {"output_tokens": 5000}})
        yield event("content_block_delta", {"delta": {"type": "text_delta", "text": "AFTER"}})
        yield event("message_stop", {})


async def _serve(app: Any) -> tuple[asyncio.AbstractServer, str]:
    http = HTTPServer(app)
    server = await asyncio.start_server(http.connection, "127.0.0.1", 0)
    return server, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"


def _against_liar(mode: str, run: RunContext, **extra: Any) -> tuple[httpx.Response, _Liar, _Liar]:
    async def main() -> tuple[httpx.Response, _Liar, _Liar]:
        other = _Liar()
        other_server, other_url = await _serve(other)
        liar = _Liar(other_url)
        server, url = await _serve(liar)
        try:

            async def work(client: httpx.AsyncClient, gateway: Gateway) -> httpx.Response:
                body = {"model": "m", "max_tokens": 9000, "stream": True,
                        "messages": [{"role": "user", "content": mode}]}  # fmt: skip
                headers = {"x-api-key": gateway.token}
                if mode != "hang":
                    return await client.post("/v1/messages", headers=headers, json=body)
                # Cancelled once the agent has read the first delta.
                async with client.stream("POST", "/v1/messages", headers=headers, json=body) as r:
                    text = b""
                    async for chunk in r.aiter_raw():
                        text += chunk
                        if b"BEFORE" in text:
                            run.cancel.cancel("stopped by the user")
                return httpx.Response(r.status_code, content=text)

            return await _through(url, run, work), liar, other
        finally:
            server.close()
            other_server.close()

    return asyncio.run(main())


def test_a_stream_past_the_budget_is_cut_and_the_run_stopped() -> None:
    run = RunContext(budget=Budget(max_tokens=1000))
    reply_, liar, _ = _against_liar("lie", run)
    assert "BEFORE" in reply_.text and "AFTER" not in reply_.text
    assert "event: error" in reply_.text and "token budget of 1000 spent" in reply_.text
    assert run.cancel.cancelled and isinstance(run.cancel.error(), BudgetExceeded)
    assert run.budget.used == Usage(40, 5000)  # what the vendor said it spent
    # The vendor was told the cap the budget allows, not the 9000 asked for.
    assert json.loads(liar.seen[0].body)["max_tokens"] == 1000


def test_a_vendor_that_reports_no_usage_is_charged_the_sizes() -> None:
    run = RunContext()
    events = _events(run)
    reply_, liar, _ = _against_liar("silent", run)
    assert reply_.status_code == 200 and "message_stop" in reply_.text
    # Four bytes a token: what was sent, and what came back.
    prompt, completion = run.budget.used.prompt_tokens, run.budget.used.completion_tokens
    assert prompt == len(liar.seen[0].body) // 4 and completion > 100
    (end,) = [d for t, d in events if t is EventType.INFERENCE_END]
    assert (end["prompt_tokens"], end["completion_tokens"]) == (prompt, completion)


def test_a_cancelled_run_cuts_its_stream() -> None:
    run = RunContext()
    reply_, _, _ = _against_liar("hang", run)
    assert "BEFORE" in reply_.text and "event: error" in reply_.text
    assert "stopped by the user" in reply_.text


def test_a_line_over_the_bound_cuts_the_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(upstream_module, "MAX_LINE", 64 * 1024)
    run = RunContext()
    reply_, _, _ = _against_liar("flood", run)
    assert "BEFORE" in reply_.text and "xxxx" not in reply_.text
    assert "event: error" in reply_.text and "over 65536 bytes" in reply_.text


def test_replies_over_their_bounds_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(upstream_module, "MAX_RESPONSE", 64 * 1024)
    reply_, _, _ = _against_liar("big", RunContext())
    assert reply_.status_code == 503 and "over 65536 bytes" in reply_.text
    monkeypatch.setattr(upstream_module, "MAX_STREAM", 200)
    reply_, _, _ = _against_liar("lie", RunContext())
    assert "event: error" in reply_.text and "passed 200 bytes" in reply_.text
    assert "AFTER" not in reply_.text


def test_a_key_the_vendor_echoes_is_blanked_out() -> None:
    reply_, _, _ = _against_liar("echo", RunContext())
    assert reply_.status_code == 401
    assert KEY not in reply_.text and "withheld" in reply_.text


def test_a_redirect_is_not_followed_with_the_key() -> None:
    reply_, liar, other = _against_liar("redirect", RunContext())
    assert reply_.status_code == 307
    assert len(liar.seen) == 1 and other.seen == []


def test_only_the_credentials_own_api_is_served() -> None:
    async def main() -> tuple[int, ...]:
        liar = _Liar()
        server, url = await _serve(liar)
        try:

            async def work(client: httpx.AsyncClient, gateway: Gateway) -> tuple[int, int, int]:
                headers = {"authorization": f"Bearer {gateway.token}"}
                wrong = await client.post("/v1/responses", headers=headers, json={"input": "x"})
                other = await client.post("/v1/anything", headers=headers, json={})
                deep = await client.post("/v1/messages", headers=headers,
                                         content=b"[" * 5000 + b"]" * 5000)  # fmt: skip
                return wrong.status_code, other.status_code, deep.status_code

            statuses = await _through(url, RunContext(), work)
            return (*statuses, len(liar.seen))
        finally:
            server.close()

    # Another API's path, an unknown one, a body nested past the bound: refused on
    # the host, in the dialect's shape; the vendor is never asked.
    assert asyncio.run(main()) == (404, 404, 400, 0)


@pytest.mark.parametrize(
    ("table", "says"),
    [
        ({"upstream": "https://api.anthropic.com"}, "credentials.c.env"),
        ({"env": "K"}, "credentials.c.upstream: expected the vendor's API as an https://"),
        ({"env": "K", "upstream": "http://api.example.com"}, "plain http only to this machine"),
        ({"env": "K", "upstream": "https://u:p@api.anthropic.com"}, "without credentials"),
        ({"env": "K", "upstream": "https://api.anthropic.com:99999"}, "as an https:// URL"),
        ({"env": "K", "upstream": "https://llm.example.com"}, "credentials.c.dialect"),
        ({"env": "K", "upstream": "https://api.anthropic.com", "dialect": "x"}, "credentials.c.dialect"),
        ({"env": "K", "upstream": "https://api.anthropic.com", "colour": 1}, "unknown key"),
    ],
)  # fmt: skip
def test_a_bad_credential_is_a_config_error(table: dict[str, Any], says: str) -> None:
    with pytest.raises(ConfigError, match=says.replace(".", r"\.").replace("?", r"\?")):
        parse_config({"credentials": {"c": table}})


def test_credential_names_and_agents_are_checked() -> None:
    good = {"env": "K", "upstream": "https://api.anthropic.com"}
    with pytest.raises(ConfigError, match="not an engine's"):
        parse_config({"credentials": {"ollama": good}})
    with pytest.raises(ConfigError, match="named by one credential only"):
        parse_config({"credentials": {"a": {**good, "agents": ["claude"]},
                                      "b": {**good, "agents": ["claude"]}}})  # fmt: skip
    config = parse_config({"credentials": {"a": {**good, "agents": ["claude"]}}})
    assert isinstance(build_engine("a", config, "m"), CredentialEngine)


def test_an_unset_key_and_a_built_in_agent_are_clear_errors(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    credential = CredentialConfig(env="TEST_UNSET_KEY", upstream="https://api.anthropic.com")
    with pytest.raises(UsageError, match=r"\$TEST_UNSET_KEY, which is not set"):
        Upstream.from_credential("c", credential, {})
    assert "sk-" not in repr(Upstream.from_credential("c", credential, {"TEST_UNSET_KEY": KEY}))
    with pytest.raises(UsageError, match="printable ASCII only"):
        Upstream.from_credential("c", credential, {"TEST_UNSET_KEY": "sk-1\r\nx-evil: 1"})
    config = parse_config(
        {"credentials": {"c": {"env": "K", "upstream": "https://api.anthropic.com"}}}
    )
    outcome = asyncio.run(
        run_spec(AgentSpec("hi", agent="simple", engine="c"), RunContext(), config)
    )
    assert outcome.failure is not None and outcome.failure.code == "usage"
    assert "host-held credential" in outcome.failure.message


def test_an_agent_of_another_api_or_without_a_model_is_refused(tmp_path: Any) -> None:
    config = parse_config(
        {"credentials": {"c": {"env": "K", "upstream": "https://api.anthropic.com"}}}
    )
    spec = AgentSpec(
        "hi", agent="codex", engine="c", model="m", options={"workspace": str(tmp_path)}
    )
    outcome = asyncio.run(run_spec(spec, RunContext(), config))
    assert (
        outcome.failure is not None and "codex speaks openai-responses" in outcome.failure.message
    )
    spec = AgentSpec("hi", agent="claude", engine="c", options={"workspace": str(tmp_path)})
    outcome = asyncio.run(run_spec(spec, RunContext(), config))
    assert outcome.failure is not None and "name the model" in outcome.failure.message
