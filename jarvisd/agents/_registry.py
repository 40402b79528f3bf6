"""AgentRegistry: built-in agents as lazy import strings, third parties by entry point
(group ``jarvisd.agents``), and a ``register`` decorator for code that defines agents."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, TypeVar

from .._errors import UsageError
from .._plugins import PluginError, import_from_string, load_plugins
from ..engines import Engine
from ._base import BaseAgent

__all__ = ["AgentRegistry"]

_A = TypeVar("_A", bound=type[BaseAgent])

BUILTIN_AGENTS: dict[str, str] = {
    "simple": "jarvisd.agents._simple:SimpleAgent",
    "orchestrator": "jarvisd.agents._orchestrator:OrchestratorAgent",
    "native_react": "jarvisd.agents._react:NativeReActAgent",
    "native_openhands": "jarvisd.agents._codeact:NativeOpenHandsAgent",
    "rlm": "jarvisd.agents._rlm:RLMAgent",
    # External agents (jarvisd.external): over ACP, each with its pinned npm tree, and
    # of the frame protocol with a runtime of their own (openhands, claude_code).
    "opencode": "jarvisd.external._kinds:OpencodeAgent",
    "codex": "jarvisd.external._kinds:CodexAgent",
    "claude": "jarvisd.external._kinds:ClaudeAgent",
    "gemini": "jarvisd.external._kinds:GeminiAgent",
    "openhands": "jarvisd.external._openhands:OpenHandsAgent",
    "claude_code": "jarvisd.external._claude_code:ClaudeCodeAgent",
}
ALIASES: dict[str, str] = {"react": "native_react"}


class AgentRegistry:
    _registered: ClassVar[dict[str, type[BaseAgent]]] = {}

    @classmethod
    def register(cls, key: str) -> Callable[[_A], _A]:
        """Register an agent class under ``key``; a key that is taken (a built-in, an
        alias, another class) is refused, never silently replaced."""

        def decorator(agent_cls: _A) -> _A:
            if key in BUILTIN_AGENTS or key in ALIASES:
                raise UsageError(f"agent key {key!r} is a built-in agent's key")
            existing = cls._registered.get(key)
            if existing is not None and existing is not agent_cls:
                raise UsageError(f"agent key {key!r} is already registered to {existing!r}")
            cls._registered[key] = agent_cls
            return agent_cls

        return decorator

    @classmethod
    def _sources(cls) -> dict[str, str]:
        sources = load_plugins("jarvisd.agents", BUILTIN_AGENTS)
        clash = sorted(cls._registered.keys() & sources.keys())
        if clash:
            key = clash[0]
            raise PluginError(
                f"plugin {sources[key]!r} (jarvisd.agents) claims the name {key!r}, already "
                f"registered to {cls._registered[key]!r}"
            )
        return sources

    @classmethod
    def keys(cls) -> tuple[str, ...]:
        return tuple(sorted({*cls._sources(), *ALIASES, *cls._registered}))

    @classmethod
    def get(cls, key: str) -> type[BaseAgent]:
        key = ALIASES.get(key, key)
        if key in cls._registered:
            return cls._registered[key]
        # A built-in is never replaced, so its lookup needs no scan of the installed
        # packages' entry points (about 50 ms on every `jarvis ask`); a plugin that
        # claims a built-in's name is reported by keys() (`jarvis agents list`).
        sources = BUILTIN_AGENTS if key in BUILTIN_AGENTS else cls._sources()
        if key not in sources:
            raise UsageError(f"unknown agent {key!r} (known: {', '.join(cls.keys())})")
        agent_cls = import_from_string(sources[key])
        if not (isinstance(agent_cls, type) and issubclass(agent_cls, BaseAgent)):
            raise UsageError(f"agent {key!r} ({sources[key]}) is not a BaseAgent subclass")
        return agent_cls

    @classmethod
    def create(cls, key: str, engine: Engine, model: str = "", **kwargs: Any) -> BaseAgent:
        agent_cls = cls.get(key)
        if kwargs.get("tools") and not agent_cls.accepts_tools:
            raise UsageError(f"agent {key!r} does not accept tools")
        return agent_cls(engine, model, **kwargs)
