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
``team:NAME``, and a chat for one of them is a whole run (:mod:`._agents`).

The HTTP side is the standard library's threading server; all engine work runs on one
asyncio loop in its own thread, so engines keep their async contract.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import queue
import threading
import time
from collections.abc import AsyncIterator, Callable, Generator, Iterator, Sequence
from concurrent.futures import Future
from dataclasses import replace
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from .._errors import (
    EngineError,
    EngineResponseError,
    EngineUnavailable,
    JarvisError,
    ModelNotFound,
    UsageError,
)
from .._messages import (
    Generation,
    Message,
    Role,
    SamplingOptions,
    StreamChunk,
    ToolCall,
    ToolSpec,
)
from .._toolcalls import calls_end
from ..engines import Engine, ModelInfo
from ..gateway import _common as c
from ..gateway import _openai_chat as openai_chat
from ..gateway._common import BadRequest
from . import _agents as served
from ._agents import ServedAgents
from ._allow import Allowlist

if TYPE_CHECKING:
    from .._run import RunContext
    from ..runs import RunOutcome

__all__ = ["OllamaServer"]

log = logging.getLogger(__name__)

VERSION = "0.6.3-jarvis"
MAX_BODY = 32 * 1024 * 1024
_END = object()


class _ClientGone(Exception):
    """The client of a served run hung up or stopped reading."""


