"""The inference gateway: one run's engine served over the HTTP APIs external agents
speak, on a private Unix socket or on loopback TCP.

Every request must carry the run's token (``Authorization: Bearer``, ``x-api-key``,
``x-goog-api-key`` or ``?key=``), compared in constant time; without it the reply is 401
in the dialect's error shape and the body is never read. Every inference goes through
:meth:`RunEngine.bind` (budget reserved, cancel honoured, events on the run's bus); the
run's model serves whatever model the agent names, and ``max_tokens`` (by whatever name
the dialect gives it) is clamped to the gateway's.

A streamed reply's headers go out only once the engine produced its first chunk, so an
engine that fails at once gets a real HTTP error status; a failure later (engine error,
cancel, budget) ends the stream with the dialect's own error event.

On a Unix socket, a :class:`PeerBinding` ties the token to one container: a peer
outside the run's container is closed on, token or not (``_peer``).

Given a :class:`ToolDispatcher`, the gateway also serves the run's tools as an MCP server
at ``POST /mcp`` (``_mcp``): every call goes through the executor with the run, so the
run's ledger holds it as it holds a built-in agent's (tool-call cap, TOOL_CALL_START and
END on the run's bus, cancel, argument repair and schema checks). Its errors are
JSON-RPC errors, its refusals (token, size) too.

When the run's engine is a host-held credential (``CredentialEngine``), inference is a
pass-through to the vendor in the agent's own dialect, with the key added on the host
and the vendor's usage counted on the run's ledger (``_upstream``).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import os
import secrets
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from .._errors import EngineError, JarvisError
from .._messages import StreamChunk, ToolCall
from .._runcontext import BudgetExceeded, RunContext, RunStopped
from .._unixsock import bind_private
from ..http import HTTPServer, Request, Response
from . import _anthropic, _gemini, _mcp, _openai_chat, _openai_responses
from ._common import BadRequest, ChatRequest, Dialect, error_status, loads
from ._peer import PeerBinding
from ._upstream import Upstream

if TYPE_CHECKING:
    import httpx

    from ..engines import Engine
    from ..tools import ToolDispatcher

__all__ = ["Gateway"]

log = logging.getLogger(__name__)

DEFAULT_MAX_TOKENS = 1024
#: Where the run's tools are served (MCP, Streamable HTTP).
MCP_PATH = "/mcp"


def _json(status: int, body: object) -> Response:
    return Response(status, json.dumps(body, ensure_ascii=False).encode())


def _gemini_action(path: str) -> str:
    """``generateContent`` for ``/v1beta/models/M:generateContent`` (google-genai may
    use ``/v1/`` instead), else ""."""
    for prefix in ("/v1beta/models/", "/v1/models/"):
        if path.startswith(prefix) and ":" in path:
            return path.rsplit(":", 1)[1]
    return ""


def _dialect_for(path: str, headers: Any) -> Dialect:
    """The dialect whose error shape a request to ``path`` expects."""
    if path.startswith("/v1beta/") or _gemini_action(path):
        return _gemini.DIALECT
    if path.startswith("/v1/messages") or "anthropic-version" in headers:
        return _anthropic.DIALECT
    if path.startswith("/v1/responses"):
        return _openai_responses.DIALECT
    return _openai_chat.DIALECT


def served_model_name(model: str, engine: Engine) -> str:
    """The model name a gateway for ``model`` on ``engine`` hands agents."""
    return model or engine.default_model() or "jarvis"


class Gateway:
    """Serve ``engine`` for ``run`` until the ``async with`` block ends.

    ``socket_path``: listen on a Unix socket there (mode 0600; its directory must exist
    and nothing may be at the path yet); else on 127.0.0.1, any free port. ``tools``:
    the run's tools, served at ``/mcp`` (without them, that path is 404). Cheap to
    construct; the server starts in ``__aenter__`` and stops, with every connection and
    the socket file, in ``__aexit__``.
    """

    def __init__(
        self,
        engine: Engine,
        run: RunContext,
        model: str = "",
        socket_path: Path | str | None = None,
        *,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        tools: ToolDispatcher | None = None,
        peers: PeerBinding | None = None,
        temperature: float | None = None,
        max_turns: int | None = None,
        token: str | None = None,
    ) -> None:
        self.engine = engine
        #: On a Unix socket: only these peers are served, whatever token they hold.
        self.peers = peers
        #: The run's sampling temperature and turn cap (``--temperature``,
        #: ``--max-turns``): they hold whatever the agent asks; None leaves its own.
        self.temperature = temperature
        self.max_turns = max_turns
        self.turns = 0
        self.tools = tools
        self._names = _mcp.ToolNames(tools.names) if tools is not None else None
        self.run = run
        self.model = model
        self.socket_path = Path(socket_path) if socket_path is not None else None
        self.max_tokens = max_tokens
        #: ``token``: one minted before the run, adopted (an agent started ahead of it
        #: read it at its start: ``jarvisd.external._agentpool``); else a fresh one.
        self.token = token or secrets.token_urlsafe(32)
        self.url: str | None = None
        self._token = self.token.encode()
        self._server: asyncio.AbstractServer | None = None
        self._http: HTTPServer | None = None
        self._socket_ino: int | None = None
        #: The vendor this run's credential forwards to (its key read on start).
        self.upstream: Upstream | None = None
        self._client: httpx.AsyncClient | None = None

    @property
    def model_name(self) -> str:
        """The model name to hand agents (any name they send is served the same)."""
        return served_model_name(self.model, self.engine)

    # -- lifecycle ------------------------------------------------------------------

    async def __aenter__(self) -> Gateway:
        self._start_upstream()
        peers = self.peers
        self._http = HTTPServer(
            self,
            None if peers is None else lambda w: peers.admits(w.get_extra_info("socket")),
        )
        if self.socket_path is None:
            self._server = await asyncio.start_server(self._http.connection, "127.0.0.1", 0)
            port = self._server.sockets[0].getsockname()[1]
            self.url = f"http://127.0.0.1:{port}"
        else:
            self._server = await self._listen_unix(self.socket_path)
        return self

    def _start_upstream(self) -> None:
        from ..engines import CredentialEngine, WrapperEngine

        engine = self.engine
        while isinstance(engine, WrapperEngine):
            engine = engine.inner
        if not isinstance(engine, CredentialEngine):
            return
        import httpx

        from ..engines._base import tls_verify

        upstream = Upstream.from_credential(engine.credential_name, engine.credential)
        self._client = httpx.AsyncClient(
            timeout=httpx.Timeout(upstream.timeout, connect=min(upstream.timeout, 30.0)),
            verify=tls_verify(upstream.url),
        )
        self.upstream = upstream

    async def _listen_unix(self, path: Path) -> asyncio.AbstractServer:
        assert self._http is not None
        sock = bind_private(path, "the gateway")
        self._socket_ino = os.lstat(path).st_ino
        return await asyncio.start_unix_server(self._http.connection, sock=sock)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._server is not None:
            self._server.close()
        if self._http is not None:
            await self._http.aclose()
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None
        if self.socket_path is not None and self._socket_ino is not None:
            # Only the socket this gateway made: something put there since stays.
            with contextlib.suppress(OSError):
                if os.lstat(self.socket_path).st_ino == self._socket_ino:
                    self.socket_path.unlink()
            self._socket_ino = None
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    # -- the HTTP app -----------------------------------------------------------------

    def _authorized(self, request: Request) -> bool:
        headers = request.headers
        auth = headers.get("authorization", "")
        offered = [
            auth[7:].strip() if auth[:7].lower() == "bearer " else "",
            headers.get("x-api-key", ""),
            headers.get("x-goog-api-key", ""),
            request.query.get("key", ""),
        ]
        ok = False
        for value in offered:  # every one compared: the time says nothing about which
            ok |= hmac.compare_digest(value.encode("utf-8", "replace"), self._token)
        return ok

    def admit(self, request: Request) -> Response | None:
        if request.path == MCP_PATH and not _mcp.origin_allowed(request.headers.get("origin")):
            return self.refuse(request, 403, "requests from web pages are not served")
        if self._authorized(request):
            return None
        return self.refuse(request, 401, "missing or wrong API key for this jarvis run")

    def refuse(self, request: Request | None, status: int, message: str) -> Response:
        if request is not None and request.path == MCP_PATH:
            code = _mcp.INTERNAL_ERROR if status >= 500 else _mcp.INVALID_REQUEST
            return _json(status, _mcp.error(None, code, message))
        dialect = _dialect_for(request.path, request.headers) if request else _openai_chat.DIALECT
        return _json(status, dialect.error(status, message))

    async def handle(self, request: Request) -> Response:
        if request.path == MCP_PATH:
            return await self._serve_tools(request)
        dialect = _dialect_for(request.path, request.headers)
        try:
            if self.upstream is not None:
                assert self._client is not None
                return await self.upstream.forward(
                    request, self.run, self._client, on_call=self._count_turn
                )
            return await self._route(request, dialect)
        except (BadRequest, EngineError, RunStopped) as exc:
            status = error_status(exc)
            return _json(status, dialect.error(status, str(exc)))
        except JarvisError as exc:
            return _json(500, dialect.error(500, str(exc)))
        except Exception as exc:  # the agent gets an answer, whatever the engine did
            log.exception("gateway: internal error on %s", request.path)
            return _json(500, dialect.error(500, f"internal error: {type(exc).__name__}"))

    async def _route(self, request: Request, dialect: Dialect) -> Response:
        method, path = request.method, request.path
        if method == "GET":
            if path == "/v1/models":
                if dialect is _anthropic.DIALECT:
                    return _json(200, _anthropic.models_body([self.model_name]))
                return _json(200, _openai_chat.models_body([self.model_name]))
            if path == "/v1beta/models":
                return _json(200, _gemini.models_body([self.model_name]))
            raise BadRequest(f"no such endpoint: GET {path}", 404)
        if method != "POST":
            raise BadRequest(f"method {method} is not allowed here", 405)
        if path == "/v1/messages/count_tokens":
            return _json(200, _anthropic.count_tokens(loads(request.body)))
        action = _gemini_action(path)
        if action:
            if action == "countTokens":
                return _json(200, _gemini.count_tokens(loads(request.body)))
            if action not in ("generateContent", "streamGenerateContent"):
                raise BadRequest(f"no such endpoint: POST {path}", 404)
            chat = dialect.parse(loads(request.body), self.max_tokens)
            return await self._infer(dialect, replace(chat, stream=action != "generateContent"))
        if path in ("/v1/chat/completions", "/v1/responses", "/v1/messages"):
            return await self._infer(dialect, dialect.parse(loads(request.body), self.max_tokens))
        raise BadRequest(f"no such endpoint: POST {path}", 404)

    # -- the run's tools (MCP) ------------------------------------------------------------

    async def _serve_tools(self, request: Request) -> Response:
        if self.tools is None:
            return self.refuse(request, 404, "this run serves no tools")
        if request.method != "POST":  # no server-sent stream, no session to delete
            refusal = self.refuse(request, 405, f"method {request.method} is not allowed here")
            refusal.headers.append(("allow", "POST"))
            return refusal
        rid: _mcp.RequestId | None = None
        try:
            message = _mcp.parse(request.body)
            _mcp.check_version(message, request.headers.get("mcp-protocol-version"))
            if not isinstance(message, _mcp.Request):
                return Response(202, content_type="text/plain")
            rid = message.id
            return _json(200, _mcp.result(rid, await self._tool_method(message)))
        except _mcp.RpcError as exc:
            return _json(exc.status, _mcp.error(exc.id, exc.code, str(exc)))
        except Exception as exc:  # the agent gets an answer, whatever the tool did
            log.exception("gateway: internal error in an MCP request")
            failure = f"internal error: {type(exc).__name__}"
            return _json(200, _mcp.error(rid, _mcp.INTERNAL_ERROR, failure))

    async def _tool_method(self, request: _mcp.Request) -> dict[str, Any]:
        assert self.tools is not None and self._names is not None
        method = request.method
        if method == "initialize":
            return _mcp.initialize(request)
        if method == "ping":
            return {}
        if method == "tools/list":
            return _mcp.tools_list(request, self.tools.specs, self._names)
        if method != "tools/call":
            raise _mcp.RpcError(
                _mcp.METHOD_NOT_FOUND, f"method not found: {method[:100]}", request.id
            )
        wanted = _mcp.tool_call(request, self._names)
        call = ToolCall.from_arguments(wanted.name, wanted.arguments)
        try:
            # execute_all, not execute: it races the run's cancel token.
            (result,) = await self.tools.execute_all([call], self.run)
        except RunStopped as exc:  # cancelled or a budget spent: the call never ran
            raise _mcp.RpcError(
                _mcp.RUN_STOPPED, f"the run has stopped: {exc}", request.id
            ) from None
        except JarvisError as exc:  # the sandbox is gone: no retry of the model helps
            raise _mcp.RpcError(_mcp.INTERNAL_ERROR, str(exc), request.id) from None
        return _mcp.call_result(result)

    # -- inference ----------------------------------------------------------------------

    def _count_turn(self) -> None:
        self.turns += 1
        if self.max_turns is not None and self.turns > self.max_turns:
            # An agent's turn is one model call: past the cap the whole run stops, as
            # a built-in agent's does, instead of the agent retrying a refused call.
            reason = f"the agent reached the run's max turns ({self.max_turns})"
            self.run.cancel.cancel(reason, stop=BudgetExceeded)
            raise BudgetExceeded(reason)

    async def _infer(self, dialect: Dialect, chat: ChatRequest) -> Response:
        from ..engines import RunEngine

        engine = RunEngine.bind(self.engine, self.run)
        options = chat.options
        if options.max_tokens > self.max_tokens:
            options = replace(options, max_tokens=self.max_tokens)
        if self.temperature is not None:
            options = replace(options, temperature=self.temperature)
        self._count_turn()
        model = self.model or self.engine.default_model()
        if not chat.stream:
            generation = await engine.generate(
                chat.messages, model=model, tools=chat.tools, options=options
            )
            return _json(200, dialect.response(generation, chat, self.model_name))
        chunks = aiter(engine.stream(chat.messages, model=model, tools=chat.tools, options=options))
        try:
            first = await anext(chunks)
        except BaseException:
            await chunks.aclose()  # type: ignore[attr-defined]
            raise
        encoder = dialect.stream(chat, self.model_name)
        return Response(
            200, content_type="text/event-stream", stream=_events(encoder, first, chunks)
        )


async def _events(
    encoder: Any, first: StreamChunk, chunks: AsyncIterator[StreamChunk]
) -> AsyncIterator[bytes]:
    try:
        yield encoder.start()
        chunk: StreamChunk | None = first
        while chunk is not None:
            if chunk.done:
                if chunk.generation is None:
                    raise EngineError("the engine ended its stream without a result")
                yield encoder.finish(chunk.generation)
                return
            yield encoder.delta(chunk.delta)
            chunk = await anext(chunks, None)
        raise EngineError("the engine ended its stream without a result")
    except (EngineError, RunStopped) as exc:
        yield encoder.fail(error_status(exc), str(exc))
    finally:
        await chunks.aclose()  # type: ignore[attr-defined]
