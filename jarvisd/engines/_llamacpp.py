"""The embedded default: llama-cpp-python in process, on a verified catalog model.

llama.cpp is synchronous and not thread-safe, so each engine owns one model and one
lock, and generation runs in a worker thread that checks a stop flag between tokens:
cancelling the awaiting task stops the model within a token.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import time
from collections.abc import AsyncIterator, Callable, Generator, Sequence
from pathlib import Path
from typing import Any, ClassVar, Protocol

from .._errors import EngineResponseError, EngineUnavailable, ModelFileError
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
from .._toolcalls import recover_tool_calls
from ._base import DEFAULT_OPTIONS, Engine, ModelInfo
from ._cutoff import Cutoff
from ._prefixstates import PrefixStates
from ._window import grown_window, kv_bytes_per_token, memory_available, no_room, requested_tokens

__all__ = ["LlamaCppEngine", "llama_cpp_available"]

log = logging.getLogger(__name__)

_DONE = object()


class _Llama(Protocol):
    """What this engine uses of a ``llama_cpp.Llama`` (the package ships no types). Its
    chunks are OpenAI-shaped JSON from the library: read as such, a wire edge."""

    def create_chat_completion(self, **kwargs: object) -> Generator[dict[str, Any], None, None]: ...

    def n_ctx_train(self) -> int: ...

    def tokenize(self, text: bytes, add_bos: bool = True, special: bool = False) -> list[int]: ...

    def close(self) -> None: ...


# Characters that can open a tool call written as text: a JSON object, a ``` fence, a
# <tool_call> tag.
_CALL_START = ("{", "`", "<")


def llama_cpp_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("llama_cpp") is not None


def _file_size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def _prefix_budget() -> int:
    """Bytes of saved prompt caches (``_prefixstates``): a quarter of the memory free
    at load, at most 1 GiB (an 8,000-token prompt of a 1.5B model is some 230 MB)."""
    return min(1 << 30, memory_available() // 4)


def _to_chat(message: Message) -> dict[str, object]:
    data: dict[str, object] = {"role": message.role.value, "content": message.content}
    if message.tool_calls:
        data["tool_calls"] = [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": c.arguments_dict()},
            }
            for c in message.tool_calls
        ]
    if message.role is Role.TOOL:
        data["tool_call_id"] = message.tool_call_id or ""
        data["name"] = message.name or ""
    return data


class LlamaCppEngine(Engine):
    name: ClassVar[str] = "llamacpp"

    def __init__(
        self,
        model: str = "",
        *,
        n_ctx: int = 4096,
        n_threads: int = 0,
        chat_format: str = "",
        models_dir: Path | None = None,
        flash_attn: bool = True,
    ) -> None:
        self.model = model  # as configured: a catalog name, a .gguf path, or "" (choose)
        # Flash attention reads a long prompt faster on the CPU: 6,380 tokens of
        # Qwen2.5-Coder-1.5B took 149.6 s against 223.1 s without (2 cores, load 3),
        # 3,180 of 0.5B 109 s against 174 s (alternated), with the same greedy replies
        # (0.5B and 1.5B, a tool call, a question, code). llama.cpp's own
        # default is "auto" (on where supported); llama-cpp-python asks for off.
        self.flash_attn = flash_attn
        self.n_ctx = n_ctx
        self.n_threads = n_threads or (os.cpu_count() or 1)
        self.chat_format = chat_format or None
        self.models_dir = models_dir
        self._llama: _Llama | None = None
        self._chosen = model
        self._load_lock = threading.Lock()
        self._run_lock = asyncio.Lock()
        self._generating = threading.Lock()
        self._stops: set[threading.Event] = set()  # one per generation not yet ended
        self.prefix_states: PrefixStates | None = None  # the loaded model's saved caches

    def default_model(self) -> str:
        """The configured model; with none, the strongest catalog model present and
        verified, chosen once (from file metadata and sidecars: nothing is hashed)."""
        if not self._chosen:
            from ..catalog import strongest_model

            self._chosen = strongest_model(self.models_dir).name
        return self._chosen

    def _check_model(self, model: str) -> None:
        own = self.default_model()
        if model and model != own and Path(model).name != Path(own).name:
            raise EngineResponseError(
                f"the embedded engine has {own!r} loaded, not {model!r}; "
                f"set engine.llamacpp.model or pass --model to `jarvis ask`",
                404,
            )

    def load(self) -> _Llama:
        """Load (once) and return the llama_cpp.Llama instance. Blocking."""
        with self._load_lock:
            if self._llama is not None:
                return self._llama
            from ..catalog import resolve_model_path

            path = resolve_model_path(self.default_model(), self.models_dir)
            try:
                from ._llama_import import import_llama_cpp

                llama_cpp = import_llama_cpp()
            except ImportError as exc:
                raise EngineUnavailable(
                    "the embedded engine needs llama-cpp-python: run `make setup` (it builds"
                    " and caches the wheel) or `pip install 'jarvisd[llama]'`"
                ) from exc
            try:
                self._llama = llama_cpp.Llama(
                    model_path=str(path),
                    n_ctx=self.n_ctx,
                    n_threads=self.n_threads,
                    chat_format=self.chat_format,
                    flash_attn=self.flash_attn,
                    verbose=False,
                )
            except (ValueError, RuntimeError) as exc:
                raise ModelFileError(f"llama.cpp could not load {path}: {exc}") from exc
            # Conversations taking turns on the model keep their prompt's cache.
            self.prefix_states = PrefixStates(self._llama, _prefix_budget()).install()
            return self._llama

    def _run(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec],
        options: SamplingOptions,
        emit: Callable[[str], None],
        stop: threading.Event,
    ) -> Generation:
        """Blocking generation; calls ``emit(text)`` for each piece of text."""
        llama = self.load()
        start = time.perf_counter()
        kwargs: dict[str, object] = {
            "messages": [_to_chat(m) for m in messages],
            "stream": True,
            **options.to_openai(),
        }
        if tools:
            kwargs["tools"] = [t.to_openai() for t in tools]
        pieces: list[str] = []
        reason: str | None = None
        tokens = 0
        cutoff = None if options.stop_when is None else Cutoff(options.stop_when)
        try:
            chunks = llama.create_chat_completion(**kwargs)
            for chunk in chunks:
                if stop.is_set():
                    reason = "cancelled"
                    with contextlib.suppress(Exception):
                        chunks.close()
                    break
                choice = chunk["choices"][0]
                text = choice.get("delta", {}).get("content") or ""
                if text:
                    tokens += 1
                    pieces.append(text)
                    emit(text)
                    if cutoff is not None and cutoff.text(text):
                        # Closing the generator ends llama.cpp's sampling loop: no
                        # token is generated past the complete reply.
                        with contextlib.suppress(Exception):
                            chunks.close()
                        reason = "stop"
                        break
                reason = choice.get("finish_reason") or reason
        except ValueError as exc:
            # llama.cpp raises ValueError when the prompt exceeds the context window:
            # the window grows when the model and memory allow (``_window``), once.
            requested = requested_tokens(str(exc))
            if requested is None or pieces:
                raise EngineResponseError(f"llama.cpp: {exc}", 400) from exc
            if not self._grow(llama, requested + (options.max_tokens or 0)):
                raise EngineResponseError(no_room(requested, self.n_ctx), 400) from exc
            return self._run(messages, tools, options, emit, stop)
        content = "".join(pieces) if cutoff is None else cutoff.kept()[0]
        calls: tuple[ToolCall, ...] = ()
        if tools:
            found, rest = recover_tool_calls(content, [t.name for t in tools])
            if found:
                calls, content = tuple(found), rest
        total = int(getattr(llama, "n_tokens", 0) or 0)
        return Generation(
            content=content,
            tool_calls=calls,
            usage=Usage(prompt_tokens=max(total - tokens, 0), completion_tokens=tokens),
            finish_reason=FinishReason.TOOL_CALLS if calls else FinishReason.parse(reason),
            model=self.default_model(),
            latency_s=time.perf_counter() - start,
        )

    def _grow(self, llama: _Llama, needed: int) -> bool:
        """Reload the model with a window of ``needed`` tokens or more, if it was
        trained for them and memory allows; False when it cannot grow. Called with
        ``_generating`` held: nothing else uses the model meanwhile."""
        from ..catalog import CATALOG

        # The catalog knows each model's real limit (by name, or by its file's name).
        model = self.default_model()
        trained = next(
            (
                e.context_length
                for e in CATALOG
                if model in (e.name, e.filename) or Path(model).name == e.filename
            ),
            0,
        )
        with contextlib.suppress(Exception):
            trained = trained or int(llama.n_ctx_train())
        size = grown_window(
            self.n_ctx,
            needed,
            trained,
            kv_bytes_per_token(getattr(llama, "metadata", {}) or {}),
            memory_available(),
        )
        if size is None:
            return False
        log.warning(
            "the context window of %s grows from %d to %d tokens for a request of %d",
            self.default_model(),
            self.n_ctx,
            size,
            needed,
        )
        with self._load_lock:
            self._llama = None
            self.n_ctx = size
        with contextlib.suppress(Exception):
            llama.close()
        self.load()
        return True

    async def stream(
        self,
        messages: Sequence[Message],
        *,
        model: str = "",
        tools: Sequence[ToolSpec] = (),
        options: SamplingOptions = DEFAULT_OPTIONS,
    ) -> AsyncIterator[StreamChunk]:
        self._check_model(model)
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Any] = asyncio.Queue()
        stop = threading.Event()
        self._stops.add(stop)

        def emit(text: str) -> None:
            loop.call_soon_threadsafe(queue.put_nowait, text)

        def work() -> Generation:
            try:
                # The asyncio lock orders requests; this one is what keeps two threads
                # out of llama.cpp at once (that crashes it): a request cancelled
                # twice stops waiting for its thread, and the next one must not start
                # until that thread has seen ``stop`` and left.
                with self._generating:
                    return self._run(messages, tools, options, emit, stop)
            finally:
                self._stops.discard(stop)
                loop.call_soon_threadsafe(queue.put_nowait, _DONE)

        # With tools offered, text that may begin a call written into content (JSON,
        # a fence, a tag: see _toolcalls) is held back until the end, as Ollama does:
        # a recovered call then reaches streaming callers only as a tool call.
        streamed: list[str] = []
        held: list[str] | None = None
        async with self._run_lock:
            future = loop.run_in_executor(None, work)
            try:
                while (item := await queue.get()) is not _DONE:
                    if held is None and tools and any(c in item for c in _CALL_START):
                        held = []
                    if held is not None:
                        held.append(item)
                        continue
                    streamed.append(item)
                    yield StreamChunk(delta=item)
                generation = await future
            finally:
                stop.set()
                if not future.done():
                    await asyncio.shield(future)
        if held and not generation.tool_calls:
            yield StreamChunk(delta="".join(held))
        elif held:
            # What is left once the calls are cut out, less what already went out.
            lead = "".join(streamed).lstrip()
            if generation.content.startswith(lead) and generation.content[len(lead) :]:
                yield StreamChunk(delta=generation.content[len(lead) :])
        yield StreamChunk(done=True, generation=generation)

    async def generate(
        self,
        messages: Sequence[Message],
        *,
        model: str = "",
        tools: Sequence[ToolSpec] = (),
        options: SamplingOptions = DEFAULT_OPTIONS,
    ) -> Generation:
        result: Generation | None = None
        async for chunk in self.stream(messages, model=model, tools=tools, options=options):
            if chunk.done:
                result = chunk.generation
        assert result is not None  # stream always ends with a done chunk
        return result

    async def health(self) -> bool:
        if not llama_cpp_available():
            return False
        try:
            await asyncio.to_thread(self.load)
        except (ModelFileError, EngineUnavailable):
            return False
        return True

    async def context_length(self, model: str = "") -> int | None:
        return self.n_ctx

    def count_tokens(self, text: str, model: str = "") -> int | None:
        # Only once loaded (loading takes seconds; the first call of a run can do with
        # the byte bound), and only while no generation runs: llama.cpp does not promise
        # that tokenizing is safe beside a decode in another thread, and None (the
        # caller's byte bound) costs a looser reservation, never a crash.
        llama = self._llama
        if llama is None or not self._generating.acquire(blocking=False):
            return None
        try:
            data = text.encode("utf-8", "surrogatepass")
            return len(llama.tokenize(data, add_bos=False, special=False))
        except (RuntimeError, ValueError, UnicodeError):
            return None
        finally:
            self._generating.release()

    async def list_models(self) -> list[ModelInfo]:
        from ..catalog import model_status

        infos = []
        for status in model_status(self.models_dir):
            if status.present:
                infos.append(
                    ModelInfo(
                        name=status.entry.name,
                        size=status.entry.size,
                        context_length=status.entry.context_length,
                        family="gguf",
                        details=status.entry.description,
                    )
                )
        if self.model.endswith(".gguf"):
            infos.append(ModelInfo(self.model, size=_file_size(self.model), family="gguf"))
        return infos

    async def reserve_context(self, tokens: int) -> None:
        if tokens <= self.n_ctx:
            return

        def grow() -> None:
            with self._generating:  # as _grow requires: nothing else uses the model
                if tokens > self.n_ctx and not self._grow(self.load(), tokens):
                    log.info(
                        "the context window of %s stays at %d tokens (%d asked)",
                        self.default_model(),
                        self.n_ctx,
                        tokens,
                    )

        await asyncio.to_thread(grow)

    async def aclose(self) -> None:
        # A generation still running in its thread (a request cancelled on the way out)
        # is told to stop, and the model is freed only once it has: freeing it under a
        # running decode crashes the process.
        for stop in tuple(self._stops):
            stop.set()
        await asyncio.to_thread(self._generating.acquire)
        try:
            with self._load_lock:
                llama, self._llama = self._llama, None
                self.prefix_states = None  # its saved caches go with the model
            if llama is not None:
                with contextlib.suppress(Exception):
                    llama.close()
        finally:
            self._generating.release()


class LlamaCppPool(Engine):
    """Several local models behind one engine, loaded on first use, one at a time
    (2 cores and a few GB do not hold more): what ``jarvis serve-model`` serves."""

    name: ClassVar[str] = "llamacpp"

    def __init__(self, models: Sequence[str], *, n_ctx: int = 4096, n_threads: int = 0) -> None:
        if not models:
            raise ValueError("LlamaCppPool needs at least one model")
        self.engines = {
            Path(m).name if m.endswith(".gguf") else m: LlamaCppEngine(
                m, n_ctx=n_ctx, n_threads=n_threads
            )
            for m in models
        }
        self.names = list(self.engines)
        self._switch = asyncio.Lock()

    def default_model(self) -> str:
        return self.names[0]

    async def _engine(self, model: str) -> LlamaCppEngine:
        name = model or self.names[0]
        engine = self.engines.get(name)
        if engine is None:
            raise EngineResponseError(f'model "{name}" not found, try pulling it first', 404)
        async with self._switch:
            for other_name, other in self.engines.items():
                if other_name != name:
                    await other.aclose()
        return engine

    async def generate(
        self,
        messages: Sequence[Message],
        *,
        model: str = "",
        tools: Sequence[ToolSpec] = (),
        options: SamplingOptions = DEFAULT_OPTIONS,
    ) -> Generation:
        engine = await self._engine(model)
        return await engine.generate(messages, tools=tools, options=options)

    async def stream(
        self,
        messages: Sequence[Message],
        *,
        model: str = "",
        tools: Sequence[ToolSpec] = (),
        options: SamplingOptions = DEFAULT_OPTIONS,
    ) -> AsyncIterator[StreamChunk]:
        engine = await self._engine(model)
        async for chunk in engine.stream(messages, tools=tools, options=options):
            yield chunk

    async def list_models(self) -> list[ModelInfo]:
        from ..catalog import get_entry

        infos = []
        for name, engine in self.engines.items():
            if engine.model.endswith(".gguf"):
                infos.append(
                    ModelInfo(
                        name,
                        size=_file_size(engine.model),
                        context_length=engine.n_ctx,
                        family="llama",
                    )
                )
            else:
                entry = get_entry(name)
                infos.append(
                    ModelInfo(
                        name,
                        size=entry.size,
                        context_length=engine.n_ctx,
                        family="llama",
                        details=entry.description,
                    )
                )
        return infos

    async def context_length(self, model: str = "") -> int | None:
        return (await self._engine(model)).n_ctx if model in self.engines or not model else None

    def count_tokens(self, text: str, model: str = "") -> int | None:
        engine = self.engines.get(model or self.names[0])
        return None if engine is None else engine.count_tokens(text)

    async def health(self) -> bool:
        return await self.engines[self.names[0]].health()

    async def aclose(self) -> None:
        for engine in self.engines.values():
            await engine.aclose()
