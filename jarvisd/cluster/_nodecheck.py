"""``jarvis cluster doctor``'s checks of one node, run on that node (a Ray task pinned
there by ``_doctor``): what a task placed on it would find. Nothing here imports Ray.

A node is checked for what it advertises: every node for jarvis itself (the same
version as jarvisd's) and the engine a task would use there (the embedded model's file,
or the Ollama/OpenAI URL reachable from the node); a node with the ``docker`` resource
for its container engine and the sandbox image; each ``model:NAME`` for that model.
"""

from __future__ import annotations

import socket
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from jarvisd.sandbox._doctor import Check

if TYPE_CHECKING:
    from collections.abc import Mapping

    from jarvisd._config import Config

__all__ = ["check_node", "node_config"]

#: Seconds an engine URL has to accept a connection from the node.
_CONNECT_S = 3.0


def node_config(config: Config) -> Config:
    """What of ``config`` travels to the nodes: the sections the checks read (sandbox,
    engine), none that holds a credential's name or anything secret."""
    from jarvisd._config import Config

    return Config(sandbox=config.sandbox, engine=config.engine)


def check_node(config: Config, resources: Mapping[str, float], version: str) -> list[Check]:
    """The checks of this node (see the module docstring), each ok or not with a fix."""
    from jarvisd._version import __version__

    checks = [
        Check(
            "jarvis",
            __version__ == version,
            f"jarvisd {__version__}",
            "" if __version__ == version else f"install jarvisd {version} here (jarvisd's)",
        )
    ]
    if resources.get("docker", 0.0) >= 1:
        checks += _docker_checks(config)
    for name in sorted(k.removeprefix("model:") for k in resources if k.startswith("model:")):
        checks.append(_model_check(name, f"model:{name}"))
    checks.append(_engine_check(config))
    return checks


def _docker_checks(config: Config) -> list[Check]:
    from jarvisd.sandbox import connect
    from jarvisd.sandbox._image import image_present

    fix = "start the node's container engine (and export its DOCKER_HOST to ray start)"
    try:
        client = connect(config, timeout=10)
        version = client.version().get("Version", "?")
    except Exception as exc:  # SandboxError, or the engine's own
        return [Check("docker", False, f"no container engine: {exc}", fix)]
    try:
        image = config.sandbox.image
        present = image_present(client, image)
    except Exception as exc:
        return [Check("docker", False, f"engine {version} did not list images: {exc}", fix)]
    finally:
        client.close()
    return [
        Check("docker", True, f"engine {version}"),
        Check(
            "image",
            present,
            f"{image} {'present' if present else 'missing'}",
            "" if present else "jarvis sandbox build (on this node)",
        ),
    ]


def _model_check(name: str, what: str) -> Check:
    """The model's file is on this node (not hashed here: loading verifies it)."""
    import os
    from pathlib import Path

    from jarvisd.catalog import get_entry, model_file

    fix = f"jarvis models pull {name} (on this node)"
    if name.endswith(".gguf") or os.sep in name:
        path = Path(name).expanduser()
    else:
        try:
            path = model_file(get_entry(name))
        except Exception as exc:  # not in the catalog
            return Check(what, False, str(exc)[:200], "name a catalog model or a .gguf path")
    there = path.is_file()
    return Check(what, there, f"{path}" + ("" if there else " missing"), "" if there else fix)


def _engine_check(config: Config) -> Check:
    """The engine a task here would use by default, and whether it is there."""
    from jarvisd.engines._select import ollama_host, ollama_reachable

    kind = config.engine.default
    if kind == "llamacpp":
        return _embedded_check(config)
    url = config.engine.openai.base_url if kind == "openai" else ollama_host(config)
    if kind == "auto" and not ollama_reachable(config, timeout=_CONNECT_S):
        # select_engine's own test: no Ollama answers, so the embedded engine serves.
        found = _embedded_check(config)
        return Check("engine", found.ok, f"auto (no Ollama at {url}): {found.detail}", found.fix)
    why = _reach(url)
    return Check(
        "engine",
        not why,
        f"{kind} at {url}: {why or 'reachable'}",
        "" if not why else "make the URL reachable from this node, or serve the model here",
    )


def _embedded_check(config: Config) -> Check:
    """The embedded engine on this node: llama-cpp-python there, and the model's file."""
    from jarvisd.engines._llamacpp import llama_cpp_available

    model = config.engine.model or config.engine.llamacpp.model
    if not model:
        from jarvisd.catalog import strongest_model

        model = strongest_model().name
    if not llama_cpp_available():
        return Check("engine", False, f"embedded {model}: llama-cpp-python is not installed",
                     "pip install 'jarvisd[llama]' on this node (setup.sh builds its wheel)")  # fmt: skip
    found = _model_check(model, "engine")
    return Check("engine", found.ok, f"embedded {model}: {found.detail}", found.fix)


def _reach(url: str) -> str:
    """ "" when something accepts a connection at ``url``'s host and port; else why."""
    parts = urlsplit(url if "://" in url else f"http://{url}")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((parts.hostname or "127.0.0.1", port), _CONNECT_S):
            return ""
    except OSError as exc:
        return f"unreachable ({exc.strerror or exc})"
