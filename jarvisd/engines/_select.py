"""Building engines from config, and choosing one: explicit flag, then config, then the
first healthy (a reachable Ollama, else the embedded llama.cpp engine)."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping

from .._config import Config
from .._errors import EngineUnavailable, UsageError
from .._plugins import import_from_string, load_plugins
from ._base import Engine

__all__ = [
    "ENGINE_NAMES",
    "build_engine",
    "engine_for_agent",
    "engine_names",
    "ollama_host",
    "ollama_reachable",
    "select_engine",
]

log = logging.getLogger(__name__)

BUILTIN_ENGINES = {
    "llamacpp": "jarvisd.engines._llamacpp:LlamaCppEngine",
    "ollama": "jarvisd.engines._ollama:OllamaEngine",
    "openai": "jarvisd.engines._openai:OpenAIEngine",
}
ENGINE_NAMES = tuple(BUILTIN_ENGINES)


def engine_names() -> list[str]:
    return sorted(load_plugins("jarvisd.engines", BUILTIN_ENGINES))


def ollama_host(config: Config, env: Mapping[str, str] | None = None) -> str:
    """Where Ollama is: the config, else ``OLLAMA_HOST`` from ``env`` (the caller's
    environment; this process's when None), else the default."""
    from ._ollama import DEFAULT_HOST

    env = os.environ if env is None else env
    return config.engine.ollama.host or env.get("OLLAMA_HOST") or DEFAULT_HOST


def build_engine(
    name: str, config: Config, model: str = "", env: Mapping[str, str] | None = None
) -> Engine:
    """Construct (no I/O) the engine called ``name`` from config; ``env`` is the
    caller's engine-selecting environment (this process's when None)."""
    if name in config.credentials:
        # A cloud key the host holds, for external agents: the vendor's model, never
        # the local one engine.model names.
        from ._credential import CredentialEngine

        return CredentialEngine(name, config.credentials[name], model)
    model = model or config.engine.model
    if name == "llamacpp":
        from ._llamacpp import LlamaCppEngine

        c = config.engine.llamacpp
        return LlamaCppEngine(
            model or c.model, n_ctx=c.n_ctx, n_threads=c.n_threads, chat_format=c.chat_format
        )
    if name == "ollama":
        from ._ollama import OllamaEngine

        o = config.engine.ollama
        return OllamaEngine(
            ollama_host(config, env),
            model=model,
            timeout=o.timeout,
            connect_timeout=o.connect_timeout,
            max_context=o.max_context,
        )
    if name == "openai":
        from ._openai import OpenAIEngine

        oa = config.engine.openai
        return OpenAIEngine(
            oa.base_url, model=model, api_key=os.environ.get(oa.api_key_env, ""), timeout=oa.timeout
        )
    plugins = load_plugins("jarvisd.engines", BUILTIN_ENGINES)
    if name not in plugins:
        raise UsageError(f"unknown engine {name!r} (known: {', '.join(sorted(plugins))})")
    factory = import_from_string(plugins[name])
    engine = factory(config=config, model=model)
    if not isinstance(engine, Engine):
        raise UsageError(f"engine plugin {name!r} did not build an Engine")
    return engine


def engine_for_agent(config: Config, explicit: str | None, agent: str) -> str | None:
    """The engine a run of ``agent`` names: ``explicit`` (``--engine``), else the
    credential whose ``agents`` list it (``[credentials.NAME] agents = [...]``), else
    None (the config's default)."""
    if explicit:
        return explicit
    for name, credential in config.credentials.items():
        if agent in credential.agents:
            return name
    return None


def ollama_reachable(
    config: Config, timeout: float = 0.3, env: Mapping[str, str] | None = None
) -> bool:
    import httpx

    host = ollama_host(config, env)
    if "://" not in host:
        host = "http://" + host
    try:
        return httpx.get(host.rstrip("/") + "/api/tags", timeout=timeout).status_code == 200
    except httpx.HTTPError:
        return False


def select_engine(
    config: Config,
    explicit: str | None = None,
    model: str = "",
    env: Mapping[str, str] | None = None,
) -> Engine:
    """The engine to use now. Explicit choices are honoured even when unreachable (the
    first call then fails with a clear EngineUnavailable); ``auto`` probes. ``env`` is
    the caller's engine-selecting environment (``AgentSpec.env``; None: this process's)."""
    name = explicit or config.engine.default
    if name != "auto":
        return build_engine(name, config, model, env)
    if ollama_reachable(config, env=env):
        log.debug("auto: using the reachable Ollama")
        return build_engine("ollama", config, model, env)
    from ._llamacpp import llama_cpp_available

    if llama_cpp_available():
        return build_engine("llamacpp", config, model, env)
    raise EngineUnavailable(
        "no engine available: no Ollama answers and llama-cpp-python is not installed; "
        "run `make setup`, start Ollama, or pass --engine openai with a server"
    )
