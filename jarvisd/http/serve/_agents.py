"""Agents and teams served as models: ``agent:NAME`` and ``team:NAME`` on the OpenAI
chat endpoint of ``jarvis serve`` (the same server as ``jarvis serve-model``).

A request for such a model is one run, as ``jarvis ask`` would make it
(:func:`~jarvisd.runs.run_spec`, on the server's engine), not one model call:

* **The task.** The last message must be the user's: it is the task. System (and
  developer) messages and the earlier turns are put before it in the task's text, as
  "Instructions from the client" and "The conversation so far"; the agent keeps its own
  system prompt, which its tools depend on. Client ``tools`` are refused (400): the
  agent's tools run on the server, never on the client.
* **Budgets.** ``max_tokens`` (or ``max_completion_tokens``) is the most tokens of
  each model reply; ``temperature`` is the run's. ``metadata`` may carry
  ``jarvis_max_tokens_total``, ``jarvis_max_calls``, ``jarvis_max_tool_calls``,
  ``jarvis_max_turns`` (positive integers) and ``jarvis_max_wall`` (seconds), as
  strings (OpenAI's metadata values are strings) or numbers. Other ``jarvis_`` keys
  and bad values are a 400; keys without the prefix are the client's and ignored. A
  client only ever lowers a cap the server's config sets, never raises it.
* **The answer.** Streamed (``"stream": true``) as ``chat.completion.chunk`` events
  whose joined ``content`` is the answer, or one ``chat.completion``. ``usage`` is the
  whole run's (every model call, nested agents included). What the run did (tool calls
  with their results, a team's members, budget warnings) is in a ``jarvis`` field that
  OpenAI clients ignore: ``{"jarvis": {"events": [...]}}`` on chunks with an empty
  delta, and all of them on the final object; never in the answer.
* **Load.** At most ``MAX_RUNS`` runs at once; one more is answered 429.
* **Cancel.** A client that disconnects cancels the run through its token, and with it
  its containers; so does one that stops reading (its unsent output is bounded by
  ``MAX_PENDING`` bytes, a write blocked for ``WRITE_TIMEOUT`` seconds ends it).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import math
import threading
import time
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..._errors import ModelNotFound, UsageError
from ..._events import Event, EventType
from ..._messages import Message, Role
from ...gateway import _common as c
from ...gateway import _openai_chat as openai_chat
from ...gateway._common import BadRequest

if TYPE_CHECKING:
    from ..._config import Config
    from ..._runcontext import RunContext
    from ...engines import Engine
    from ...runs import AgentSpec, RunOutcome

__all__ = ["DEFAULT_AGENTS", "ServedAgents", "task_text"]

log = logging.getLogger(__name__)

#: Served when ``--agents`` names none: jarvis's own agents, no external ones.
DEFAULT_AGENTS = ("simple", "orchestrator", "react", "rlm")
#: Bytes of a run's output waiting for a client that does not read; past it, the run
#: is cancelled (memory stays bounded whatever the client does).
MAX_PENDING = 1024 * 1024
#: Seconds one write may block on a client that does not read before it counts as gone.
WRITE_TIMEOUT = 30.0
#: Seconds a streamed reply waits for the run's first output before its headers go out
#: (a run that fails at once still gets a proper status).
HEADER_WAIT = 1.0
#: Seconds between SSE comments while a run is silent (and checks that the client is there).
KEEPALIVE = 10.0
#: How often a streaming handler looks at its run between outputs.
POLL = 0.2
#: Seconds a cancelled run has to end (its containers to go) before its task is cancelled.
STOP_GRACE = 60.0
#: Runs a server carries at once; one more is answered 429 (clients retry it later).
MAX_RUNS = 8
#: Characters of the task built from the messages.
MAX_TASK_CHARS = 1024 * 1024
#: Bytes of one event in the ``jarvis.events`` field; a longer one is cut.
MAX_EVENT_BYTES = 4096
#: Events kept for a non-streamed reply (the rest counted in ``events_dropped``).
MAX_EVENTS = 256

#: The events a client sees: what the run did, not its inference.
SHOWN_EVENTS = frozenset(
    {
        EventType.TOOL_CALL_START,
        EventType.TOOL_CALL_END,
        EventType.ROUTE_CHOSEN,
        EventType.MEMBER_START,
        EventType.MEMBER_END,
        EventType.ROUND,
        EventType.HANDOFF,
        EventType.STEP,
        EventType.BUDGET_WARNING,
        EventType.AGENT_PLAN,
        EventType.PERMISSION,
        EventType.NET_CONNECT,
    }
)

#: metadata key -> (AgentSpec field, type); the config's cap of the same name bounds it.
METADATA_KEYS: dict[str, tuple[str, type]] = {
    "jarvis_max_tokens_total": ("max_tokens_total", int),
    "jarvis_max_calls": ("max_calls", int),
    "jarvis_max_tool_calls": ("max_tool_calls", int),
    "jarvis_max_turns": ("max_turns", int),
    "jarvis_max_wall": ("max_wall", float),
}

_ROLE_NAMES = {Role.USER: "user", Role.ASSISTANT: "assistant", Role.TOOL: "tool"}


def task_text(messages: Sequence[Message]) -> str:
    """The task a chat is for an agent: its last (user) message, after the client's
    instructions and the earlier turns when there are any."""
    if not messages or messages[-1].role is not Role.USER:
        raise BadRequest("the last message must be the user's: it is the agent's task")
    last = messages[-1].content.strip()
    if not last:
        raise BadRequest("the last user message is empty")
    system = [m.content.strip() for m in messages if m.role is Role.SYSTEM and m.content.strip()]
    turns = []
    for m in messages[:-1]:
        if m.role is Role.SYSTEM:
            continue
        who = _ROLE_NAMES.get(m.role, m.role.value)
        if m.role is Role.TOOL and m.name:
            who = f"tool {m.name}"
        text = m.content.strip()
        calls = "; ".join(f"called {call.name}({call.arguments})" for call in m.tool_calls)
        turns.append(f"{who}: {' '.join(p for p in (text, calls) if p)}")
    parts = []
    if system:
        parts.append("Instructions from the client:\n" + "\n\n".join(system))
    if turns:
        parts.append("The conversation so far:\n" + "\n".join(turns))
    text = last if not parts else "\n\n".join([*parts, "The current request:\n" + last])
    if len(text) > MAX_TASK_CHARS:
        raise BadRequest(f"the task is over {MAX_TASK_CHARS} characters", 413)
    return text


def _metadata(raw: object, config: Config) -> dict[str, Any]:
    """The budgets ``metadata`` asks for, checked and bounded by the config's caps."""
    budgets: dict[str, Any] = {}
    for key, value in c.opt_obj(raw, "metadata").items():
        if not key.startswith("jarvis_"):
            continue  # the client's own tags
        if key not in METADATA_KEYS:
            raise BadRequest(
                f"metadata.{key} is not a jarvis budget (known: {', '.join(METADATA_KEYS)})"
            )
        name, kind = METADATA_KEYS[key]
        number = _number(value, f"metadata.{key}", kind)
        ceiling = getattr(config.agent, name, 0) or None
        budgets[name] = number if ceiling is None else min(number, ceiling)
    return budgets


