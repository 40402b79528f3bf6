"""The inference gateway: a run's engine served over the HTTP APIs external agents
speak (OpenAI chat completions and Responses, Anthropic Messages, Gemini), one gateway
per run, on a private Unix socket or on loopback with a per-run token::

    async with Gateway(engine, run) as gw:
        env = {"OPENAI_BASE_URL": gw.url + "/v1", "OPENAI_API_KEY": gw.token}

Each dialect is a module of pure translate functions (``Dialect``); ``jarvis
serve-model`` uses the same ones.
"""

from ._common import BadRequest, ChatRequest, Dialect, StreamEncoder
from ._gateway import Gateway

__all__ = ["BadRequest", "ChatRequest", "Dialect", "Gateway", "StreamEncoder"]
