"""A GGUF file's metadata (its key-value header), read without loading the model.

What ``serve-model``'s ``/api/show`` reports comes from here, as Ollama's does: the
architecture (``qwen2``, ``llama``), the context length the model was trained for, its
chat template, its size label. Only scalar and string values are kept; arrays (the
tokenizer's vocabulary) are skipped. The header is untrusted input: every count and
length is bounded, and a file that breaks a bound or ends early reads as what was read
up to there.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any, BinaryIO

__all__ = ["read_gguf_metadata"]

#: Key-value pairs read at most; real models have a few dozen.
MAX_KEYS = 4096
#: The longest string kept (a chat template is a few KiB); longer ones are skipped.
MAX_STRING = 256 * 1024
#: Items an array may declare (a vocabulary has ~150k); more is a broken file.
MAX_ARRAY = 16 * 1024 * 1024

_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
            10: "<Q", 11: "<q", 12: "<d"}  # fmt: skip
_STRING, _ARRAY = 8, 9


class _End(Exception):
    """The header ended early or broke a bound."""


def read_gguf_metadata(path: str | Path) -> dict[str, Any]:
    """The scalar and string metadata of the GGUF file at ``path`` ({} when it is not
    one, or cannot be read)."""
    found: dict[str, Any] = {}
    try:
        with open(path, "rb") as fh:
            if fh.read(4) != b"GGUF":
                return {}
            version = _unpack(fh, "<I")
            if version < 2:
                return {}
            _unpack(fh, "<Q")  # tensors
            count = _unpack(fh, "<Q")
            for _ in range(min(count, MAX_KEYS)):
                key = _string(fh)
                kind = _unpack(fh, "<I")
                value = _value(fh, kind)
                if key is not None and value is not None:
                    found[key] = value
    except (OSError, _End, struct.error, UnicodeDecodeError):
        pass
    return found


def _unpack(fh: BinaryIO, fmt: str) -> Any:
    size = struct.calcsize(fmt)
    data = fh.read(size)
    if len(data) != size:
        raise _End
    return struct.unpack(fmt, data)[0]


def _string(fh: BinaryIO) -> str | None:
    length = _unpack(fh, "<Q")
    if length > MAX_STRING:
        fh.seek(length, 1)  # skipped, not read
        return None
    data = fh.read(length)
    if len(data) != length:
        raise _End
    return data.decode("utf-8")


def _value(fh: BinaryIO, kind: int) -> Any:
    if kind in _SCALARS:
        return _unpack(fh, _SCALARS[kind])
    if kind == _STRING:
        return _string(fh)
    if kind == _ARRAY:
        item = _unpack(fh, "<I")
        count = _unpack(fh, "<Q")
        if count > MAX_ARRAY:
            raise _End
        if item in _SCALARS:
            fh.seek(struct.calcsize(_SCALARS[item]) * count, 1)
        elif item == _STRING:
            for _ in range(count):
                fh.seek(_unpack(fh, "<Q"), 1)
        else:
            raise _End  # nested arrays: not in any model's header
        return None
    raise _End
