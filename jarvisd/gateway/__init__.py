"""The inference gateway: a run's engine served over the HTTP APIs external agents
speak (OpenAI chat completions and Responses, Anthropic Messages, Gemini), one gateway
per run, on a private Unix socket or on loopback with a per-run token::

    async with Gateway(engine, run) as gw:
        env = {"OPENAI_BASE_URL": gw.url + "/v1", "OPENAI_API_KEY": gw.token}

Each dialect is a module of pure translate functions (``Dialect``); ``jarvis
serve-model`` uses the same ones. Given the run's tools (a ``ToolDispatcher``), the
gateway serves them too, as an MCP server at ``MCP_PATH`` (``_mcp``).
"""

from ._common import BadRequest, ChatRequest, Dialect, StreamEncoder
from ._gateway import MCP_PATH, Gateway
from ._peer import PeerBinding

__all__ = [
    "MCP_PATH",
    "BadRequest",
    "ChatRequest",
    "Dialect",
    "Gateway",
    "PeerBinding",
    "StreamEncoder",
]
