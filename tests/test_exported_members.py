"""The public surface is exactly what ``__all__`` says (httpx's drift test)."""

from __future__ import annotations

import importlib

import pytest

import jarvisd

PACKAGES = [
    "jarvisd",
    "jarvisd.engines",
    "jarvisd.agents",
    "jarvisd.catalog",
    "jarvisd.protocol",
    "jarvisd.bridge",
    "jarvisd.executors",
    "jarvisd.http",
    "jarvisd.http.serve",
    "jarvisd.testing",
    "jarvisd.runs",
    "jarvisd.code",
    "jarvisd.mcp",
    "jarvisd.daemon",
    "jarvisd.sandbox",
    "jarvisd.tools",
    "jarvisd.memory",
    "jarvisd.traces",
    "jarvisd.external",
    "jarvisd.patterns",
    "jarvisd.gateway",
    "jarvisd.netpolicy",
    "jarvisd.acp",
]


@pytest.mark.parametrize("name", PACKAGES)
def test_all_names_resolve(name: str) -> None:
    module = importlib.import_module(name)
    for member in module.__all__:
        assert getattr(module, member) is not None, f"{name}.{member}"


def test_top_level_public_names_are_exported() -> None:
    public = {n for n in jarvisd._LAZY if not n.startswith("_")} | {"__version__"}
    assert public == set(jarvisd.__all__)


def test_import_is_lazy() -> None:
    import subprocess
    import sys

    code = "import sys, jarvisd.cli; print(','.join(m for m in ('httpx','ollama','docker','llama_cpp','asyncio') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