def _number(value: object, what: str, kind: type) -> int | float:
    if isinstance(value, str) and len(value) <= 32:
        try:
            value = int(value) if kind is int else float(value)
        except ValueError:
            raise BadRequest(f"{what} must be a positive {kind.__name__}") from None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BadRequest(f"{what} must be a positive {kind.__name__}")
    if not math.isfinite(value) or value <= 0:
        raise BadRequest(f"{what} must be a positive {kind.__name__}")
    if kind is int:
        if isinstance(value, float) and not value.is_integer():
            raise BadRequest(f"{what} must be a positive int")
        return min(int(value), 2**31)
    return float(value)


def _bounded_event(event: Event) -> dict[str, Any]:
    """An event for the client, at most ``MAX_EVENT_BYTES`` of JSON."""
    shown = {"type": event.type.value, "timestamp": event.timestamp, "data": dict(event.data)}
    text = json.dumps(shown, ensure_ascii=False, default=str)
    if len(text.encode()) <= MAX_EVENT_BYTES:
        plain: dict[str, Any] = json.loads(text)  # JSON values only, whatever data held
        return plain
    data = {}
    for key, value in event.data.items():
        value_text = value if isinstance(value, str) else json.dumps(value, default=str)
        data[str(key)[:64]] = value_text[:400] + ("..." if len(value_text) > 400 else "")
        if len(json.dumps(data, ensure_ascii=False).encode()) > MAX_EVENT_BYTES - 200:
            data.popitem()
            break
    return {**shown, "data": data, "truncated": True}


