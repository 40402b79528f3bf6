"""Pass-through to a cloud vendor with a key the host holds (``[credentials.NAME]``).

When a run's engine is a :class:`~jarvisd.engines.CredentialEngine`, its gateway does
not translate: an agent's request in the vendor's own dialect goes to ``upstream`` as
sent, with three changes made on the host:

* the key: the sandbox's ``Authorization`` / ``x-api-key`` (the run's token, already
  checked) never leave; the real key, read from the host's environment when the run
  started, is set in the header the vendor reads. Only the headers a dialect needs
  are forwarded (never hop-by-hop ones, never cookies);
* the budget: the call reserves the run's ledger first (refused once the token, call or
  wall budget is spent, which stops the run), its output cap (``max_tokens`` by the
  dialect's name) is lowered to what the budget has left, and it settles to the usage
  the vendor reports (a prompt is known only from that usage: a budget can be passed
  by one call's prompt, never by its output). A vendor that reports none is charged
  the sizes sent and relayed, four bytes a token;
* the reply: bounded in bytes (a whole body, each SSE line, a whole stream), with any
  occurrence of the key blanked out, and cut, with the dialect's error event, when the
  run is cancelled or the usage reported mid-stream passes the budget.

Only the inference paths of the credential's dialect are served; redirects are not
followed (a custom key header would follow them to any host).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from .._config import CredentialConfig, credential_dialect
from .._errors import EngineUnavailable, UsageError
from .._events import EventType
from .._messages import Usage
from .._runcontext import BudgetExceeded, Hold, RunContext, RunStopped
from ..http import Request, Response
from . import _anthropic, _gemini, _openai_chat
from ._common import BadRequest, error_status, loads, new_id, sse

if TYPE_CHECKING:
    import httpx

__all__ = ["Upstream", "agent_family"]

log = logging.getLogger(__name__)

#: A whole non-streamed reply from the vendor, at most.
MAX_RESPONSE = 16 * 1024 * 1024
#: One line of a streamed reply (one SSE ``data:``), at most.
MAX_LINE = 4 * 1024 * 1024
#: A whole streamed reply, at most.
MAX_STREAM = 256 * 1024 * 1024
#: Where a key goes, per dialect family (the header the vendor reads it from).
_KEY_HEADER = {"anthropic": "x-api-key", "openai": "authorization", "gemini": "x-goog-api-key"}
#: The request headers forwarded, per family; everything else stays in the sandbox.
_FORWARD = {
    "anthropic": ("anthropic-version", "anthropic-beta"),
    "openai": ("openai-beta",),
    "gemini": (),
}
#: The reply headers handed back (rate limits and ids help an agent back off and report).
_BACK = ("retry-after", "request-id", "x-request-id", "anthropic-ratelimit-requests-remaining")
#: The agents' dialects (``AgentDefinition.dialect``) and the family each belongs to.
_FAMILY = {
    "anthropic": "anthropic",
    "openai-responses": "openai",
    "openai-chat": "openai",
    "gemini": "gemini",
}
_GEMINI_MODEL = re.compile(r"/v1beta/models/([A-Za-z0-9._-]{1,128}):([A-Za-z]{1,40})")


def agent_family(dialect: str) -> str:
    """The dialect family (a credential's ``dialect``) an agent's dialect belongs to."""
    return _FAMILY.get(dialect, dialect)


@dataclass(frozen=True, slots=True)
class _Call:
    """What one request is, once its path and body are checked."""

    path: str  # the upstream path (fixed strings, or the checked gemini model path)
    stream: bool
    infer: bool  # counted on the ledger (count_tokens and model lists are not)
    max_field: tuple[str, ...] = ()  # where its output cap is, in its body
    has_body: bool = True


@dataclass(slots=True)
class _Seen:
    """The usage a vendor reported so far (its counts are cumulative: the largest wins)."""

    prompt: int = 0
    completion: int = 0
    reported: bool = False
    #: Bytes sent, and bytes of reply relayed: an estimate when nothing is reported.
    sent: int = 0
    relayed: int = 0

    def update(self, family: str, data: object) -> None:
        usage = _usage_object(family, data)
        if not isinstance(usage, dict):
            return
        if family == "gemini":
            prompt = _int(usage.get("promptTokenCount"))
            completion = _int(usage.get("candidatesTokenCount")) + _int(
                usage.get("thoughtsTokenCount")
            )
        elif family == "anthropic":
            prompt = sum(
                _int(usage.get(k))
                for k in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
            )
            completion = _int(usage.get("output_tokens"))
        else:
            prompt = _int(usage.get("input_tokens")) or _int(usage.get("prompt_tokens"))
            completion = _int(usage.get("output_tokens")) or _int(usage.get("completion_tokens"))
        self.prompt = max(self.prompt, prompt)
        self.completion = max(self.completion, completion)
        self.reported = True

    def usage(self, most_completion: int) -> Usage:
        """What the vendor reported; from a vendor that reported nothing, the sizes
        (four bytes a token, the reply's count no more than the call may produce)."""
        if self.reported:
            return Usage(self.prompt, self.completion)
        return Usage(self.sent // 4, min(self.relayed // 4, most_completion))


def _usage_object(family: str, data: object) -> object:
    if not isinstance(data, dict):
        return None
    if family == "gemini":
        return data.get("usageMetadata")
    usage = data.get("usage")
    if usage is None:  # Anthropic's message_start, Responses' response.completed
        inner = data.get("message") if family == "anthropic" else data.get("response")
        usage = inner.get("usage") if isinstance(inner, dict) else None
    return usage


def _int(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return 0
    return min(value, 1 << 40)


@dataclass(frozen=True, slots=True)
class Upstream:
    """One run's pass-through: the vendor's base URL, its dialect family, and the key
    (never in a repr, a log line or an error message)."""

    name: str
    url: str
    family: str
    key: str = field(repr=False)
    timeout: float = 600.0

    @classmethod
    def from_credential(
        cls, name: str, credential: CredentialConfig, environ: Mapping[str, str] | None = None
    ) -> Upstream:
        """The credential with its key read now from ``environ`` (this process's)."""
        environ = os.environ if environ is None else environ
        key = environ.get(credential.env, "")
        if not key.strip():
            raise UsageError(
                f"[credentials.{name}] env names ${credential.env}, which is not set in "
                "jarvis's environment (the daemon's, for tasks): export it there"
            )
        key = key.strip()
        if not (key.isascii() and key.isprintable()):
            # A header carries it: a line break would start another header.
            raise UsageError(
                f"${credential.env} holds characters an API key cannot (printable ASCII only)"
            )
        return cls(
            name,
            credential.upstream.rstrip("/"),
            credential_dialect(credential),
            key,
            credential.timeout,
        )

    # -- requests -------------------------------------------------------------------

    def _call(self, request: Request) -> _Call:
        method, path, family = request.method, request.path, self.family
        if method == "GET" and path == ("/v1beta/models" if family == "gemini" else "/v1/models"):
            return _Call(path, stream=False, infer=False, has_body=False)
        if method == "POST":
            if family == "anthropic":
                if path == "/v1/messages":
                    return _Call(path, stream=False, infer=True, max_field=("max_tokens",))
                if path == "/v1/messages/count_tokens":
                    return _Call(path, stream=False, infer=False)
            if family == "openai":
                if path == "/v1/responses":
                    return _Call(path, stream=False, infer=True, max_field=("max_output_tokens",))
                if path == "/v1/chat/completions":
                    return _Call(
                        path,
                        stream=False,
                        infer=True,
                        max_field=("max_completion_tokens", "max_tokens"),
                    )
            match = _GEMINI_MODEL.fullmatch(path) if family == "gemini" else None
            if match is not None and match[2] in ("generateContent", "streamGenerateContent"):
                return _Call(
                    path,
                    stream=match[2] == "streamGenerateContent",
                    infer=True,
                    max_field=("generationConfig", "maxOutputTokens"),
                )
            if match is not None and match[2] == "countTokens":
                return _Call(path, stream=False, infer=False)
        raise BadRequest(
            f"no such endpoint here: {method} {path[:200]} (this run's credential "
            f"{self.name!r} serves the {family} API)",
            404,
        )

    def _headers(self, request: Request) -> dict[str, str]:
        # identity: the reply is relayed and counted as it comes, never re-encoded.
        headers = {
            "content-type": "application/json",
            "accept": "application/json",
            "accept-encoding": "identity",
        }
        accept = request.headers.get("accept", "")
        if accept == "text/event-stream":
            headers["accept"] = accept
        for name in _FORWARD[self.family]:
            value = request.headers.get(name)
            if value is not None:
                headers[name] = value
        key_header = _KEY_HEADER[self.family]
        headers[key_header] = f"Bearer {self.key}" if key_header == "authorization" else self.key
        return headers

    def _target(self, call: _Call, request: Request) -> str:
        query = {k: v for k, v in request.query.items() if k.lower() != "key"}
        if call.stream and self.family == "gemini":
            query["alt"] = "sse"
        return self.url + call.path + ("?" + urlencode(query) if query else "")

    def _parse(self, call: _Call, request: Request) -> dict[str, Any]:
        """The request's JSON body (bounded in depth), once; {} for a GET."""
        if not call.has_body:
            return {}
        body = loads(request.body)
        if not isinstance(body, dict):
            raise BadRequest("request body must be an object")
        return body

    def _body(
        self, call: _Call, body: dict[str, Any], hold: Hold | None
    ) -> tuple[bytes, bool, str]:
        """The body to send (its output cap lowered to the hold's), whether the reply
        streams, and the model asked for."""
        if not call.has_body:
            return b"", False, ""
        stream = call.stream or body.get("stream") is True
        if stream and self.family == "openai" and call.path == "/v1/chat/completions":
            # Without it a streamed chat reply carries no usage to count.
            options = body.get("stream_options")
            body["stream_options"] = {
                **(options if isinstance(options, dict) else {}),
                "include_usage": True,
            }
        if hold is not None and call.max_field:
            _cap(body, call.max_field, hold.completion_tokens, hold.budget.max_tokens is not None)
        model = body.get("model")
        if not isinstance(model, str):
            match = _GEMINI_MODEL.fullmatch(call.path)
            model = match[1] if match else ""
        return json.dumps(body, ensure_ascii=False).encode(), stream, model[:200]

    # -- serving ------------------------------------------------------------------------

    async def forward(
        self,
        request: Request,
        run: RunContext,
        client: httpx.AsyncClient,
        on_call: Callable[[], None] = lambda: None,
    ) -> Response:
        """Serve one admitted request of ``run`` from the vendor (``on_call``: before
        each model call, which may stop the run: the turn cap)."""
        call = self._call(request)
        if call.infer:
            on_call()
        parsed = self._parse(call, request)
        hold = _reserve(run, call, parsed) if call.infer else None
        try:
            body, stream, model = self._body(call, parsed, hold)
        except BaseException:
            if hold is not None:
                hold.release()
            raise
        started = time.perf_counter()
        if hold is not None:
            run.bus.publish(
                EventType.INFERENCE_START,
                engine=f"upstream:{self.name}",
                model=model,
                messages=_messages(parsed),
            )
        seen = _Seen(sent=len(body))
        try:
            reply = await _race(run, self._open(client, call, request, body))
        except BaseException as exc:
            self._end(run, hold, seen, model, started, exc)
            raise
        if not stream or reply.status_code >= 400 or not _is_sse(reply):
            try:
                data = await _race(run, _read(reply))
            except BaseException as exc:
                self._end(run, hold, seen, model, started, exc)
                raise
            finally:
                await reply.aclose()
            seen.relayed = len(data)
            if hold is not None:
                try:
                    seen.update(self.family, json.loads(data))
                except ValueError:
                    pass
            self._end(run, hold, seen, model, started, None)
            return Response(
                reply.status_code,
                self._scrub(data),
                reply.headers.get("content-type", "application/json"),
                headers=_back(reply),
            )
        return Response(
            reply.status_code,
            content_type="text/event-stream",
            headers=_back(reply),
            stream=self._relay(run, reply, hold, seen, model, started, call.path),
        )

    async def _open(
        self, client: httpx.AsyncClient, call: _Call, request: Request, body: bytes
    ) -> httpx.Response:
        import httpx

        sent = client.build_request(
            request.method,
            self._target(call, request),
            headers=self._headers(request),
            content=body if call.has_body else None,
        )
        try:
            return await client.send(sent, stream=True, follow_redirects=False)
        except httpx.TimeoutException:
            raise EngineUnavailable(f"the upstream of credential {self.name!r} timed out") from None
        except httpx.HTTPError as exc:
            # The exception's text names the URL, never a header: the key stays out.
            raise EngineUnavailable(
                f"cannot reach the upstream of credential {self.name!r} ({self.url}): "
                f"{type(exc).__name__}"
            ) from None

    async def _relay(
        self,
        run: RunContext,
        reply: httpx.Response,
        hold: Hold | None,
        seen: _Seen,
        model: str,
        started: float,
        path: str,
    ) -> AsyncIterator[bytes]:
        """The vendor's SSE, line by line as it comes, counted and bounded."""
        error: BaseException | None = None
        pending, total = b"", 0
        chunks = aiter(reply.aiter_raw())
        try:
            while True:
                try:
                    chunk = await _race(run, anext(chunks))
                except StopAsyncIteration:
                    break
                total += len(chunk)
                if total > MAX_STREAM:
                    raise EngineUnavailable(f"the upstream's reply passed {MAX_STREAM} bytes")
                whole, newline, pending = (pending + chunk).rpartition(b"\n")
                lines = whole.split(b"\n") if newline else []
                if len(pending) > MAX_LINE or any(len(line) > MAX_LINE for line in lines):
                    raise EngineUnavailable(f"the upstream sent a line over {MAX_LINE} bytes")
                if not newline:
                    continue
                seen.relayed += len(whole) + 1
                if hold is not None:
                    for line in lines:
                        self._count(line, seen)
                    _check_budget(run, seen)
                yield self._scrub(whole + b"\n")
            if pending:
                yield self._scrub(pending)
        except GeneratorExit:  # the agent went away: nothing to tell it
            error = ConnectionResetError("the agent closed the connection")
            raise
        except (EngineUnavailable, RunStopped) as exc:
            error = exc
            yield self._fail(exc, path)
        except BaseException as exc:
            error = exc
            raise
        finally:
            self._end(run, hold, seen, model, started, error)
            await reply.aclose()

    def _count(self, line: bytes, seen: _Seen) -> None:
        if not line.startswith(b"data:") or b"sage" not in line:  # usage, usageMetadata
            return
        try:
            seen.update(self.family, json.loads(line[5:]))
        except ValueError:
            pass

    def _fail(self, exc: BaseException, path: str) -> bytes:
        """The dialect's own error event, ending a stream the gateway cut (after a
        blank line: whatever event was half sent is ended first)."""
        status, message = error_status(exc), str(exc)
        if self.family == "anthropic":
            event = sse(_anthropic.error(status, message), "error")
        elif self.family == "gemini" or path == "/v1/chat/completions":
            event = sse(
                (_gemini.error if self.family == "gemini" else _openai_chat.error)(status, message)
            )
        else:
            failed = {
                "id": new_id("resp_"),
                "object": "response",
                "status": "failed",
                "error": _openai_chat.error(status, message)["error"],
            }
            event = sse({"type": "response.failed", "response": failed}, "response.failed")
        return b"\n" + event

    def _scrub(self, data: bytes) -> bytes:
        """``data`` with the key blanked out: a vendor that echoes it (an error naming
        the key it refused) must not hand it to the sandbox."""
        return data.replace(self.key.encode(), b"[key withheld by jarvis]")

    def _end(
        self,
        run: RunContext,
        hold: Hold | None,
        seen: _Seen,
        model: str,
        started: float,
        error: BaseException | None,
    ) -> None:
        if hold is None or not hold.open:
            return
        unreached = isinstance(error, EngineUnavailable) and not seen.relayed
        usage = seen.usage(hold.completion_tokens)
        if unreached and not seen.reported:
            hold.release()  # never reached the vendor, or nothing came back: nothing spent
        else:
            hold.settle(usage)
        data: dict[str, Any] = {
            "engine": f"upstream:{self.name}",
            "model": model,
            "latency_s": time.perf_counter() - started,
            "prompt_tokens": usage.prompt_tokens,
            "completion_tokens": usage.completion_tokens,
        }
        if error is not None:
            data["error"] = f"{type(error).__name__}: {error}"
        else:
            data["tool_calls"] = 0
        run.bus.publish(EventType.INFERENCE_END, **data)


def _cap(body: dict[str, Any], where: tuple[str, ...], left: int, budgeted: bool) -> None:
    """Lower the body's output cap (``where``: its key, or a nested key) to ``left``;
    set it when absent only under a token budget."""
    if where[0] == "generationConfig":
        config = body.get("generationConfig")
        config = dict(config) if isinstance(config, dict) else {}
        _cap(config, where[1:], left, budgeted)
        if config:
            body["generationConfig"] = config
        return
    present = [k for k in where if k in body]
    for key in present:
        value = body[key]
        if isinstance(value, bool) or not isinstance(value, int) or value > left:
            body[key] = left
    if not present and budgeted:
        body[where[0]] = left


def _reserve(run: RunContext, call: _Call, body: dict[str, Any]) -> Hold:
    """Hold the call on the run's ledger: its output up to the request's own cap (a
    prompt is not known before the vendor counts it). A refusal stops the run."""
    run.cancel.raise_if_cancelled()
    try:
        return run.budget.reserve(0, _requested(call, body))
    except BudgetExceeded as exc:
        run.cancel.cancel(str(exc), stop=BudgetExceeded)
        raise


def _requested(call: _Call, body: dict[str, Any]) -> int:
    """The output cap the body asks for (a generous default when it names none)."""
    node: object = body
    keys = call.max_field
    if keys and keys[0] == "generationConfig":
        node, keys = body.get("generationConfig"), keys[1:]
    for key in keys:
        value = node.get(key) if isinstance(node, dict) else None
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return 1 << 20


def _check_budget(run: RunContext, seen: _Seen) -> None:
    """Stop the run when the usage reported so far passes its token budget."""
    budget = run.budget
    if budget.max_tokens is None:
        return
    # Before the vendor reports, only the reply so far (a request's size is no count).
    spent = seen.prompt + seen.completion if seen.reported else seen.relayed // 4
    if budget.used.total_tokens + spent > budget.max_tokens:
        reason = f"token budget of {budget.max_tokens} spent (reported by the upstream)"
        run.cancel.cancel(reason, stop=BudgetExceeded)
        raise BudgetExceeded(reason)


async def _race(run: RunContext, work: Any) -> Any:
    """``work``, or the run's stop reason raised as soon as it is cancelled."""
    run.cancel.raise_if_cancelled()
    task = asyncio.ensure_future(work)
    stop = asyncio.ensure_future(run.cancel.wait())
    try:
        await asyncio.wait((task, stop), return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not task.done():
            task.cancel()
        stop.cancel()
    if task.done() and not task.cancelled():
        return task.result()
    with_stop = run.cancel.error()
    raise with_stop


async def _read(reply: httpx.Response) -> bytes:
    parts, total = [], 0
    async for chunk in reply.aiter_raw():
        total += len(chunk)
        if total > MAX_RESPONSE:
            raise EngineUnavailable(f"the upstream's reply is over {MAX_RESPONSE} bytes")
        parts.append(chunk)
    return b"".join(parts)


def _messages(body: dict[str, Any]) -> int:
    """How many messages a request carries, whatever its dialect calls them."""
    for key in ("messages", "input", "contents"):
        value = body.get(key)
        if isinstance(value, list):
            return len(value)
    return 1 if isinstance(body.get("input"), str) else 0


def _is_sse(reply: httpx.Response) -> bool:
    return str(reply.headers.get("content-type", "")).startswith("text/event-stream")


def _back(reply: httpx.Response) -> list[tuple[str, str]]:
    return [(name, reply.headers[name][:200]) for name in _BACK if name in reply.headers]
