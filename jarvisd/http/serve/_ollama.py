"""An Ollama-protocol HTTP server over any :class:`Engine`.

Over the embedded llama.cpp engine it is ``jarvis serve-model``: any Ollama client can
use a local model with no Ollama installed. Over a :class:`ScriptedEngine` it is the test
stand-in (``jarvisd.testing.OllamaStandIn``). Same code, so the stand-in cannot drift
from what users run.

Endpoints: ``GET /``, ``GET /api/version``, ``GET /api/tags``, ``POST /api/show``,
``GET /api/ps``, ``POST /api/chat`` and ``POST /api/generate`` (NDJSON streaming, the
default as in Ollama, or one JSON object with ``"stream": false``). For OpenAI clients
also ``GET /v1/models`` and ``POST /v1/chat/completions`` (server-sent events when
``"stream": true``). Errors are
``{"error": "..."}`` bodies with Ollama's status codes (OpenAI's ``{"error": {"message",
"type", "code"}}`` under ``/v1/``); an error after streaming began is
sent as a final ``{"error": ...}`` line, which Ollama clients raise as ResponseError.

Before anything else, a request is refused (403, a JSON error) unless its Host and
Origin pass :class:`~._allow.Allowlist` (no DNS rebinding, no foreign web page), then
(401) unless it carries the server's token as ``Authorization: Bearer`` when the server
has one (``jarvis serve`` always does), and a body is read only with one valid
Content-Length of at most ``MAX_BODY``; a refused request's connection is closed, its
body never read.

With ``agents`` (``jarvis serve``), ``/v1/models`` also lists ``agent:NAME`` and
``team:NAME``, and a chat for one of them is a whole run (:mod:`._served`).

The HTTP side is jarvis's h11 server (``_server``) on an asyncio loop in a thread of
its own, so a foreground server and the tests keep a plain ``start()``/``stop()``.
Engines keep their async contract; many clients stream at once on the one loop, and a
client that leaves mid-stream closes its stream, which cancels its generation.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import socket
import threading
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import replace
from typing import Any, TypeVar

from ..._errors import EngineError, EngineResponseError, JarvisError, ModelNotFound, UsageError
from ..._messages import Message, StreamChunk, ToolSpec
from ...engines import Engine, ModelInfo
from ...gateway import _common as c
from ...gateway import _openai_chat as openai_chat
from ...gateway._common import BadRequest
from .._allow import Allowlist
from .._server import HEAD_TIMEOUT, HTTPServer, Limits, Request, Response
from . import _agents as served
from . import _ollama_wire as wire
from ._agents import ServedAgents
from ._served import agent_chat

__all__ = ["MAX_BODY", "VERSION", "OllamaServer"]

log = logging.getLogger(__name__)

VERSION = wire.VERSION
MAX_BODY = 32 * 1024 * 1024
#: Ollama's clients may open a connection well before their first request (no token
#: to show, nothing to starve): the first head has as long as any other.
LIMITS = Limits(
    max_body=MAX_BODY, first_head_timeout=HEAD_TIMEOUT, write_timeout=served.WRITE_TIMEOUT
)
_JSON = "application/json; charset=utf-8"
_SERVER = ("server", "jarvis-ollama/" + VERSION)
_T = TypeVar("_T")
_METHODS = frozenset({"GET", "POST", "HEAD", "DELETE"})


class OllamaServer:
    """Serve ``engine`` over the Ollama HTTP API on ``host:port`` (0: any free port).

    Cheap to construct; ``start()``/``stop()`` or use as a context manager;
    ``wait()`` blocks a foreground server. Only requests whose Host and Origin pass
    :class:`Allowlist` are answered (``origins``: extra allowed Origin patterns).
    """

    def __init__(
        self,
        engine: Engine,
        host: str = "127.0.0.1",
        port: int = 11434,
        *,
        origins: Sequence[str] = (),
        agents: ServedAgents | None = None,
        token: str | None = None,
    ) -> None:
        self.engine = engine
        self.host = host
        self.port = port
        self.allow = Allowlist.for_server(host, origins)
        #: Agents and teams served as models (``jarvis serve``); None: models only.
        self.agents = agents
        #: The bearer token every request must carry (None: none asked, serve-model).
        self.token = token
        self._address: tuple[str, int] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._http: HTTPServer | None = None
        self._server: asyncio.Server | None = None
        self._stopped = threading.Event()
        self._loaded: dict[str, float] = {}

    def observe(self, method: str, path: str, body: dict[str, Any]) -> None:
        """Called with each request body once parsed; a seam for subclasses (the test
        stand-in records them). The server itself keeps nothing."""

    # -- lifecycle ----------------------------------------------------------------

    @property
    def url(self) -> str:
        if self._address is None:
            raise RuntimeError("server not started")
        host, port = self._address
        return f"http://{host}:{port}"

    def start(self) -> OllamaServer:
        try:
            sock = _listen(self.host, self.port)
        except OSError as exc:
            raise UsageError(
                f"cannot listen on {self.host}:{self.port}: {exc.strerror or exc}"
                " (is another server there? pick another port)"
            ) from exc
        self._address = sock.getsockname()[:2]
        self._stopped.clear()
        self._loop = loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=loop.run_forever, name="ollama-api", daemon=True)
        self._thread.start()
        self._http = HTTPServer(_Routes(self), limits=LIMITS)
        self._server = self._on_loop(asyncio.start_server(self._http.connection, sock=sock))
        return self

    def _on_loop(self, coro: Awaitable[_T], timeout: float | None = None) -> _T:
        assert self._loop is not None
        future = asyncio.run_coroutine_threadsafe(_awaited(coro), self._loop)
        return future.result(timeout)

    def wait(self) -> None:
        """Block until the server stops (Ctrl-C raises KeyboardInterrupt here)."""
        while self._address is not None and not self._stopped.wait(0.5):
            pass

    def stop(self) -> None:
        if self.agents is not None and self._loop is not None:
            # The runs end on the loop, which must still turn for their containers to go.
            self.agents.cancel_all()
            if not self.agents.wait_idle(served.STOP_GRACE):
                log.warning("served runs still going on at stop: %d", self.agents.active)
        if self._loop is not None:
            loop = self._loop
            self._on_loop(self._shutdown(), timeout=10)
            loop.call_soon_threadsafe(loop.stop)
            if self._thread is not None:
                self._thread.join(timeout=5)
            loop.close()
            self._loop = self._thread = None
        self._address = None
        self._stopped.set()

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        if self._http is not None:
            await self._http.aclose()
            self._http = None
        await self.engine.aclose()

    def __enter__(self) -> OllamaServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    async def resolve_model(self, requested: object, *, use: bool = True) -> str:
        """The served name of ``requested`` (404 if unknown). ``use``: the request runs
        the model, so /api/ps lists it from now on (/api/show only looks)."""
        if not isinstance(requested, str) or not requested:
            raise BadRequest("model is required")
        name = wire.untag(requested)
        models = [m.name for m in await self.engine.list_models()]
        # Ollama's own rule: a name without a tag means its ":latest".
        if models and wire.tag(requested) not in {wire.tag(m) for m in models}:
            raise ModelNotFound(f'model "{requested}" not found, try pulling it first')
        if use:
            self._loaded[name] = time.time()
        return name


def _listen(host: str, port: int) -> socket.socket:
    """A listening IPv4 TCP socket, made with its protocol named: asyncio sets
    TCP_NODELAY only on sockets that say they are TCP, and without it a stream's
    chunks wait for the client's delayed ACK of its head (about 40 ms a reply)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    return sock


