"""Ollama, spoken directly over its HTTP API (``/api/chat``, ``/api/show``, ``/api/tags``).

The API is small and stable, so the engine talks it with httpx like the OpenAI engine
does, rather than through the ``ollama`` package: that package builds a client with a
CA bundle and imports pydantic when it is imported, which costs a one-shot
`jarvis ask` more than everything jarvis itself does.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import time
import urllib.parse
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from .._errors import EngineError, EngineResponseError, EngineUnavailable, ModelNotFound
from .._messages import (
    FinishReason,
    Generation,
    Message,
    Role,
    SamplingOptions,
    StreamChunk,
    ToolCall,
    ToolSpec,
    Usage,
)
from ._base import DEFAULT_OPTIONS, Engine, ModelInfo, tls_verify
from ._cutoff import Cutoff, streamed_generation

if TYPE_CHECKING:
    import httpx

__all__ = ["OllamaEngine"]

DEFAULT_HOST = "http://127.0.0.1:11434"
#: One NDJSON line of a streamed reply (a token or two, or the final summary) is a few
#: hundred bytes; a server that sends more without a newline is not an Ollama server.
MAX_LINE = 4 * 1024 * 1024


def base_url(host: str) -> str:
    """The URL the ``ollama`` client would use for ``host`` (OLLAMA_HOST's forms:
    ``h``, ``h:p``, ``http://h``, ``https://h:p/path``, IPv6), so a value that works
    with Ollama's own tools works here."""
    port = 11434
    scheme, _, hostport = host.partition("://")
    if not hostport:
        scheme, hostport = "http", host
    elif scheme == "http":
        port = 80
    elif scheme == "https":
        port = 443
    split = urllib.parse.urlsplit(f"{scheme}://{hostport}")
    name = split.hostname or "127.0.0.1"
    port = split.port or port
    with contextlib.suppress(ValueError):
        if isinstance(ipaddress.ip_address(name), ipaddress.IPv6Address):
            name = f"[{name}]"
    path = split.path.strip("/")
    return f"{scheme}://{name}:{port}" + (f"/{path}" if path else "")


class _Refused(Exception):
    """Ollama answered with an error: its status (-1 once a stream began) and text."""

    def __init__(self, status: int, error: str) -> None:
        super().__init__(error)
        self.status = status
        self.error = error


@contextlib.contextmanager
def _translate(host: str, model: str) -> Iterator[None]:
    """Map HTTP and protocol failures onto the jarvis tree, once."""
    import httpx

    try:
        yield
    except _Refused as exc:
        if exc.status == 404 and "not found" in exc.error.lower():
            raise ModelNotFound(
                f"ollama at {host} has no model {model!r}: run `ollama pull {model}`"
            ) from exc
        detail = exc.error.strip() or "no error message (is it an Ollama server?)"
        where = f" (HTTP {exc.status})" if exc.status > 0 else ""
        raise EngineResponseError(f"ollama at {host}: {detail}{where}", exc.status) from exc
    except httpx.ConnectError as exc:
        raise EngineUnavailable(
            f"cannot reach Ollama at {host}: start it with `ollama serve`, set OLLAMA_HOST,"
            " or pick another engine with --engine"
        ) from exc
    except httpx.TimeoutException as exc:
        raise EngineUnavailable(f"ollama at {host} did not answer in time ({exc})") from exc
    except httpx.HTTPError as exc:
        raise EngineError(f"ollama at {host}: {exc}") from exc
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise EngineResponseError(f"ollama at {host} sent a malformed reply: {exc!r}") from exc


def _error_text(body: bytes) -> str:
    """The ``error`` of an Ollama error body, else the body itself (a proxy's page)."""
    text = body.decode("utf-8", "replace")
    with contextlib.suppress(ValueError):
        data = json.loads(text)
        if isinstance(data, dict) and "error" in data:
            return str(data["error"])
    return text[:500]


def _object(line: bytes | str) -> dict[str, Any]:
    data = json.loads(line)
    if not isinstance(data, dict):
        raise TypeError(f"expected a JSON object, got {type(data).__name__}")
    if "error" in data:
        raise _Refused(-1, str(data["error"]))
    return data


def to_ollama_message(message: Message) -> dict[str, object]:
    data: dict[str, object] = {"role": message.role.value, "content": message.content}
    if message.tool_calls:
        data["tool_calls"] = [
            {"function": {"name": c.name, "arguments": c.arguments_dict()}}
            for c in message.tool_calls
        ]
    if message.role is Role.TOOL and message.name:
        data["tool_name"] = message.name
    return data


def _options(options: SamplingOptions, num_ctx: int | None) -> dict[str, object]:
    opts: dict[str, object] = {
        "temperature": options.temperature,
        "num_predict": options.max_tokens,
    }
    if options.top_p is not None:
        opts["top_p"] = options.top_p
    if options.seed is not None:
        opts["seed"] = options.seed
    if options.stop:
        opts["stop"] = list(options.stop)
    if num_ctx:
        opts["num_ctx"] = num_ctx
    return opts


def _calls(message: Mapping[str, Any]) -> list[ToolCall]:
    calls = []
    for call in message.get("tool_calls") or ():
        function = call["function"]
        calls.append(ToolCall.from_arguments(str(function["name"]), function.get("arguments")))
    return calls


def _count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _generation(
    final: Mapping[str, Any], content: str, calls: Sequence[ToolCall], model: str, latency: float
) -> Generation:
    reason = FinishReason.parse(final.get("done_reason"))
    if calls:
        reason = FinishReason.TOOL_CALLS
    return Generation(
        content=content,
        tool_calls=tuple(calls),
        usage=Usage(_count(final.get("prompt_eval_count")), _count(final.get("eval_count"))),
        finish_reason=reason,
        model=str(final.get("model") or model),
        latency_s=latency,
    )


async def _lines(response: httpx.Response) -> AsyncIterator[bytes]:
    """The NDJSON lines of a streamed reply, each bounded by ``MAX_LINE`` bytes."""
    pending = b""
    async for data in response.aiter_bytes():
        pending += data
        *lines, pending = pending.split(b"\n")
        for line in lines:
            if line.strip():
                yield line
        if len(pending) > MAX_LINE:
            raise ValueError(f"a streamed line longer than {MAX_LINE} bytes")
    if pending.strip():
        yield pending


def _cut(cutoff: Cutoff, model: str, start: float) -> Generation:
    """The generation of a reply stopped at its cut: its prompt tokens are not known
    (Ollama counts them in the final part only), its generated ones are the parts read."""
    text, calls = cutoff.kept()
    return Generation(
        content=text,
        tool_calls=calls,
        usage=Usage(0, cutoff.tokens),
        finish_reason=FinishReason.TOOL_CALLS if calls else FinishReason.STOP,
        model=model,
        latency_s=time.perf_counter() - start,
    )


class OllamaEngine(Engine):
    name: ClassVar[str] = "ollama"

    def __init__(
        self,
        host: str = "",
        *,
        model: str = "",
        timeout: float = 300.0,
        connect_timeout: float = 2.0,
        max_context: int = 32768,
    ) -> None:
        self.host = host or os.environ.get("OLLAMA_HOST") or DEFAULT_HOST
        if "://" not in self.host:
            self.host = "http://" + self.host
        self.model = model
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.max_context = max_context
        self._client: httpx.AsyncClient | None = None
        self._num_ctx: dict[str, int | None] = {}

    @property
    def client(self) -> httpx.AsyncClient:
        if self._client is None:
            import httpx

            url = base_url(self.host)
            headers = {"Content-Type": "application/json", "Accept": "application/json"}
            if key := os.environ.get("OLLAMA_API_KEY"):  # Ollama's hosted models
                headers["Authorization"] = f"Bearer {key}"
            self._client = httpx.AsyncClient(
                base_url=url,
                headers=headers,
                timeout=httpx.Timeout(self.timeout, connect=self.connect_timeout),
                follow_redirects=True,
                verify=tls_verify(url),
            )
        return self._client

    async def _post(self, path: str, body: Mapping[str, object]) -> dict[str, Any]:
        response = await self.client.post(path, json=body)
        if response.status_code >= 400:
            raise _Refused(response.status_code, _error_text(response.content))
        return _object(response.content)

    def default_model(self) -> str:
        return self.model

    async def _model(self, model: str) -> str:
        model = model or self.model
        if model:
            return model
        models = await self.list_models()
        if not models:
            raise ModelNotFound(f"ollama at {self.host} has no models: run `ollama pull MODEL`")
        return models[0].name

    async def context_length(self, model: str = "") -> int | None:
        model = await self._model(model)
        if model not in self._num_ctx:
            with _translate(self.host, model):
                shown = await self._post("/api/show", {"model": model})
                info = shown.get("model_info") or shown.get("modelinfo") or {}
                length = next(
                    (int(v) for k, v in info.items() if k.endswith(".context_length")), None
                )
            if length and self.max_context:
                length = min(length, self.max_context)  # the window we ask Ollama for
            self._num_ctx[model] = length
        return self._num_ctx[model]

    async def _chat_body(
        self,
        messages: Sequence[Message],
        model: str,
        tools: Sequence[ToolSpec],
        options: SamplingOptions,
        stream: bool,
    ) -> dict[str, object]:
        body: dict[str, object] = {
            "model": model,
            "messages": [to_ollama_message(m) for m in messages],
            "stream": stream,
            "options": _options(options, await self.context_length(model)),
        }
        if tools:
            body["tools"] = [t.to_openai() for t in tools]
        if options.json_format:
            body["format"] = "json"
        return body

    async def generate(
        self,
        messages: Sequence[Message],
        *,
        model: str = "",
        tools: Sequence[ToolSpec] = (),
        options: SamplingOptions = DEFAULT_OPTIONS,
    ) -> Generation:
        if options.stop_when is not None:  # a one-shot reply cannot be stopped part way
            return await streamed_generation(
                self.stream(messages, model=model, tools=tools, options=options)
            )
        model = await self._model(model)
        body = await self._chat_body(messages, model, tools, options, stream=False)
        start = time.perf_counter()
        with _translate(self.host, model):
            reply = await self._post("/api/chat", body)
            message = reply["message"]
            content, calls = str(message.get("content") or ""), _calls(message)
        return _generation(reply, content, calls, model, time.perf_counter() - start)

    async def stream(
        self,
        messages: Sequence[Message],
        *,
        model: str = "",
        tools: Sequence[ToolSpec] = (),
        options: SamplingOptions = DEFAULT_OPTIONS,
    ) -> AsyncIterator[StreamChunk]:
        model = await self._model(model)
        body = await self._chat_body(messages, model, tools, options, stream=True)
        start = time.perf_counter()
        content: list[str] = []
        calls: list[ToolCall] = []
        cutoff = None if options.stop_when is None else Cutoff(options.stop_when)
        with _translate(self.host, model):
            async with self.client.stream("POST", "/api/chat", json=body) as response:
                if response.status_code >= 400:
                    raise _Refused(response.status_code, _error_text(await response.aread()))
                async for line in _lines(response):
                    part = _object(line)
                    message = part.get("message") or {}
                    if delta := str(message.get("content") or ""):
                        content.append(delta)
                        yield StreamChunk(delta=delta)
                    new_calls = _calls(message)
                    calls.extend(new_calls)
                    if cutoff is not None and not part.get("done"):
                        complete = bool(delta) and cutoff.text(delta)
                        for call in new_calls:
                            complete = cutoff.call(call) or complete
                        if complete:
                            break
                    if part.get("done"):
                        latency = time.perf_counter() - start
                        generation = _generation(part, "".join(content), calls, model, latency)
                        yield StreamChunk(done=True, generation=generation)
                        return
            # Leaving the block closes the response: Ollama stops a request whose
            # client has gone.
        if cutoff is not None and cutoff.cut is not None:
            yield StreamChunk(done=True, generation=_cut(cutoff, model, start))
            return
        raise EngineResponseError(f"ollama at {self.host} ended the stream without done")

    async def health(self) -> bool:
        try:
            await self.list_models()
        except EngineError:
            return False
        return True

    async def list_models(self) -> list[ModelInfo]:
        with _translate(self.host, self.model):
            response = await self.client.get("/api/tags")
            if response.status_code >= 400:
                raise _Refused(response.status_code, _error_text(response.content))
            return [
                ModelInfo(
                    name=str(m.get("model") or m.get("name") or ""),
                    size=_count(m.get("size")),
                    family=str((m.get("details") or {}).get("family") or ""),
                )
                for m in _object(response.content).get("models") or ()
            ]

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None