class _Refused(Exception):
    """Answered with ``status`` and the connection closed: the request's body, if any,
    is left unread, so nothing after it on the connection can be trusted."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _now() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


def _tag(name: str) -> str:
    return name if ":" in name else name + ":latest"


def _untag(name: str) -> str:
    return name[: -len(":latest")] if name.endswith(":latest") else name


def _error_status(exc: BaseException) -> int:
    if isinstance(exc, ModelNotFound):
        return 404
    if isinstance(exc, EngineResponseError) and exc.status and 400 <= exc.status < 600:
        return exc.status
    if isinstance(exc, EngineUnavailable):
        return 503
    return 500


def _parse_messages(raw: Any) -> list[Message]:
    if not isinstance(raw, list):
        raise BadRequest("messages must be a list")
    messages = []
    for item in raw:
        if not isinstance(item, dict) or not isinstance(item.get("role"), str):
            raise BadRequest("each message needs a role")
        try:
            role = Role(item["role"])
        except ValueError:
            raise BadRequest(f"unknown role {item['role']!r}") from None
        calls = []
        for call in item.get("tool_calls") or ():
            fn = call.get("function") if isinstance(call, dict) else None
            if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
                raise BadRequest("tool_calls[].function.name is required")
            calls.append(ToolCall.from_arguments(fn["name"], fn.get("arguments") or {}))
        content = item.get("content") or ""
        if not isinstance(content, str):
            raise BadRequest("message content must be a string")
        messages.append(
            Message(
                role=role,
                content=content,
                tool_calls=tuple(calls),
                name=item.get("tool_name") or item.get("name"),
            )
        )
    return messages


def _parse_tools(raw: Any) -> list[ToolSpec]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise BadRequest("tools must be a list")
    specs = []
    for tool in raw:
        fn = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise BadRequest("tools[].function.name is required")
        specs.append(
            ToolSpec(fn["name"], str(fn.get("description") or ""), fn.get("parameters") or {})
        )
    return specs


def _parse_options(raw: Any) -> SamplingOptions:
    if raw is None:
        return SamplingOptions()
    if not isinstance(raw, dict):
        raise BadRequest("options must be an object")
    try:
        stop = raw.get("stop") or ()
        # Ollama: num_predict -1 (or absent) means "until done"; bound it anyway.
        num_predict = int(raw.get("num_predict") or -1)
        return SamplingOptions(
            temperature=float(raw.get("temperature", 0.8)),
            max_tokens=num_predict if num_predict > 0 else 4096,
            top_p=None if raw.get("top_p") is None else float(raw["top_p"]),
            seed=None if raw.get("seed") is None else int(raw["seed"]),
            stop=tuple(stop) if isinstance(stop, list) else (str(stop),),
        )
    except (TypeError, ValueError) as exc:
        raise BadRequest(f"invalid options: {exc}") from None


def _model_entry(info: ModelInfo) -> dict[str, Any]:
    return {
        "name": _tag(info.name),
        "model": _tag(info.name),
        "modified_at": _now(),
        "size": info.size,
        "digest": "",
        "details": {
            "format": info.family or "gguf",
            "family": info.family or "",
            "families": [info.family] if info.family else None,
            "parameter_size": "",
            "quantization_level": "",
        },
    }


class _HTTPServer(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        # The standard server prints tracebacks to stderr; clients that drop a
        # keep-alive connection are routine, anything else is logged.
        import sys

        exc = sys.exc_info()[1]
        if isinstance(exc, ConnectionError):
            log.debug("client %s went away: %s", client_address, exc)
        else:
            log.exception("error serving %s", client_address)


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
        self._httpd: ThreadingHTTPServer | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._threads: list[threading.Thread] = []
        self._loaded: dict[str, float] = {}

    def observe(self, method: str, path: str, body: dict[str, Any]) -> None:
        """Called with each request body once parsed; a seam for subclasses (the test
        stand-in records them). The server itself keeps nothing."""

    # -- lifecycle ----------------------------------------------------------------

    @property
    def url(self) -> str:
        if self._httpd is None:
            raise RuntimeError("server not started")
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> OllamaServer:
        handler = type("Handler", (_Handler,), {"api": self})
        try:
            self._httpd = _HTTPServer((self.host, self.port), handler)
        except OSError as exc:
            raise UsageError(
                f"cannot listen on {self.host}:{self.port}: {exc.strerror or exc}"
                " (is another server there? pick another port)"
            ) from exc
        self._httpd.daemon_threads = True
        self._loop = asyncio.new_event_loop()
        loop_thread = threading.Thread(
            target=self._loop.run_forever, name="ollama-api-loop", daemon=True
        )
        loop_thread.start()
        http_thread = threading.Thread(
            target=self._httpd.serve_forever, name="ollama-api-http", daemon=True
        )
        http_thread.start()
        self._threads = [loop_thread, http_thread]
        return self

    def wait(self) -> None:
        """Block until the server stops (Ctrl-C raises KeyboardInterrupt here)."""
        while self._httpd is not None and self._threads[1].is_alive():
            self._threads[1].join(timeout=0.5)

    def stop(self) -> None:
        if self.agents is not None and self._loop is not None:
            # The runs end on the loop, which must still turn for their containers to go.
            self.agents.cancel_all()
            if not self.agents.wait_idle(served.STOP_GRACE):
                log.warning("served runs still going on at stop: %d", self.agents.active)
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self._loop is not None:
            loop = self._loop
            asyncio.run_coroutine_threadsafe(self.engine.aclose(), loop).result(timeout=10)
            loop.call_soon_threadsafe(loop.stop)
            for thread in self._threads:
                thread.join(timeout=5)
            loop.close()
            self._loop = None

    def __enter__(self) -> OllamaServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # -- engine calls on the loop thread --------------------------------------------

    def call(self, coro: Any) -> Any:
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def iterate(
        self, make: Callable[[], AsyncIterator[StreamChunk]]
    ) -> Generator[StreamChunk, None, None]:
        """Drive an async iterator on the loop thread, yielding here; closing this
        iterator (client gone) cancels the producer, which stops generation."""
        assert self._loop is not None
        items: queue.Queue[Any] = queue.Queue()

        async def pump() -> None:
            try:
                async for item in make():
                    items.put(item)
            except BaseException as exc:
                items.put(exc)
            finally:
                items.put(_END)

        future: Future[None] = asyncio.run_coroutine_threadsafe(pump(), self._loop)
        try:
            while (item := items.get()) is not _END:
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            if not future.done():
                future.cancel()

    def resolve_model(self, requested: Any, *, use: bool = True) -> str:
        """The served name of ``requested`` (404 if unknown). ``use``: the request runs
        the model, so /api/ps lists it from now on (/api/show only looks)."""
        if not isinstance(requested, str) or not requested:
            raise BadRequest("model is required")
        name = _untag(requested)
        models = [m.name for m in self.call(self.engine.list_models())]
        # Ollama's own rule: a name without a tag means its ":latest".
        if models and _tag(requested) not in {_tag(m) for m in models}:
            raise ModelNotFound(f'model "{requested}" not found, try pulling it first')
        if use:
            self._loaded[name] = time.time()
        return name


def _gguf_metadata(engine: Engine, name: str) -> dict[str, Any]:
    """The GGUF metadata of model ``name`` when ``engine`` runs it from a file ({}
    otherwise: the engine is not llama.cpp, or the file cannot be read)."""
    from ..catalog import resolve_model_path
    from ..catalog._gguf import read_gguf_metadata
    from ..engines._llamacpp import LlamaCppEngine, LlamaCppPool

    inner = engine.engines.get(name) if isinstance(engine, LlamaCppPool) else engine
    if not isinstance(inner, LlamaCppEngine):
        return {}
    try:
        path = resolve_model_path(inner.model or name, inner.models_dir)
    except JarvisError:
        return {}
    return read_gguf_metadata(path)


def _beside_calls(generation: Generation) -> Generation:
    """``generation`` without the stray text a small model leaves beside its tool calls
    (a lone "{" of a call it began twice): text with no letter or digit says nothing."""
    text = generation.content
    if generation.tool_calls and text and not any(ch.isalnum() for ch in text):
        return replace(generation, content="")
    return generation


def _wants_json(value: Any) -> bool:
    """Ollama's ``format``: "json", or a JSON schema (answered as JSON, unchecked)."""
    if value in (None, ""):
        return False
    if value == "json" or isinstance(value, dict):
        return True
    raise BadRequest(f'format must be "json" or a JSON schema, not {str(value)[:40]!r}')


