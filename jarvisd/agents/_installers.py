"""Agents that live in an environment of their own, and the function that installs it.

``"module:attr"`` strings, resolved when an install is asked for (``jarvis agents
install``, the console's agents page): listing them imports no installer.
"""

from __future__ import annotations

__all__ = ["INSTALLERS"]

INSTALLERS = {
    "openhands": "jarvisd.external._openhands_venv:ensure_venv",
    "claude_code": "jarvisd.external._claude_code_install:ensure_sdk",
}