async def _awaited(value: Awaitable[_T]) -> _T:
    return await value


def _json(status: int, body: object, *, close: bool = False) -> Response:
    headers = [_SERVER] + ([("connection", "close")] if close else [])
    return Response(status, json.dumps(body).encode(), _JSON, headers=headers)


def _error(path: str, status: int, message: str) -> Response:
    """An error in the caller's dialect: OpenAI's ``{"error": {"message", "type",
    "code"}}`` under ``/v1/`` (its clients read nothing else), Ollama's
    ``{"error": "..."}`` elsewhere."""
    if path.startswith("/v1/"):
        return _json(status, openai_chat.error(status, message))
    return _json(status, {"error": message})


def _text(text: str) -> Response:
    return Response(200, text.encode(), "text/plain; charset=utf-8", headers=[_SERVER])


Route = Callable[["_Routes", Request], Awaitable[Response]]


class _Routes:
    """The server's :class:`~._server.App`: the caller checks, then one route."""

    def __init__(self, api: OllamaServer) -> None:
        self.api = api
        self.engine = api.engine

    def admit(self, request: Request) -> Response | None:
        """Refuse before anything else is read: a web page (Origin) or a rebound name
        (Host) must not reach the model; a chunked body must not reach the reader
        (h11 has checked the Content-Length, the server its bound)."""
        headers = request.headers
        allow = self.api.allow
        refusals = (
            allow.host_refusal(headers.get("host")),
            allow.origin_refusal(headers.get("origin")),
        )
        for refusal in refusals:
            if refusal is not None:
                return self._refused(request, 403, refusal)
        token = self.api.token
        if token is not None:
            auth = headers.get("authorization") or ""
            given = auth[7:].strip() if auth[:7].lower() == "bearer " else ""
            if not hmac.compare_digest(given.encode(), token.encode()):
                message = "missing or wrong token (Authorization: Bearer TOKEN)"
                return self._refused(request, 401, message)
        if "transfer-encoding" in headers:
            message = "send the request body with a Content-Length, not chunked"
            return self._refused(request, 411, message)
        return None

    def refuse(self, request: Request | None, status: int, message: str) -> Response:
        return _error("" if request is None else request.path, status, message)

    @staticmethod
    def _refused(request: Request, status: int, message: str) -> Response:
        log.info("refused %s %s: %s", request.method, request.path, message)
        return _error(request.path, status, message)

    async def handle(self, request: Request) -> Response:
        path = request.path.rstrip("/") or "/"
        try:
            route = ROUTES.get((request.method, path))
            if route is not None:
                return await route(self, request)
            if request.method not in _METHODS:
                return _error(path, 501, f"unsupported method {request.method}")
            if any(p == path for _, p in ROUTES):
                return _error(path, 405, f"method {request.method} not allowed on {path}")
            return _error(path, 404, f"{path} is not supported by this server")
        except BadRequest as exc:
            return _error(path, exc.status, str(exc))
        except (EngineError, JarvisError) as exc:
            return _error(path, wire.error_status(exc), str(exc))
        except Exception as exc:  # the server must answer, whatever the engine did
            log.exception("internal error")
            return _error(path, 500, f"internal error: {type(exc).__name__}: {exc}")

    def _body(self, request: Request) -> dict[str, Any]:
        body = c.loads(request.body) if request.body else {}  # depth-bounded
        if not isinstance(body, dict):
            raise BadRequest("request body must be a JSON object")
        self.api.observe(request.method, request.path, body)
        return body

    # -- Ollama ---------------------------------------------------------------------

    async def root(self, request: Request) -> Response:
        return _text("" if request.method == "HEAD" else "Ollama is running")

    async def version(self, request: Request) -> Response:
        return _json(200, {"version": VERSION})

    async def tags(self, request: Request) -> Response:
        models = await self.engine.list_models()
        return _json(200, {"models": [wire.model_entry(m) for m in models]})

    async def ps(self, request: Request) -> Response:
        models = {m.name: m for m in await self.engine.list_models()}
        running = []
        for name in self.api._loaded:
            entry = wire.model_entry(models.get(name, ModelInfo(name)))
            entry.update({"expires_at": wire.now(), "size_vram": 0})
            running.append(entry)
        return _json(200, {"models": running})

    async def show(self, request: Request) -> Response:
        body = self._body(request)
        name = await self.api.resolve_model(body.get("model") or body.get("name"), use=False)
        models = {m.name: m for m in await self.engine.list_models()}
        info = models.get(name, ModelInfo(name))
        window = await self.engine.context_length(name) or info.context_length
        # A GGUF file says what the model is, as Ollama reports it: its architecture,
        # the context it was trained for (the window this server gives is num_ctx),
        # its chat template. Other engines: what they list.
        meta = wire.gguf_metadata(self.engine, name)
        arch = str(meta.get("general.architecture") or info.family or "llama")
        context = meta.get(f"{arch}.context_length") or window
        details = wire.model_entry(info)["details"]
        if meta:
            details.update(
                format="gguf",
                family=arch,
                families=[arch],
                parameter_size=str(meta.get("general.size_label") or ""),
            )
        return _json(
            200,
            {
                "modelfile": f"FROM {name}",
                "parameters": f"num_ctx {window}" if window else "",
                "template": str(meta.get("tokenizer.chat_template") or ""),
                "details": details,
                "model_info": {"general.architecture": arch, f"{arch}.context_length": context},
                "capabilities": ["completion", "tools"],
                "modified_at": wire.now(),
            },
        )

    async def chat(self, request: Request) -> Response:
        body = self._body(request)
        messages = wire.parse_messages(body.get("messages", []))
        tools = wire.parse_tools(body.get("tools"))
        if not messages:
            # Ollama answers an empty chat with a load-only reply.
            model = await self.api.resolve_model(body.get("model"))
            return _json(
                200,
                {
                    "model": wire.tag(model),
                    "created_at": wire.now(),
                    "message": {"role": "assistant", "content": ""},
                    "done": True,
                    "done_reason": "load",
                },
            )
        return await self._generation(body, messages, tools, "chat")

    async def generate(self, request: Request) -> Response:
        body = self._body(request)
        prompt = body.get("prompt", "")
        if not isinstance(prompt, str):
            raise BadRequest("prompt must be a string")
        if not prompt:
            model = await self.api.resolve_model(body.get("model"))
            return _json(
                200,
                {
                    "model": wire.tag(model),
                    "created_at": wire.now(),
                    "response": "",
                    "done": True,
                    "done_reason": "load",
                },
            )
        messages = []
        if isinstance(body.get("system"), str) and body["system"]:
            messages.append(Message.system(body["system"]))
        messages.append(Message.user(prompt))
        return await self._generation(body, messages, [], "generate")

    async def _generation(
        self, body: dict[str, Any], messages: list[Message], tools: list[ToolSpec], shape: str
    ) -> Response:
        model = await self.api.resolve_model(body.get("model"))
        options = wire.stop_at_calls(wire.parse_options(body.get("options")), tools)
        if wire.wants_json(body.get("format")):
            options = replace(options, json_format=True)
        start = time.perf_counter_ns()
        chunks = self.engine.stream(messages, model=model, tools=tools, options=options)
        # The first chunk is awaited before any header goes out, so an engine that fails
        # at once produces a proper HTTP error status, not a 200 with an error line.
        first = await _first(chunks)
        if body.get("stream", True) is False:
            final = await _last(first, chunks)
            return _json(200, wire.final_line(final, model, shape, start))
        lines = _ndjson(first, chunks, model, shape, start)
        return Response(200, content_type="application/x-ndjson", stream=lines, headers=[_SERVER])

    # -- OpenAI chat completions ----------------------------------------------------

    async def openai_models(self, request: Request) -> Response:
        names = [m.name for m in await self.engine.list_models()]
        if self.api.agents is not None:
            names += self.api.agents.model_names()
        return _json(200, openai_chat.models_body(names))

    async def openai_chat(self, request: Request) -> Response:
        # The translation is the gateway's OpenAI dialect: one copy for both servers.
        raw = self._body(request)
        if self.api.agents is not None and ServedAgents.serves(raw.get("model")):
            return await agent_chat(raw, self.api.agents, self.engine)
        chat = openai_chat.parse(raw, 1024)
        requested = chat.model or self.engine.default_model() or "default"
        model = await self.api.resolve_model(requested)
        options = wire.stop_at_calls(chat.options, chat.tools)
        wanted = raw.get("response_format")
        if isinstance(wanted, dict) and wanted.get("type") in ("json_object", "json_schema"):
            options = replace(options, json_format=True)
        chunks = self.engine.stream(chat.messages, model=model, tools=chat.tools, options=options)
        first = await _first(chunks)  # fail with a status code before any header is sent
        if not chat.stream:
            final = await _last(first, chunks)
            if final.generation is None:
                raise EngineResponseError("engine ended its stream without a result")
            generation = wire.beside_calls(final.generation)
            return _json(200, openai_chat.response(generation, chat, model))
        events = _sse(openai_chat.Stream(chat, model), first, chunks)
        return Response(200, content_type="text/event-stream", stream=events, headers=[_SERVER])


