"""ToolRegistry: built-in tools as lazy import strings, third parties by entry point
(group ``jarvisd.tools``). A tool class is built with ``from_config(config, engine)``
when it has one, else with no arguments."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .._errors import UsageError
from .._plugins import import_from_string, load_plugins
from ._base import BaseTool

if TYPE_CHECKING:
    from .._config import Config
    from ..engines import Engine

__all__ = ["BUILTIN_TOOLS", "ToolRegistry", "build_tools"]

BUILTIN_TOOLS: dict[str, str] = {
    "calculator": "jarvisd.tools._calculator:CalculatorTool",
    "think": "jarvisd.tools._think:ThinkTool",
    "retrieval": "jarvisd.tools._builtin:RetrievalTool",
    "llm": "jarvisd.tools._builtin:LLMTool",
    "file_read": "jarvisd.tools._builtin:FileReadTool",
}


class ToolRegistry:
    @staticmethod
    def sources() -> dict[str, str]:
        return load_plugins("jarvisd.tools", BUILTIN_TOOLS)

    @classmethod
    def keys(cls) -> tuple[str, ...]:
        return tuple(sorted(cls.sources()))

    @classmethod
    def get(cls, name: str) -> type[BaseTool]:
        sources = cls.sources()
        if name not in sources:
            raise UsageError(f"unknown tool {name!r} (known: {', '.join(sorted(sources))})")
        tool_cls = import_from_string(sources[name])
        if not (isinstance(tool_cls, type) and issubclass(tool_cls, BaseTool)):
            raise UsageError(f"tool {name!r} ({sources[name]}) is not a BaseTool subclass")
        return tool_cls

    @classmethod
    def create(cls, name: str, config: Config, engine: Engine | None) -> BaseTool:
        tool_cls = cls.get(name)
        factory = getattr(tool_cls, "from_config", None)
        if factory is not None:
            tool = factory(config, engine)
        else:
            tool = _builtin(name, tool_cls, config, engine)
        if not isinstance(tool, BaseTool):
            raise UsageError(f"tool {name!r} did not build a BaseTool")
        return tool


def _builtin(
    name: str, tool_cls: type[BaseTool], config: Config, engine: Engine | None
) -> BaseTool:
    kwargs: dict[str, Any] = {}
    if name == "file_read":
        kwargs = {
            "roots": config.tools.file_read_roots,
            "max_bytes": config.tools.file_read_max_bytes,
        }
    elif name == "llm":
        if engine is None:
            raise UsageError("the llm tool needs an engine")
        kwargs = {"engine": engine, "model": config.tools.llm_model}
    elif name == "retrieval":
        kwargs = {"k": config.tools.memory_results}
    tool = tool_cls(**kwargs)
    tool.timeout = tool.timeout or config.tools.timeout
    return tool


def build_tools(
    names: Sequence[str], config: Config, engine: Engine | None = None
) -> list[BaseTool]:
    """The tools ``names`` (order kept, duplicates dropped); UsageError for unknown ones."""
    seen: dict[str, BaseTool] = {}
    for raw in names:
        name = raw.strip()
        if name and name not in seen:
            seen[name] = ToolRegistry.create(name, config, engine)
    return list(seen.values())
