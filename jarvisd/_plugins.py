"""Lazy registries: built-ins as ``"module:attr"`` strings, third parties by entry point.

One import error type; a plugin that claims a name already taken is rejected.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from ._errors import JarvisError

__all__ = ["PluginError", "import_from_string", "load_plugins"]


class PluginError(JarvisError):
    pass


def import_from_string(target: str) -> Any:
    module_name, _, attr = target.partition(":")
    if not module_name or not attr:
        raise PluginError(f'import string {target!r} must look like "module:attribute"')
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise PluginError(f"could not import module {module_name!r}: {exc}") from exc
    try:
        value = module
        for part in attr.split("."):
            value = getattr(value, part)
    except AttributeError:
        raise PluginError(f"module {module_name!r} has no attribute {attr!r}") from None
    return value


def load_plugins(group: str, builtins: Mapping[str, str]) -> dict[str, str]:
    """Built-ins plus entry points of ``group``, name -> import string."""
    # importlib.metadata costs ~50 ms: imported only when plugins are looked up.
    from importlib.metadata import entry_points

    found = dict(builtins)
    for ep in entry_points(group=group):
        if ep.name in found and found[ep.name] != ep.value:
            raise PluginError(
                f"plugin {ep.value!r} ({group}) claims the name {ep.name!r}, already taken by "
                f"{found[ep.name]!r}"
            )
        found[ep.name] = ep.value
    return found