ROUTES: dict[tuple[str, str], Route] = {
    ("GET", "/"): _Routes.root,
    ("HEAD", "/"): _Routes.root,
    ("GET", "/api/version"): _Routes.version,
    ("GET", "/api/tags"): _Routes.tags,
    ("GET", "/api/ps"): _Routes.ps,
    ("POST", "/api/show"): _Routes.show,
    ("POST", "/api/chat"): _Routes.chat,
    ("POST", "/api/generate"): _Routes.generate,
    ("GET", "/v1/models"): _Routes.openai_models,
    ("POST", "/v1/chat/completions"): _Routes.openai_chat,
}


# -- an engine's stream, as replies ---------------------------------------------------


async def _close(chunks: AsyncIterator[StreamChunk]) -> None:
    """Stop the generation behind ``chunks`` (a client gone, or the reply done)."""
    closer: Callable[[], Awaitable[object]] | None = getattr(chunks, "aclose", None)
    if closer is not None:
        await closer()


async def _first(chunks: AsyncIterator[StreamChunk]) -> StreamChunk:
    try:
        return await anext(chunks)
    except StopAsyncIteration:
        raise EngineResponseError("engine ended its stream without a result") from None
    except BaseException:
        await _close(chunks)
        raise


async def _last(first: StreamChunk, chunks: AsyncIterator[StreamChunk]) -> StreamChunk:
    final = first
    try:
        async for final in chunks:  # noqa: B007 - only the done chunk matters
            pass
    finally:
        await _close(chunks)
    return final


