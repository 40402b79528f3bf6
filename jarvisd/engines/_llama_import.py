"""Importing llama-cpp-python without its two stray files.

``llama_cpp._utils`` opens ``/dev/null`` twice at import (``outnull_file``,
``errnull_file``: where it points stdout and stderr while llama.cpp loads) and never
closes them, so every process that imports it ends with ``ResourceWarning: unclosed
file ... /dev/null`` printed twice. Both are swapped, once, for files on one
descriptor that Python does not own (``closefd=False``: nothing to warn about at
exit), and the originals closed. llama_cpp looks the names up at each use.
"""

from __future__ import annotations

import os
from types import ModuleType

__all__ = ["import_llama_cpp"]

_NAMES = ("outnull_file", "errnull_file")


def import_llama_cpp() -> ModuleType:
    """``llama_cpp``, imported (ImportError when it is not installed)."""
    import llama_cpp

    try:
        from llama_cpp import _utils
    except ImportError:  # pragma: no cover - a version without the module
        return llama_cpp
    if getattr(_utils, "_jarvis_quiet", False):
        return llama_cpp
    # Lives as long as the process, like the files it replaces.
    null = os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC)
    for name in _NAMES:
        old = getattr(_utils, name, None)
        setattr(_utils, name, open(null, "w", closefd=False))  # noqa: SIM115
        if old is not None and hasattr(old, "close"):
            old.close()
    _utils._jarvis_quiet = True  # type: ignore[attr-defined]
    return llama_cpp
