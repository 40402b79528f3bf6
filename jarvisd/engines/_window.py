"""How large the embedded engine's context window may grow for a request.

``engine.llamacpp.n_ctx`` (4096) is where the window starts, not a wall: an external
agent's first prompt (opencode's ten tools, codex's) is 7,000 to 8,500 tokens. When a
request does not fit, the engine reloads the model with a window that holds the prompt
and the reply, when the model was trained for that many tokens (the catalog's
``context_length``, else the file's own) and its key/value cache fits in half the
memory the machine has free. When nothing fits, the error says what to change.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

__all__ = ["grown_window", "kv_bytes_per_token", "memory_available", "requested_tokens"]

#: Windows grow in steps of this many tokens (fewer reloads for similar requests).
STEP = 4096
_REQUESTED = re.compile(r"Requested tokens \((\d+)\) exceed context window")


def requested_tokens(message: str) -> int | None:
    """The prompt size in llama.cpp's "Requested tokens (N) exceed context window of
    M" error, or None when ``message`` is another error."""
    match = _REQUESTED.search(message)
    return int(match.group(1)) if match else None


def kv_bytes_per_token(metadata: Mapping[str, str]) -> int:
    """Bytes of key/value cache one token costs (f16), from the GGUF metadata; a
    generous guess when the file does not say."""
    arch = metadata.get("general.architecture", "")

    def number(key: str) -> int:
        try:
            return int(metadata.get(f"{arch}.{key}", "0"))
        except ValueError:
            return 0

    layers, embd = number("block_count"), number("embedding_length")
    heads = number("attention.head_count")
    kv_heads = number("attention.head_count_kv") or heads
    if not (layers and embd and heads):
        return 256 * 1024
    return 2 * layers * kv_heads * (embd // heads) * 2


def memory_available() -> int:
    """Bytes the kernel says can be had without swapping (0 when unknown)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def grown_window(
    current: int, needed: int, trained: int, per_token: int, available: int
) -> int | None:
    """The window to reload with so that ``needed`` tokens (prompt and reply) fit, or
    None: past what the model was trained for, or its cache would take more than half
    of the ``available`` memory (unknown memory: no growth)."""
    size = -(-needed // STEP) * STEP
    size = min(size, trained) if trained else size
    if size <= current or size < needed:
        return None
    if (size - current) * per_token > available // 2:
        return None
    return size


def no_room(requested: int, window: int) -> str:
    """What to tell the user when a request cannot fit in any window this machine has."""
    return (
        f"the prompt ({requested} tokens) does not fit in the model's context window "
        f"({window} tokens; it can grow no further here): raise engine.llamacpp.n_ctx if "
        "the model and memory allow, or give the agent fewer tools (--tools, e.g. "
        "--tools read)"
    )
