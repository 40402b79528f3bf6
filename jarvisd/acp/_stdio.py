"""``jarvis acp`` on stdin and stdout, with the first answer as early as can be.

An editor starting jarvis waits for the answer to ``initialize``. It is given here
with plain blocking reads and writes, before asyncio, the run's spec and config, and
the ACP SDK are imported (``jarvisd.acp._serve`` takes over after). A first message
that is anything else is handed on unread.
"""

from __future__ import annotations

import json
import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._serve import Prepare

__all__ = ["serve_stdio"]

#: The longest first line looked at here (a longer one is the wire's to refuse).
MAX_FIRST_LINE = 64 * 1024


def serve_stdio(prepare: Prepare) -> None:
    """Serve the client on stdin and stdout; ``prepare`` makes the spec and the config
    (a usage error it raises ends the command, on stderr). The protocol gets its own
    copy of stdout, and fd 1 becomes stderr: anything else that prints (a library,
    llama.cpp's C code) cannot put a stray line on the wire."""
    wire = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    unread, fs = _early_hello(wire)
    from ._serve import serve_fds

    serve_fds(prepare, wire, unread, fs)


def _early_hello(wire: int) -> tuple[bytes, tuple[bool, bool] | None]:
    """Read the first line; answer it if it is a plain ``initialize``. What was read
    and not answered, and the client's fs offer (None: nothing answered)."""
    buffer = b""
    while b"\n" not in buffer and len(buffer) <= MAX_FIRST_LINE:
        try:
            chunk = os.read(0, 65536)
        except OSError:
            return buffer, None
        if not chunk:
            return buffer, None
        buffer += chunk
    line, newline, rest = buffer.partition(b"\n")
    if not newline:
        return buffer, None
    try:
        message = json.loads(line)
    except (ValueError, RecursionError):
        return buffer, None
    from ._hello import client_fs, initialize_reply
    from ._jsonrpc import check_message

    if check_message(message) is not None or not isinstance(message, dict) or "id" not in message:
        return buffer, None
    reply = (
        initialize_reply(message.get("params")) if message.get("method") == "initialize" else None
    )
    if reply is None:
        return buffer, None
    data = (
        json.dumps(
            {"jsonrpc": "2.0", "id": message["id"], "result": reply},
            ensure_ascii=False,
            separators=(",", ":"),
        ).encode()
        + b"\n"
    )
    while data:
        data = data[os.write(wire, data) :]
    return rest, client_fs(message.get("params"))
