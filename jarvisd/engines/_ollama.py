"""Ollama, through the official ``ollama`` client."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import AsyncIterator, Iterator, Sequence
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
    import ollama

__all__ = ["OllamaEngine"]

DEFAULT_HOST = "http://127.0.0.1:11434"


@contextlib.contextmanager
def _translate(host: str, model: str) -> Iterator[None]:
    """Map ollama/httpx failures onto the jarvis tree, once."""
    import httpx
    import ollama

    try:
        yield
    except ollama.ResponseError as exc:
        if exc.status_code == 404 and "not found" in str(exc.error).lower():
            raise ModelNotFound(
                f"ollama at {host} has no model {model!r}: run `ollama pull {model}`"
            ) from exc
        detail = str(exc.error or "").strip() or "no error message (is it an Ollama server?)"
        raise EngineResponseError(
            f"ollama at {host}: {detail} (HTTP {exc.status_code})", exc.status_code
        ) from exc
    except (ConnectionError, httpx.ConnectError) as exc:
        raise EngineUnavailable(
            f"cannot reach Ollama at {host}: start it with `ollama serve`, set OLLAMA_HOST,"
            " or pick another engine with --engine"
        ) from exc
    except httpx.TimeoutException as exc:
        raise EngineUnavailable(f"ollama at {host} did not answer in time ({exc})") from exc
    except httpx.HTTPError as exc:
        raise EngineError(f"ollama at {host}: {exc}") from exc
    except (ValueError, KeyError, TypeError) as exc:
        raise EngineResponseError(f"ollama at {host} sent a malformed reply: {exc}") from exc


def to_ollama_message(message: Message) -> dict[str, Any]:
    data: dict[str, Any] = {"role": message.role.value, "content": message.content}
    if message.tool_calls:
        data["tool_calls"] = [
            {"function": {"name": c.name, "arguments": c.arguments_dict()}}
            for c in message.tool_calls
        ]
    if message.role is Role.TOOL and message.name:
        data["tool_name"] = message.name
    return data


def _options(options: SamplingOptions, num_ctx: int | None) -> dict[str, Any]:
    opts: dict[str, Any] = {"temperature": options.temperature, "num_predict": options.max_tokens}
    if options.top_p is not None:
        opts["top_p"] = options.top_p
    if options.seed is not None:
        opts["seed"] = options.seed
    if options.stop:
        opts["stop"] = list(options.stop)
    if num_ctx:
        opts["num_ctx"] = num_ctx
    return opts


def _generation(response: Any, model: str, latency: float) -> Generation:
    message = response.message
    calls = tuple(
        ToolCall.from_arguments(c.function.name, dict(c.function.arguments or {}))
        for c in (message.tool_calls or ())
    )
    reason = FinishReason.parse(response.done_reason)
    if calls:
        reason = FinishReason.TOOL_CALLS
    return Generation(
        content=message.content or "",
        tool_calls=calls,
        usage=Usage(response.prompt_eval_count or 0, response.eval_count or 0),
        finish_reason=reason,
        model=response.model or model,
        latency_s=latency,
    )


def _complete(cutoff: Cutoff, part: Any) -> bool:
    complete = bool(part.message.content) and cutoff.text(part.message.content)
    for c in part.message.tool_calls or ():
        call = ToolCall.from_arguments(c.function.name, dict(c.function.arguments or {}))
        complete = cutoff.call(call) or complete
    return complete and not part.done


def _cut(
    text: str, calls: tuple[ToolCall, ...], model: str, start: float, cutoff: Cutoff
) -> Generation:
    """The generation of a reply stopped at its cut: its prompt tokens are not known
    (Ollama counts them in the final part only), its generated ones are the parts read."""
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
        self._client: ollama.AsyncClient | None = None
        self._num_ctx: dict[str, int | None] = {}

    @property
    def client(self) -> ollama.AsyncClient:
        if self._client is None:
            import httpx
            import ollama

            self._client = ollama.AsyncClient(
                host=self.host,
                timeout=httpx.Timeout(self.timeout, connect=self.connect_timeout),
                verify=tls_verify(self.host),
            )
        return self._client

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
                shown = await self.client.show(model)
            info = shown.modelinfo or {}
            length = next((int(v) for k, v in info.items() if k.endswith(".context_length")), None)
            if length and self.max_context:
                length = min(length, self.max_context)  # the window we ask Ollama for
            self._num_ctx[model] = length
        return self._num_ctx[model]

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
        num_ctx = await self.context_length(model)
        start = time.perf_counter()
        with _translate(self.host, model):
            response = await self.client.chat(
                model=model,
                messages=[to_ollama_message(m) for m in messages],
                tools=[t.to_openai() for t in tools] or None,
                stream=False,
                options=_options(options, num_ctx),
            )
        return _generation(response, model, time.perf_counter() - start)

    async def stream(
        self,
        messages: Sequence[Message],
        *,
        model: str = "",
        tools: Sequence[ToolSpec] = (),
        options: SamplingOptions = DEFAULT_OPTIONS,
    ) -> AsyncIterator[StreamChunk]:
        model = await self._model(model)
        num_ctx = await self.context_length(model)
        start = time.perf_counter()
        content: list[str] = []
        calls: list[Any] = []
        with _translate(self.host, model):
            parts = await self.client.chat(
                model=model,
                messages=[to_ollama_message(m) for m in messages],
                tools=[t.to_openai() for t in tools] or None,
                stream=True,
                options=_options(options, num_ctx),
            )
            cutoff = None if options.stop_when is None else Cutoff(options.stop_when)
            async for part in parts:
                if part.message.content:
                    content.append(part.message.content)
                    yield StreamChunk(delta=part.message.content)
                calls.extend(part.message.tool_calls or ())
                if cutoff is not None and _complete(cutoff, part):
                    break
                if part.done:
                    part.message.content = "".join(content)
                    part.message.tool_calls = calls or None
                    generation = _generation(part, model, time.perf_counter() - start)
                    yield StreamChunk(done=True, generation=generation)
                    return
            if cutoff is not None and cutoff.cut is not None:
                # Closing the response is what stops Ollama: it cancels a request
                # whose client has gone.
                closer = getattr(parts, "aclose", None)  # typed as a plain iterator
                if closer is not None:
                    await closer()
                text, native = cutoff.kept()
                yield StreamChunk(done=True, generation=_cut(text, native, model, start, cutoff))
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
            listed = await self.client.list()
        return [
            ModelInfo(
                name=m.model or "",
                size=m.size or 0,
                family=(m.details.family if m.details else "") or "",
            )
            for m in listed.models
        ]

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client._client.aclose()
            self._client = None
