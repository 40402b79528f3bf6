"""jarvis: a sandboxed, local-first agent runtime.

The public surface is re-exported here; implementation lives in private modules.
Names load on first use, so importing jarvisd (and `jarvis --help`) stays fast.
"""

from __future__ import annotations

import importlib
from typing import Any

from ._version import __version__

_LAZY = {
    "AgentContext": ".agents",
    "AgentResult": ".agents",
    "AgentSpec": ".runs",
    "BaseAgent": ".agents",
    "Budget": "._run",
    "BudgetExceeded": "._run",
    "CancelToken": "._run",
    "Cancelled": "._run",
    "Config": "._config",
    "ConfigError": "._errors",
    "DaemonError": "._errors",
    "DaemonHost": ".runs",
    "DaemonUnavailable": "._errors",
    "Engine": ".engines",
    "EngineError": "._errors",
    "EngineResponseError": "._errors",
    "EngineUnavailable": "._errors",
    "Event": "._events",
    "EventBus": "._events",
    "EventType": "._events",
    "Failure": ".runs",
    "FinishReason": "._messages",
    "Generation": "._messages",
    "Host": ".runs",
    "JarvisError": "._errors",
    "LocalHost": ".runs",
    "Message": "._messages",
    "ModelFileError": "._errors",
    "ModelNotFound": "._errors",
    "MountRefused": "._errors",
    "NoAnswer": "._errors",
    "Paths": "._paths",
    "ProtocolError": "._errors",
    "QueueFull": "._errors",
    "Role": "._messages",
    "RunContext": "._run",
    "RunOutcome": ".runs",
    "RunStopped": "._run",
    "SamplingOptions": "._messages",
    "SandboxError": "._errors",
    "SandboxUnavailable": "._errors",
    "ShuttingDown": "._errors",
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
    "run_spec": ".runs",
}

__all__ = [
    "AgentContext",
    "AgentResult",
    "AgentSpec",
    "BaseAgent",
    "Budget",
    "BudgetExceeded",
    "CancelToken",
    "Cancelled",
    "Config",
    "ConfigError",
    "DaemonError",
    "DaemonHost",
    "DaemonUnavailable",
    "Engine",
    "EngineError",
    "EngineResponseError",
    "EngineUnavailable",
    "Event",
    "EventBus",
    "EventType",
    "Failure",
    "FinishReason",
    "Generation",
    "Host",
    "JarvisError",
    "LocalHost",
    "Message",
    "ModelFileError",
    "ModelNotFound",
    "MountRefused",
    "NoAnswer",
    "Paths",
    "ProtocolError",
    "QueueFull",
    "Role",
    "RunContext",
    "RunOutcome",
    "RunStopped",
    "SamplingOptions",
    "SandboxError",
    "SandboxUnavailable",
    "ShuttingDown",
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
    "run_spec",
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