class Outbox:
    """What a run has produced that its handler has not written yet: text and events,
    at most ``MAX_PENDING`` bytes. Filled and emptied on the server's loop (filling
    never blocks); past the bound the run is cancelled."""

    def __init__(self, run: RunContext) -> None:
        self.run = run
        self.items: deque[tuple[str, Any]] = deque()
        self.pending = 0
        self.overflowed = False
        self.streamed = False  # whether any of the answer came as text
        self._ready = asyncio.Event()

    def _put(self, kind: str, payload: Any, size: int) -> None:
        if self.overflowed:
            return
        if self.pending + size > MAX_PENDING:
            self.overflowed = True
            self.items.clear()
            self.pending = 0
        else:
            self.items.append((kind, payload))
            self.pending += size
        self._ready.set()
        if self.overflowed:
            self.run.cancel.cancel("the client is not reading the answer")

    def delta(self, text: str) -> None:
        if text:
            self.streamed = True
            self._put("delta", text, len(text.encode()))

    def event(self, event: Event) -> None:
        if event.type in SHOWN_EVENTS:
            shown = _bounded_event(event)
            self._put("event", shown, MAX_EVENT_BYTES)

    def wake(self) -> None:
        self._ready.set()

    async def take(self, wait: float) -> list[tuple[str, Any]]:
        """What is there, waiting up to ``wait`` seconds for something (or a wake)."""
        if not self.items and wait > 0:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait):
                    await self._ready.wait()
        self._ready.clear()
        items = list(self.items)
        self.items.clear()
        self.pending = 0
        return items


@dataclass
class ServedAgents:
    """Which agents and teams a server offers as models, and how it runs them."""

    config: Config
    agents: tuple[str, ...] = DEFAULT_AGENTS
    #: team name -> the team file's TOML text.
    teams: Mapping[str, str] = field(default_factory=dict)
    #: Tools given to the agents that take tools.
    tools: tuple[str, ...] = ()
    #: Run every served agent in a network-disabled container (``jarvis ask --sandbox``).
    sandbox: bool = False
    _active: dict[int, RunContext] = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @classmethod
    def load(
        cls,
        config: Config,
        agents: Iterable[str] = (),
        teams_dir: str | Path | None = None,
        *,
        tools: Iterable[str] = (),
        sandbox: bool = False,
    ) -> ServedAgents:
        """Checked at start: every agent known, every ``*.toml`` of ``teams_dir`` a team."""
        from ...runs import AgentSpec, validate_spec

        names = tuple(dict.fromkeys(a.strip() for a in agents if a.strip())) or DEFAULT_AGENTS
        tools = tuple(t.strip() for t in tools if t.strip())
        for name in names:
            spec = AgentSpec(input="-", agent=name, isolation="sandbox" if sandbox else "default")
            validate_spec(spec, config)
        teams: dict[str, str] = {}
        if teams_dir is not None:
            teams = _read_teams(Path(teams_dir).expanduser())
        return cls(config, names, teams, tools, sandbox)

    def model_names(self) -> list[str]:
        return [f"agent:{a}" for a in self.agents] + [f"team:{t}" for t in sorted(self.teams)]

    @staticmethod
    def serves(model: object) -> bool:
        return isinstance(model, str) and model.startswith(("agent:", "team:"))

    def spec(self, body: Mapping[str, Any]) -> AgentSpec:
        """The run a chat request asks for (BadRequest, or ModelNotFound: 404)."""
        from ...runs import AgentSpec

        model = c.string(body.get("model"), "model")
        kind, _, name = model.partition(":")
        if kind == "agent" and name in self.agents:
            agent, team = name, None
        elif kind == "team" and name in self.teams:
            agent, team = "", self.teams[name]
        else:
            raise ModelNotFound(f"model {model!r} is not served here (see /v1/models)")
        chat = openai_chat.parse(body, 1)  # the dialect's checks, one copy
        if chat.tools:
            raise BadRequest(
                f"{model} runs its own tools on the server; a request cannot bring tools"
            )
        max_tokens = c.count(body.get("max_completion_tokens"), "max_completion_tokens")
        max_tokens = max_tokens or c.count(body.get("max_tokens"), "max_tokens")
        temperature = c.number(body.get("temperature"), "temperature")
        budgets = _metadata(body.get("metadata"), self.config)
        spec = AgentSpec(
            input=task_text(chat.messages),
            agent=agent,
            team=team,
            isolation="sandbox" if self.sandbox and team is None else "default",
            temperature=temperature,
            max_tokens=max_tokens,
            **budgets,
        )
        from ...runs import validate_spec

        try:
            agent_cls = validate_spec(spec, self.config)
            if team is None and self.tools and agent_cls.accepts_tools:
                spec = dataclasses.replace(spec, tools=self.tools)
                validate_spec(spec, self.config)
        except UsageError as exc:
            raise BadRequest(str(exc)) from None
        return spec

    # -- runs -----------------------------------------------------------------------

    def cancel_all(self, reason: str = "the server is stopping") -> None:
        with self._lock:
            runs = list(self._active.values())
        for run in runs:
            run.cancel.cancel(reason)

    def wait_idle(self, timeout: float) -> bool:
        """Wait until no run is going on (their containers gone); False on timeout."""
        deadline = time.monotonic() + timeout
        while self.active:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)
        return True

    @property
    def active(self) -> int:
        """How many runs are going on (for tests and a clean stop)."""
        with self._lock:
            return len(self._active)

    def start(
        self, spec: AgentSpec, engine: Engine
    ) -> tuple[RunContext, Outbox, asyncio.Task[RunOutcome]]:
        """Start a run on the running loop (its own task: a handler that is cancelled
        stops it through its token, and waits for it, :func:`wait_out`)."""
        from ..._runcontext import RunContext
        from ...runs import run_spec

        run = RunContext()
        outbox = Outbox(run)
        run.on_delta = outbox.delta
        run.bus.subscribe(outbox.event)
        with self._lock:
            if len(self._active) >= MAX_RUNS:
                raise BadRequest(f"{MAX_RUNS} runs are going on already; try again later", 429)
            self._active[id(run)] = run

        async def go() -> RunOutcome:
            try:
                return await run_spec(spec, run, self.config, engine)
            finally:
                with self._lock:
                    self._active.pop(id(run), None)

        task = asyncio.ensure_future(go())
        task.add_done_callback(lambda _: outbox.wake())
        return run, outbox, task