async def _chained(
    first: StreamChunk, chunks: AsyncIterator[StreamChunk]
) -> AsyncGenerator[StreamChunk, None]:
    try:
        yield first
        async for chunk in chunks:
            yield chunk
    finally:
        await _close(chunks)


async def _ndjson(
    first: StreamChunk, chunks: AsyncIterator[StreamChunk], model: str, shape: str, start: int
) -> AsyncIterator[bytes]:
    """Ollama's streamed reply; an error after it began is its last line."""
    stream = _chained(first, chunks)
    try:
        async for chunk in stream:
            line = (
                wire.final_line(chunk, model, shape, start, streamed=True)
                if chunk.done
                else wire.partial_line(chunk, model, shape)
            )
            yield json.dumps(line).encode() + b"\n"
    except (EngineError, JarvisError) as exc:
        yield json.dumps({"error": str(exc)}).encode() + b"\n"
    finally:
        await stream.aclose()


async def _sse(
    encoder: openai_chat.Stream, first: StreamChunk, chunks: AsyncIterator[StreamChunk]
) -> AsyncIterator[bytes]:
    """OpenAI's streamed chat completion; an error after it began is its last event."""
    stream = _chained(first, chunks)
    try:
        yield encoder.start()
        async for chunk in stream:
            if not chunk.done:
                if chunk.delta:
                    yield encoder.delta(chunk.delta)
                continue
            if chunk.generation is None:
                raise EngineResponseError("engine ended its stream without a result")
            yield encoder.finish(chunk.generation)
    except (EngineError, JarvisError) as exc:
        yield encoder.fail(wire.error_status(exc), str(exc))
    finally:
        await stream.aclose()
