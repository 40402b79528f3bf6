"""Any OpenAI-compatible chat server (llama.cpp's server, vLLM, LM Studio) by base URL."""

from __future__ import annotations

import contextlib
import json
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
    import httpx

__all__ = ["OpenAIEngine"]


def to_openai_message(message: Message) -> dict[str, object]:
    data: dict[str, object] = {"role": message.role.value, "content": message.content}
    if message.tool_calls:
        data["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in message.tool_calls
        ]
    if message.role is Role.TOOL:
        data["tool_call_id"] = message.tool_call_id or ""
        if message.name:
            data["name"] = message.name
    return data


@contextlib.contextmanager
def _translate(base_url: str) -> Iterator[None]:
    import httpx

    try:
        yield
    except httpx.ConnectError as exc:
        raise EngineUnavailable(
            f"cannot reach an OpenAI-compatible server at {base_url}: start it, or set"
            " engine.openai.base_url"
        ) from exc
    except httpx.TimeoutException as exc:
        raise EngineUnavailable(f"{base_url} did not answer in time ({exc})") from exc
    except httpx.HTTPStatusError as exc:
        body = exc.response.text[:500]
        if exc.response.status_code == 404 and "model" in body.lower():
            raise ModelNotFound(f"{base_url}: {body}") from exc
        raise EngineResponseError(
            f"{base_url} answered HTTP {exc.response.status_code}: {body}",
            exc.response.status_code,
        ) from exc
    except httpx.HTTPError as exc:
        raise EngineError(f"{base_url}: {exc}") from exc
    except (ValueError, KeyError, TypeError, IndexError) as exc:
        raise EngineResponseError(f"{base_url} sent a malformed reply: {exc!r}") from exc


def _complete(
    cutoff: Cutoff, delta: dict[str, Any], calls: dict[int, dict[str, str]], fed: set[int]
) -> bool:
    """Show one delta to ``cutoff``: its text, and each streamed call once its
    arguments are a whole JSON object. True once the reply is complete."""
    complete = bool(delta.get("content")) and cutoff.text(delta["content"])
    for index, slot in sorted(calls.items()):
        if index in fed or not slot["name"]:
            continue
        try:
            arguments = json.loads(slot["arguments"] or "{}")
        except ValueError:
            continue  # not whole yet
        if isinstance(arguments, dict):
            fed.add(index)
            complete = cutoff.call(ToolCall.from_arguments(slot["name"], arguments)) or complete
    return complete