def _read_teams(directory: Path) -> dict[str, str]:
    from ...patterns._teamfile import MAX_TEAM_BYTES, parse_team

    if not directory.is_dir():
        raise UsageError(f"--teams {directory}: not a directory")
    teams: dict[str, str] = {}
    for path in sorted(directory.glob("*.toml")):
        try:
            with path.open("rb") as file:
                data = file.read(MAX_TEAM_BYTES + 1)
        except OSError as exc:
            raise UsageError(f"cannot read team file {path}: {exc.strerror}") from exc
        text = data.decode("utf-8", "replace")
        parse_team(text, str(path))
        teams[path.stem] = text
    if not teams:
        raise UsageError(f"--teams {directory}: no *.toml team file there")
    return teams


# -- the HTTP side ------------------------------------------------------------------


_FAILURE_STATUS = {
    "usage": 400,
    "mount_refused": 400,
    "model_not_found": 404,
    "budget": 402,
    "cancelled": 410,
    "engine_unavailable": 503,
    "sandbox_unavailable": 503,
    "agent_not_installed": 503,
}


def failure_status(code: str) -> int:
    # 422, not 500, for a run that did not answer: clients retry 5xx, which would run
    # the whole agent again.
    return _FAILURE_STATUS.get(code, 422)


class AgentStream:
    """The ``chat.completion`` chunks of one served run."""

    def __init__(self, model: str, include_usage: bool) -> None:
        self.include_usage = include_usage
        self.base = {
            "id": c.new_id("chatcmpl-"),
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": model,
        }

    def _chunk(self, delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return c.sse({**self.base, "choices": [choice], **extra})

    def start(self) -> bytes:
        return self._chunk({"role": "assistant", "content": ""})

    def delta(self, text: str) -> bytes:
        return self._chunk({"content": text})

    def events(self, events: list[dict[str, Any]]) -> bytes:
        return self._chunk({}, jarvis={"events": events})

    def finish(self, usage: dict[str, int], outcome: dict[str, Any]) -> bytes:
        out = self._chunk({}, "stop", usage=usage, jarvis={"events": [], "run": outcome})
        if self.include_usage:
            out += c.sse({**self.base, "choices": [], "usage": usage})
        return out + b"data: [DONE]\n\n"

    @staticmethod
    def fail(status: int, message: str) -> bytes:
        return c.sse(openai_chat.error(status, message))


def run_summary(outcome: RunOutcome) -> dict[str, Any]:
    """What the final object says of the run besides its answer."""
    summary: dict[str, Any] = {
        "agent": outcome.agent,
        "engine": outcome.engine,
        "model": outcome.model,
        "turns": outcome.turns,
        "duration_s": outcome.duration_s,
    }
    if outcome.failure is not None:
        summary["failure"] = outcome.failure.to_dict()
    return summary


async def wait_out(run: RunContext, task: asyncio.Task[RunOutcome], reason: str) -> None:
    """Stop a run whose client is gone and wait until it has ended, so its containers
    are gone when the handler returns; a run that ignores its token is cancelled."""
    run.cancel.cancel(reason)
    try:
        await asyncio.wait_for(asyncio.shield(task), STOP_GRACE)
    except TimeoutError:
        log.warning("a served run did not stop within %.0f s; cancelling its task", STOP_GRACE)
        task.cancel()
    except asyncio.CancelledError:
        if task.done():  # the run itself ended cancelled
            return
        task.cancel()  # this handler is being cancelled (the server stops): so is the run
        raise
    except Exception:  # its outcome is nobody's now
        log.debug("a cancelled served run ended with an error", exc_info=True)