def _stop_at_calls(options: SamplingOptions, tools: Sequence[ToolSpec]) -> SamplingOptions:
    """With tools offered, generation stops once the reply holds its complete calls
    (``calls_end``): a model that writes one call a dozen times, or prose after its
    call, is stopped here, where the model runs; a client cannot stop it sooner, as
    text that may be a call is held back until the reply ends."""
    if not tools:
        return options
    names = [t.name for t in tools]
    return replace(options, stop_when=lambda text: calls_end(text, names))


class _Handler(BaseHTTPRequestHandler):
    api: OllamaServer
    protocol_version = "HTTP/1.1"
    server_version = "jarvis-ollama/" + VERSION
    # Headers and body go out in separate writes: with Nagle's algorithm the body
    # waits for the client's delayed ACK of the headers (up to 40 ms a response).
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s " + format, self.address_string(), *args)

    # -- plumbing -----------------------------------------------------------------

    def _send_json(self, status: int, body: Any, *, close: bool = False) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        if close:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)

    def _send_error(self, status: int, message: str, *, close: bool = False) -> None:
        """An error in the caller's dialect: OpenAI's ``{"error": {"message", "type",
        "code"}}`` under ``/v1/`` (its clients read nothing else), Ollama's
        ``{"error": "..."}`` elsewhere."""
        if self.path.startswith("/v1/"):
            self._send_json(status, openai_chat.error(status, message), close=close)
        else:
            self._send_json(status, {"error": message}, close=close)

    def _body_length(self) -> int:
        """The request's Content-Length, checked before a byte of the body is read."""
        if self.headers.get("Transfer-Encoding") is not None:
            raise _Refused(411, "send the request body with a Content-Length, not chunked")
        values = self.headers.get_all("Content-Length") or []
        if not values:
            return 0
        if len(set(values)) != 1 or not (values[0].isascii() and values[0].isdigit()):
            raise _Refused(400, f"invalid Content-Length {', '.join(values)[:40]!r}")
        length = int(values[0])
        if length > MAX_BODY:
            raise _Refused(413, f"request body of {length} bytes is over {MAX_BODY} bytes")
        return length

    def _body(self) -> dict[str, Any]:
        length = self._body_length()
        raw = self.rfile.read(length) if length else b""
        body = c.loads(raw) if raw else {}  # depth-bounded: no RecursionError
        if not isinstance(body, dict):
            raise BadRequest("request body must be a JSON object")
        self.api.observe(self.command, self.path.split("?", 1)[0], body)
        return body

    def _check_caller(self) -> None:
        """Refuse before anything else is read: a web page (Origin) or a rebound name
        (Host) must not reach the model; a bad length must not reach the reader."""
        for refusal in (self.api.allow.host_refusal(self.headers.get("Host")),
                        self.api.allow.origin_refusal(self.headers.get("Origin"))):  # fmt: skip
            if refusal is not None:
                raise _Refused(403, refusal)
        token = self.api.token
        if token is not None:
            auth = self.headers.get("Authorization") or ""
            given = auth[7:].strip() if auth[:7].lower() == "bearer " else ""
            if not hmac.compare_digest(given.encode(), token.encode()):
                raise _Refused(401, "missing or wrong token (Authorization: Bearer TOKEN)")
        self._body_length()

    def _dispatch(self, method: str) -> None:
        routes: dict[tuple[str, str], Callable[[], None]] = {
            ("GET", "/"): lambda: self._send_text("Ollama is running"),
            ("HEAD", "/"): lambda: self._send_text(""),
            ("GET", "/api/version"): lambda: self._send_json(200, {"version": VERSION}),
            ("GET", "/api/tags"): self._tags,
            ("GET", "/api/ps"): self._ps,
            ("POST", "/api/show"): self._show,
            ("POST", "/api/chat"): self._chat,
            ("POST", "/api/generate"): self._generate,
            ("GET", "/v1/models"): self._openai_models,
            ("POST", "/v1/chat/completions"): self._openai_chat,
        }
        path = self.path.split("?", 1)[0].rstrip("/") or "/"
        route = routes.get((method, path))
        try:
            self._check_caller()
            if route is None:
                if any(p == path for _, p in routes):
                    self._send_error(405, f"method {method} not allowed on {path}")
                else:
                    self._send_error(404, f"{path} is not supported by this server")
                return
            route()
        except _Refused as exc:
            log.info("refused %s %s from %s: %s", method, path, self.address_string(), exc)
            self.close_connection = True
            self._send_error(exc.status, str(exc), close=True)
        except BadRequest as exc:
            self._send_error(exc.status, str(exc))
        except (EngineError, JarvisError) as exc:
            self._send_error(_error_status(exc), str(exc))
        except (BrokenPipeError, ConnectionResetError):
            log.debug("client went away")
        except Exception as exc:  # the server must answer, whatever the engine did
            log.exception("internal error")
            self._send_error(500, f"internal error: {type(exc).__name__}: {exc}")

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_HEAD(self) -> None:
        self._dispatch("HEAD")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    def _send_text(self, text: str) -> None:
        data = text.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    # -- endpoints ----------------------------------------------------------------

    def _tags(self) -> None:
        models = self.api.call(self.api.engine.list_models())
        self._send_json(200, {"models": [_model_entry(m) for m in models]})

    def _ps(self) -> None:
        models = {m.name: m for m in self.api.call(self.api.engine.list_models())}
        running = []
        for name in self.api._loaded:
            info = models.get(name, ModelInfo(name))
            entry = _model_entry(info)
            entry.update({"expires_at": _now(), "size_vram": 0})
            running.append(entry)
        self._send_json(200, {"models": running})

    def _show(self) -> None:
        body = self._body()
        name = self.api.resolve_model(body.get("model") or body.get("name"), use=False)
        models = {m.name: m for m in self.api.call(self.api.engine.list_models())}
        info = models.get(name, ModelInfo(name))
        window = self.api.call(self.api.engine.context_length(name)) or info.context_length
        # A GGUF file says what the model is, as Ollama reports it: its architecture,
        # the context it was trained for (the window this server gives is num_ctx),
        # its chat template. Other engines: what they list.
        meta = _gguf_metadata(self.api.engine, name)
        arch = str(meta.get("general.architecture") or info.family or "llama")
        context = meta.get(f"{arch}.context_length") or window
        details = _model_entry(info)["details"]
        if meta:
            details.update(format="gguf", family=arch, families=[arch],
                           parameter_size=str(meta.get("general.size_label") or ""))  # fmt: skip
        self._send_json(
            200,
            {
                "modelfile": f"FROM {name}",
                "parameters": f"num_ctx {window}" if window else "",
                "template": str(meta.get("tokenizer.chat_template") or ""),
                "details": details,
                "model_info": {"general.architecture": arch, f"{arch}.context_length": context},
                "capabilities": ["completion", "tools"],
                "modified_at": _now(),
            },
        )

    def _stream_or_single(
        self, body: dict[str, Any], messages: list[Message], tools: list[ToolSpec], shape: str
    ) -> None:
        model = self.api.resolve_model(body.get("model"))
        options = _stop_at_calls(_parse_options(body.get("options")), tools)
        if _wants_json(body.get("format")):
            options = replace(options, json_format=True)
        engine = self.api.engine
        chunks = self.api.iterate(
            lambda: engine.stream(messages, model=model, tools=tools, options=options)
        )
        start = time.perf_counter_ns()
        stream = body.get("stream", True) is not False
        # The first chunk is awaited before any header goes out, so an engine that fails
        # at once produces a proper HTTP error status, not a 200 with an error line.
        first = next(chunks)
        if not stream:
            final = first
            for final in chunks:  # noqa: B007 - only the done chunk matters
                pass
            self._send_json(200, self._final(final, model, shape, start))
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/x-ndjson")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            for chunk in self._chain(first, chunks):
                line = (
                    self._final(chunk, model, shape, start, streamed=True)
                    if chunk.done
                    else self._partial(chunk, model, shape)
                )
                self._write_chunk(json.dumps(line).encode() + b"\n")
        except (BrokenPipeError, ConnectionResetError):
            chunks.close()
            return
        except (EngineError, JarvisError) as exc:
            self._write_chunk(json.dumps({"error": str(exc)}).encode() + b"\n")
        self._write_chunk(b"")

    @staticmethod
    def _chain(first: StreamChunk, rest: Iterator[StreamChunk]) -> Iterator[StreamChunk]:
        yield first
        yield from rest

    def _write_chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    @staticmethod
    def _partial(chunk: StreamChunk, model: str, shape: str) -> dict[str, Any]:
        base: dict[str, Any] = {"model": _tag(model), "created_at": _now(), "done": False}
        if shape == "chat":
            base["message"] = {"role": "assistant", "content": chunk.delta}
        else:
            base["response"] = chunk.delta
        return base

    @staticmethod
    def _final(
        chunk: StreamChunk, model: str, shape: str, start_ns: int, streamed: bool = False
    ) -> dict[str, Any]:
        g = chunk.generation
        if g is None:
            raise EngineResponseError("engine ended its stream without a result")
        g = _beside_calls(g)
        total = time.perf_counter_ns() - start_ns
        body: dict[str, Any] = {
            "model": _tag(model),
            "created_at": _now(),
            "done": True,
            "done_reason": "stop"
            if g.finish_reason.value == "tool_calls"
            else g.finish_reason.value,
            "total_duration": total,
            "load_duration": 0,
            "prompt_eval_count": g.usage.prompt_tokens,
            "prompt_eval_duration": 0,
            "eval_count": g.usage.completion_tokens,
            "eval_duration": total,
        }
        content = "" if streamed else g.content
        if shape == "chat":
            message: dict[str, Any] = {"role": "assistant", "content": content}
            if g.tool_calls:
                message["tool_calls"] = [
                    {"function": {"name": c.name, "arguments": c.arguments_dict()}}
                    for c in g.tool_calls
                ]
            body["message"] = message
        else:
            body["response"] = content
        return body

    def _chat(self) -> None:
        body = self._body()
        messages = _parse_messages(body.get("messages", []))
        tools = _parse_tools(body.get("tools"))
        if not messages:
            # Ollama answers an empty chat with a load-only reply.
            model = self.api.resolve_model(body.get("model"))
            self._send_json(
                200,
                {"model": _tag(model), "created_at": _now(), "message": {"role": "assistant", "content": ""},
                 "done": True, "done_reason": "load"},
            )  # fmt: skip
            return
        self._stream_or_single(body, messages, tools, "chat")

    def _generate(self) -> None:
        body = self._body()
        prompt = body.get("prompt", "")
        if not isinstance(prompt, str):
            raise BadRequest("prompt must be a string")
        if not prompt:
            model = self.api.resolve_model(body.get("model"))
            self._send_json(
                200,
                {"model": _tag(model), "created_at": _now(), "response": "", "done": True,
                 "done_reason": "load"},
            )  # fmt: skip
            return
        messages = []
        if isinstance(body.get("system"), str) and body["system"]:
            messages.append(Message.system(body["system"]))
        messages.append(Message.user(prompt))
        self._stream_or_single(body, messages, [], "generate")

    # -- OpenAI chat completions ----------------------------------------------------

    def _openai_models(self) -> None:
        models = self.api.call(self.api.engine.list_models())
        names = [m.name for m in models]
        if self.api.agents is not None:
            names += self.api.agents.model_names()
        self._send_json(200, openai_chat.models_body(names))

    def _openai_chat(self) -> None:
        # The translation is the gateway's OpenAI dialect: one copy for both servers.
        raw = self._body()
        if self.api.agents is not None and ServedAgents.serves(raw.get("model")):
            self._agent_chat(raw, self.api.agents)
            return
        chat = openai_chat.parse(raw, 1024)
        requested = chat.model or self.api.engine.default_model() or "default"
        model = self.api.resolve_model(requested)
        options = _stop_at_calls(chat.options, chat.tools)
        wanted = raw.get("response_format")
        if isinstance(wanted, dict) and wanted.get("type") in ("json_object", "json_schema"):
            options = replace(options, json_format=True)
        engine = self.api.engine
        chunks = self.api.iterate(
            lambda: engine.stream(chat.messages, model=model, tools=chat.tools, options=options)
        )
        first = next(chunks)  # fail with a status code before any header is sent
        if not chat.stream:
            final = first
            for final in chunks:  # noqa: B007 - only the done chunk matters
                pass
            if final.generation is None:
                raise EngineResponseError("engine ended its stream without a result")
            generation = _beside_calls(final.generation)
            self._send_json(200, openai_chat.response(generation, chat, model))
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        encoder = openai_chat.Stream(chat, model)
        try:
            self._write_chunk(encoder.start())
            for chunk in self._chain(first, chunks):
                if not chunk.done:
                    if chunk.delta:
                        self._write_chunk(encoder.delta(chunk.delta))
                    continue
                if chunk.generation is None:
                    raise EngineResponseError("engine ended its stream without a result")
                self._write_chunk(encoder.finish(chunk.generation))
        except (BrokenPipeError, ConnectionResetError):
            chunks.close()
            return
        except (EngineError, JarvisError) as exc:
            self._write_chunk(encoder.fail(_error_status(exc), str(exc)))
        self._write_chunk(b"")

    # -- agents and teams as models (jarvis serve) -----------------------------------

    def _agent_chat(self, raw: dict[str, Any], agents: ServedAgents) -> None:
        spec = agents.spec(raw)
        stream = c.flag(raw.get("stream"), "stream")
        options = c.opt_obj(raw.get("stream_options"), "stream_options")
        include_usage = c.flag(options.get("include_usage"), "include_usage")
        assert self.api._loop is not None
        run, outbox, future = agents.start(spec, self.api.engine, self.api._loop)
        sock = self.connection
        sock.settimeout(served.WRITE_TIMEOUT)  # a client that never reads ends its run
        try:
            self._drive_run(raw["model"], stream, include_usage, run, outbox, future)
        except (OSError, _ClientGone) as exc:  # broken pipe, reset, a blocked write
            self.close_connection = True
            log.info("served run cancelled: %s", exc or type(exc).__name__)
        finally:
            if not future.done():
                served.wait_out(run, future, "the client went away")
            with contextlib.suppress(OSError):
                sock.settimeout(None)

    def _drive_run(
        self,
        model: str,
        stream: bool,
        include_usage: bool,
        run: RunContext,
        outbox: served.Outbox,
        future: Future[RunOutcome],
    ) -> None:
        encoder = served.AgentStream(model, include_usage)
        events: list[dict[str, Any]] = []
        dropped = 0
        started = False
        begun = last = time.monotonic()
        while True:
            done = future.done()
            items = outbox.take(0 if done else served.POLL)
            if outbox.overflowed:
                raise _ClientGone("the client is not reading the answer")
            now = time.monotonic()
            if stream and not started and (items or now - begun > served.HEADER_WAIT):
                self._start_stream()
                self._write_chunk(encoder.start())
                started = True
            if stream and started:
                shown = [p for kind, p in items if kind == "event"]
                text = "".join(p for kind, p in items if kind == "delta")
                if shown:
                    self._write_chunk(encoder.events(shown))
                if text:
                    self._write_chunk(encoder.delta(text))
                if items:
                    last = now
                elif now - last > served.KEEPALIVE:
                    self._write_chunk(b": keep-alive\n\n")
                    last = now
            else:
                for kind, payload in items:
                    if kind != "event":
                        continue
                    if len(events) < served.MAX_EVENTS:
                        events.append(payload)
                    else:
                        dropped += 1
            if done:
                break
            if served.client_gone(self.connection):
                raise _ClientGone("the client went away")
        outcome = future.result()
        usage = run.budget.used.to_dict()
        summary = served.run_summary(outcome)
        failure = outcome.failure
        if failure is not None and not started:
            self._send_error(served.failure_status(failure.code), failure.message)
            return
        if not stream:
            jarvis: dict[str, Any] = {"events": events, "run": summary}
            if dropped:
                jarvis["events_dropped"] = dropped
            message = {"role": "assistant", "content": outcome.answer}
            self._send_json(
                200,
                {**encoder.base, "object": "chat.completion",
                 "choices": [{"index": 0, "message": message, "logprobs": None,
                              "finish_reason": "stop"}],
                 "usage": usage, "jarvis": jarvis},
            )  # fmt: skip
            return
        if failure is not None:
            self._write_chunk(encoder.fail(served.failure_status(failure.code), failure.message))
        else:
            if not outbox.streamed and outcome.answer:  # a team answers whole, not streamed
                self._write_chunk(encoder.delta(outcome.answer))
            self._write_chunk(encoder.finish(usage, summary))
        self._write_chunk(b"")

    def _start_stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