class OpenAIEngine(Engine):
    name: ClassVar[str] = "openai"

    def __init__(
        self,
        base_url: str = "http://127.0.0.1:8000/v1",
        *,
        model: str = "",
        api_key: str | None = None,
        timeout: float = 300.0,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY", "")
        self.timeout = timeout
        self._client: httpx.AsyncClient | None = None
        # Without a configured model: the server's first listed model (asked for once),
        # then the model its replies say they came from.
        self._served: str | None = None

    @property
    def client(self) -> httpx.AsyncClient:
        if self._client is None:
            import httpx

            headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
            self._client = httpx.AsyncClient(
                base_url=self.base_url,
                headers=headers,
                timeout=httpx.Timeout(self.timeout, connect=2.0),
                verify=tls_verify(self.base_url),
            )
        return self._client

    def default_model(self) -> str:
        """The configured model; without one, the model the server said it used (""
        before the first call): what a run's outcome reports."""
        return self.model or self._served or ""

    def _note_served(self, asked: str, reported: object) -> None:
        # Only a reply to a request for the default says what the default is.
        if asked == self._served and isinstance(reported, str) and reported:
            self._served = reported

    async def _model(self, model: str) -> str:
        """The model to ask for: the caller's, the configured one, else the first the
        server lists (vLLM and jarvis's own server refuse a made-up name; llama.cpp's
        server ignores the field, and a server without /models gets "default")."""
        model = model or self.model
        if model:
            return model
        if self._served is None:
            try:
                models = await self.list_models()
            except (EngineResponseError, ModelNotFound):  # no /models there: keep going
                models = []
            self._served = models[0].name if models else "default"
        return self._served

    def _body(
        self,
        messages: Sequence[Message],
        model: str,
        tools: Sequence[ToolSpec],
        options: SamplingOptions,
        stream: bool,
    ) -> dict[str, object]:
        body: dict[str, object] = {
            "model": model,
            "messages": [to_openai_message(m) for m in messages],
            "stream": stream,
            **options.to_openai(),
        }
        if tools:
            body["tools"] = [t.to_openai() for t in tools]
        if stream:
            body["stream_options"] = {"include_usage": True}
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
        start = time.perf_counter()
        with _translate(self.base_url):
            response = await self.client.post(
                "/chat/completions", json=self._body(messages, model, tools, options, False)
            )
            response.raise_for_status()
            data = response.json()
            choice = data["choices"][0]
            message = choice["message"]
            calls = tuple(
                ToolCall(
                    name=c["function"]["name"],
                    arguments=c["function"].get("arguments") or "{}",
                    id=c.get("id") or ToolCall("x").id,
                )
                for c in message.get("tool_calls") or ()
            )
            usage = data.get("usage") or {}
            self._note_served(model, data.get("model"))
            return Generation(
                content=message.get("content") or "",
                tool_calls=calls,
                usage=Usage(usage.get("prompt_tokens", 0), usage.get("completion_tokens", 0)),
                finish_reason=FinishReason.TOOL_CALLS
                if calls
                else FinishReason.parse(choice.get("finish_reason")),
                model=data.get("model") or model,
                latency_s=time.perf_counter() - start,
            )

    async def stream(
        self,
        messages: Sequence[Message],
        *,
        model: str = "",
        tools: Sequence[ToolSpec] = (),
        options: SamplingOptions = DEFAULT_OPTIONS,
    ) -> AsyncIterator[StreamChunk]:
        model = await self._model(model)
        start = time.perf_counter()
        content: list[str] = []
        calls: dict[int, dict[str, str]] = {}
        usage = Usage()
        reason: str | None = None
        served_model = model
        cutoff = None if options.stop_when is None else Cutoff(options.stop_when)
        fed: set[int] = set()  # native calls shown to the cutoff
        with _translate(self.base_url):
            body = self._body(messages, model, tools, options, True)
            async with self.client.stream("POST", "/chat/completions", json=body) as response:
                if response.is_error:
                    await response.aread()
                    response.raise_for_status()
                async for line in response.aiter_lines():
                    if not line.startswith("data:"):
                        continue
                    payload = line[5:].strip()
                    if payload == "[DONE]":
                        break
                    data = json.loads(payload)
                    served_model = data.get("model") or served_model
                    if data.get("usage"):
                        u = data["usage"]
                        usage = Usage(u.get("prompt_tokens", 0), u.get("completion_tokens", 0))
                    for choice in data.get("choices") or ():
                        delta = choice.get("delta") or {}
                        reason = choice.get("finish_reason") or reason
                        if delta.get("content"):
                            content.append(delta["content"])
                            yield StreamChunk(delta=delta["content"])
                        for c in delta.get("tool_calls") or ():
                            slot = calls.setdefault(
                                c.get("index", 0), {"id": "", "name": "", "arguments": ""}
                            )
                            slot["id"] = c.get("id") or slot["id"]
                            fn = c.get("function") or {}
                            slot["name"] += fn.get("name") or ""
                            slot["arguments"] += fn.get("arguments") or ""
                        if cutoff is not None and _complete(cutoff, delta, calls, fed):
                            break
                    if cutoff is not None and cutoff.cut is not None:
                        # Leaving the block closes the response: the server sees its
                        # client gone and stops generating (llama.cpp's and jarvis's
                        # own servers do).
                        reason = "stop"
                        kept, native = cutoff.kept()
                        content = [kept]
                        calls = {i: calls[i] for i in sorted(fed)[: len(native)]}
                        usage = Usage(usage.prompt_tokens, cutoff.tokens)
                        break
        tool_calls = tuple(
            ToolCall(
                name=s["name"], arguments=s["arguments"] or "{}", id=s["id"] or ToolCall("x").id
            )
            for _, s in sorted(calls.items())
        )
        self._note_served(model, served_model)
        yield StreamChunk(
            done=True,
            generation=Generation(
                content="".join(content),
                tool_calls=tool_calls,
                usage=usage,
                finish_reason=FinishReason.TOOL_CALLS if tool_calls else FinishReason.parse(reason),
                model=served_model,
                latency_s=time.perf_counter() - start,
            ),
        )

    async def list_models(self) -> list[ModelInfo]:
        with _translate(self.base_url):
            response = await self.client.get("/models")
            response.raise_for_status()
            return [ModelInfo(name=str(m["id"])) for m in response.json().get("data", [])]

    async def health(self) -> bool:
        try:
            await self.list_models()
        except EngineError:
            return False
        return True

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None
