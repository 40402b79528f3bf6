"""jarvis: a sandboxed, local-first agent runtime.

The public surface is re-exported here; implementation lives in private modules.
Names load on first use, so importing jarvisd (and `jarvis --help`) stays fast.
"""

from __future__ import annotations

import importlib
from typing import Any

from ._version import __version__

_LAZY = {
    "Budget": "._run",
    "BudgetExceeded": "._run",
    "CancelToken": "._run",
    "Cancelled": "._run",
    "Config": "._config",
    "ConfigError": "._errors",
    "DaemonError": "._errors",
    "DaemonUnavailable": "._errors",
    "EngineError": "._errors",
    "EngineResponseError": "._errors",
    "EngineUnavailable": "._errors",
    "Event": "._events",
    "EventBus": "._events",
    "EventType": "._events",
    "FinishReason": "._messages",
    "Generation": "._messages",
    "JarvisError": "._errors",
    "Message": "._messages",
    "ModelFileError": "._errors",
    "ModelNotFound": "._errors",
    "MountRefused": "._errors",
    "Paths": "._paths",
    "ProtocolError": "._errors",
    "Role": "._messages",
    "RunContext": "._run",
    "RunStopped": "._run",
    "SamplingOptions": "._messages",
    "SandboxError": "._errors",
    "SandboxUnavailable": "._errors",
    "StreamChunk": "._messages",
    "TaskNotFound": "._errors",
    "ToolCall": "._messages",
    "ToolError": "._errors",
    "ToolResult": "._messages",
    "ToolSpec": "._messages",
    "Usage": "._messages",
    "UsageError": "._errors",
    "load_config": "._config",
    "paths": "._paths",
}

__all__ = [
    "Budget",
    "BudgetExceeded",
    "CancelToken",
    "Cancelled",
    "Config",
    "ConfigError",
    "DaemonError",
    "DaemonUnavailable",
    "EngineError",
    "EngineResponseError",
    "EngineUnavailable",
    "Event",
    "EventBus",
    "EventType",
    "FinishReason",
    "Generation",
    "JarvisError",
    "Message",
    "ModelFileError",
    "ModelNotFound",
    "MountRefused",
    "Paths",
    "ProtocolError",
    "Role",
    "RunContext",
    "RunStopped",
    "SamplingOptions",
    "SandboxError",
    "SandboxUnavailable",
    "StreamChunk",
    "TaskNotFound",
    "ToolCall",
    "ToolError",
    "ToolResult",
    "ToolSpec",
    "Usage",
    "UsageError",
    "__version__",
    "load_config",
    "paths",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'jarvisd' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
